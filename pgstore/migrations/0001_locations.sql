-- The Location Store (relocation.Store): host leases and one row per object.

-- A host's lease: its generation (one per process run) and its deadline by
-- the database's clock. Looked up by host (the primary key) in every write.
CREATE TABLE pgstore_leases (
    host     text PRIMARY KEY,
    gen      bigint NOT NULL CHECK (gen >= 0),
    deadline timestamptz NOT NULL
);

-- An object's row. host is '' and lease_gen 0 while the row is Preserved.
-- state: 1 Reserved, 2 Active, 3 Preserved (relocation.RowState). ord is the
-- receive-order state only Preserve writes (NULL: none).
CREATE TABLE pgstore_locations (
    kind       text NOT NULL,
    id         text NOT NULL,
    state      smallint NOT NULL CHECK (state BETWEEN 1 AND 3),
    host       text NOT NULL DEFAULT '',
    lease_gen  bigint NOT NULL DEFAULT 0,
    object_gen bigint NOT NULL,
    owner_gen  bigint NOT NULL,
    version    bigint NOT NULL,
    ord        bytea,
    PRIMARY KEY (kind, id)
);
