// Package pgstore is the Location Store (relocation.Store, docs/architecture.md, "Relocation"),
// the objects' state store beside it (relocation.StateStore) and the
// membership (membership.Membership) on Postgres, through a pgxpool.Pool
// the caller owns. Store and Membership pass the same conformance suites
// as the in-memory implementations (relocation/storetest,
// membership/membershiptest). A host opens three pools (OpenPools): its
// store work on one, its lease checks and membership on another, and its
// renewals on a third that nothing else uses, so that no other call ever
// makes a renewal wait for a connection.
//
// # Schema
//
// One schema, in tables named pgstore_*, made by the migrations embedded
// in the package (migrations/NNNN_name.sql). Migrate applies the missing
// ones in order, in one transaction under a transaction-level advisory
// lock, and records each in pgstore_schema_version: it is idempotent and
// safe to run from several processes at once. Open and OpenMembership run
// it.
//
// # Invariants
//
//   - Leases are judged by one clock, the database's: every statement that
//     compares a deadline computes "now" inside the statement (the
//     statement's own start, statement_timestamp(), plus the test offset:
//     a statement after one that waited for a lock judges by a time after
//     the wait) and never takes a time from the caller's machine.
//     Store and Membership return durations or the database's own
//     deadlines; a host keeps its own lease by the local-time rule
//     (membership.LocalLease). Options.ManualClock and Advance are a test
//     facility that freezes and steps that clock.
//   - Every Location Store write is one statement that decides and writes
//     at once: it locks the object's row (SELECT ... FOR UPDATE, which in
//     READ COMMITTED yields the row's latest version), compares it with the
//     expected ownership, checks the writer's lease in the same statement,
//     writes only if all hold, and returns the row it judged. So a conflict
//     (*relocation.ConflictError with the row as it is), a missing row
//     (relocation.ErrNoRow) and an expired lease (relocation.ErrLeaseExpired)
//     are told apart without a second read. A conditional write is judged
//     on the ownership first: a stale expectation is a conflict whatever
//     the lease. Reserve checks the host's lease first.
//   - Object state lives in pgstore_object_state, one row per object
//     (kind, id, the writer's owner generation, the bytes, the time of the
//     write). WriteStates writes a whole batch in one statement: the
//     batch goes as arrays, and the statement locks FOR SHARE the location
//     rows that are Active and name each writer (host, lease generation,
//     owner generation), writes the states of those writes only, and
//     returns the others as fenced. A location write waits for that lock,
//     or, if it came first, the lock re-reads the changed row and drops
//     the write (READ COMMITTED re-checks a locked row's latest version):
//     the fence and the write are one atomic step. The state row's foreign
//     key deletes it with the location row (Delete); no ownership change
//     touches it.
//   - The writer's lease: Reserve's host, NewOwner's new host, and for
//     Commit, Preserve and Delete the expected owner (host and lease
//     generation), except on a Preserved row, which has no owner.
//   - Every membership change (join, state change, leave, expiry) is one
//     transaction that holds the lock of the single revision row, expires
//     what is due first, and appends its event to the changelog with the
//     next revision, so revisions are dense and commit in order. A NOTIFY
//     sent at commit wakes the watchers, which read the changelog; after a
//     lost connection they read it again from where they were (NOTIFYs are
//     lost then, the changelog is not), and get a Sync when it no longer
//     reaches back that far. A sweep goroutine expires leases while no call
//     comes in; nothing runs after Close.
//   - No call holds locks across its client's stall past a lease: a
//     renewal (Store.RenewLease, Membership.Renew) is one batch, which
//     the server runs as one transaction without waiting for the client;
//     a membership change, whose client decides between statements, has
//     the server end its transaction once its client is silent inside it
//     for longer than the membership's lease (batch.go). A client stopped
//     mid-call would otherwise hold up every takeover of its objects and
//     every expiry sweep until the server noticed its connection was gone.
//   - Transient failures (connection refused or lost, serialization
//     failure or deadlock, server shutting down, a transaction ended for
//     its client's silence) are errors of kind
//     payload.Unavailable: the call may be retried with the same
//     arguments. A call whose context is done returns ctx.Err() and writes
//     nothing; one cancelled in flight may or may not have written, as the
//     interfaces allow. Generations and versions live in bigint columns:
//     above math.MaxInt64 they are refused (ErrGenerationRange).
package pgstore
