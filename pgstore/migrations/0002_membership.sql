-- The membership (membership.Membership): members, the revision and the
-- changelog watchers read.

-- The membership's revision: one row. Every change takes its row lock
-- first (SELECT ... FOR UPDATE) and raises rev by one per event, so changes
-- commit in revision order and the changelog never has a gap that fills
-- in later.
CREATE TABLE pgstore_membership_rev (
    id  boolean PRIMARY KEY DEFAULT true CHECK (id),
    rev bigint NOT NULL
);
INSERT INTO pgstore_membership_rev (id, rev) VALUES (true, 0);

-- A name's latest run, live or not: the row is kept after the run left or
-- expired, since lease_gen fences older generations for good.
-- state: 1 Serving, 2 Draining, 3 Gone (membership.State). departed: the run
-- left (rather than expired).
CREATE TABLE pgstore_members (
    name        text PRIMARY KEY,
    address     text NOT NULL,
    state       smallint NOT NULL CHECK (state BETWEEN 1 AND 3),
    kinds       text[] NOT NULL,
    lease_gen   bigint NOT NULL CHECK (lease_gen > 0),
    max_message bigint NOT NULL,
    deadline    timestamptz NOT NULL,
    live        boolean NOT NULL,
    departed    boolean NOT NULL
);
-- The sweep's look-up of live runs past their deadline.
CREATE INDEX pgstore_members_due ON pgstore_members (deadline) WHERE live;

-- The changelog: one row per change, rev dense from 1. type is
-- membership.EventType; the member columns are the member after the change
-- (Left, Expired: as it was last); from_state is the state before a
-- StateChanged (0 otherwise). Old rows are pruned (Options.KeepEvents).
CREATE TABLE pgstore_member_events (
    rev         bigint PRIMARY KEY,
    type        smallint NOT NULL,
    from_state  smallint NOT NULL,
    name        text NOT NULL,
    address     text NOT NULL,
    state       smallint NOT NULL,
    kinds       text[] NOT NULL,
    lease_gen   bigint NOT NULL,
    max_message bigint NOT NULL
);
