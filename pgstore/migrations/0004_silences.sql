-- Silences of the store (relocation.Store, "Silences"; membership's own
-- rule): a database that heard no renewal of any host for longer than half
-- a lease was away — restarted, failed over, cut off — and must not turn
-- its absence into expiries and takeovers.

-- renewed_at is the database's time of the lease's last renewal (or of the
-- extension a silence gave it); the latest of them is when the store last
-- heard from a host. ttl_us is the lease's length, as the host asked for it.
ALTER TABLE pgstore_leases
    ADD COLUMN renewed_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN ttl_us     bigint NOT NULL DEFAULT 3500000 CHECK (ttl_us > 0);
CREATE INDEX pgstore_leases_renewed ON pgstore_leases (renewed_at);

-- The same for the membership's leases.
ALTER TABLE pgstore_members
    ADD COLUMN renewed_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX pgstore_members_renewed ON pgstore_members (renewed_at);

-- A Join is contact too, whether or not it succeeds (a host reached the
-- store): its time is kept with the revision, which every Join locks.
ALTER TABLE pgstore_membership_rev
    ADD COLUMN contact_at timestamptz NOT NULL DEFAULT now();
