-- The state store (relocation.StateStore): one row per object, its state as
-- its owner last wrote it.

-- An object's state: the bytes and the owner generation of the owner that
-- wrote them; written_at is the database's time of the write, for
-- operators. A write lands only while the object's pgstore_locations row is
-- Active and names the writer (host, lease_gen, owner_gen), checked in the
-- statement that writes (Store.WriteStates). Ownership changes never touch
-- the row. The foreign key deletes it with the location row (Store.Delete),
-- in the same statement: its cascade reads with a fresh snapshot, so it
-- also deletes a first state that a write committed while the Delete waited
-- for the location row's lock.
CREATE TABLE pgstore_object_state (
    kind       text NOT NULL,
    id         text NOT NULL,
    owner_gen  bigint NOT NULL,
    data       bytea NOT NULL,
    written_at timestamptz NOT NULL,
    PRIMARY KEY (kind, id),
    FOREIGN KEY (kind, id) REFERENCES pgstore_locations (kind, id) ON DELETE CASCADE
);
