-- Each member's application version (membership.Member.Version): hosts
-- prefer the newest version when they place objects and drain, so that a
-- rolling upgrade moves each object once. Rows of runs that joined before
-- this migration have none ('').
ALTER TABLE pgstore_members ADD COLUMN version text NOT NULL DEFAULT '';
ALTER TABLE pgstore_member_events ADD COLUMN version text NOT NULL DEFAULT '';
