// Package pgbridge delivers rows of Postgres inbox tables to berth objects
// and handlers, and publishes messages into such tables (docs/architecture.md, "pgbridge").
//
// A row is a message: its key names the object (or group), its type and
// content_type name the message type and codec, and its payload is the
// encoded body. A service inserts rows inside its own transactions (Send
// with a pgx.Tx: the outbox pattern); a Broker's subscriptions claim them,
// run them and settle each row by its outcome: Ack (delete), Retry or
// RetryAfter (ready again later), Drop (delete, counted apart) or DeadLetter
// (moved to the dead-letter table).
//
// # Claim forms
//
//   - RowLock: SELECT … FOR UPDATE SKIP LOCKED in a transaction held while
//     the handler runs; the settlement commits in it (Delivery.Tx: writes of
//     the handler, a reply among them, commit with the settlement). Nothing is
//     written at claim.
//   - Lease: the claim sets locked_until (the token) and counts the attempt;
//     settlements are fenced on the token; the lease is extended every half
//     lease while the handler runs; a settlement after the lease was taken
//     over changes nothing (ErrLeaseLost).
//   - Advisory: a session advisory lock per key on a held connection, then
//     the key's oldest row.
//
// One row for each free worker (Batch 1), or batches of up to Batch rows in
// one claim, settled with array statements (= ANY($1), unnest) — one
// statement per outcome kind, not one per row. A row-lock batch shares one
// transaction: its settlements take effect together, and a statement the
// server refuses (the handler's, in Delivery.Tx, or a settlement's) rolls
// the whole claim back. A one-row claim's rollback is then the row's retry,
// counted outside the rolled-back transaction (after RetryDelay; dead-lettered
// past MaxAttempts), so a row that fails every time does not loop. A
// batch's rows are reported rolled back (ErrBatchRolledBack) and the
// claimer takes each of them again on its own, so one bad row does not
// hold back the rest. In the lease and advisory forms each row settles on
// its own: the array statements go in one round trip, and if the server
// refuses one of them (nothing of it then commits), each row is settled
// alone — a row whose settlement is refused becomes a counted retry.
//
// A handler's context ends after Subscription.HandlerTimeout (default a
// minute). Row-lock and advisory claimers hold a connection while their
// handlers run, so Subscribe keeps one connection of the pool free of them.
// A lease whose claimer died runs out and the row is made claimable again
// by whichever claimer comes first, every PollInterval (at most once a
// second).
//
// # Payload mode and row mode
//
// In payload mode the codec (from the broker's payload.Registry, by the
// row's content_type) decodes the payload straight from the bytes the driver
// read — lent, not copied. Objects copies the payload once into the host's
// pool (counted in its copy accounting, Host.PayloadStats), because the
// object runs it after the row's buffer is reused; the owner decodes it in
// its turn. Headers (a jsonb object of strings) are parsed on the first call
// of Delivery.Headers. In row mode (Rows) the table has no payload column;
// the handler reads Table.RowColumns as the driver read them; no codec runs.
//
// # Invariants
//
//   - Every claimed row is settled exactly once by its claim, or left to be
//     claimed again (a rolled-back transaction, an expired lease, a closed
//     connection): never lost, never settled twice. A row may run more than
//     once when its claim dies after the handler ran (at-least-once
//     execution; make handlers idempotent or use RowLock and do the work in
//     Delivery.Tx).
//   - Per-key order: Advisory always, RowLock and Lease with Ordered, runs a
//     key's rows one at a time in id order, batches included.
//   - A row whose payload does not decode is settled by the decode policy
//     before any handler runs, and counted. A handler's panic is a retry.
//     A retry whose delay the handler did not choose (Retry, a panic, an
//     Objects error, a rolled-back claim) waits RetryDelay (default
//     Backoff: attempt⁴ seconds with jitter, capped at a day), and
//     MaxAttempts (DefaultMaxAttempts with a dead-letter table) ends
//     retries; a bad row never stops a subscription.
//   - Stop finishes in-flight deliveries and settles them; Close leaves them
//     to be claimed again.
//   - Every claim and settlement statement has a deadline
//     (Config.StatementTimeout); no statement runs under a lock another
//     claimer needs. Two locks are held across a statement, each private
//     to one claimer: a lease claim's extender mutex (orders its own
//     extension and settlement) and a row-lock claim's transaction lock
//     (its rows, running side by side, take the transaction one statement
//     at a time). The others are leaves, held for a few instructions.
//
// # Publishing and listen_notify
//
// Repository publishes into a fixed table, Routed into the table the
// message's type name is routed to (Config.Routes; none: ErrNoRoute). Both
// check that the broker is not shut down (ErrClosed) and that the table can
// hold the message's headers (CapacityExceeded). Send encodes a typed value
// into a reused buffer and publishes it. Objects publishes its objects'
// replies through Routed unless ObjectOptions.Replies says otherwise. With
// Config.ListenNotify the insert also runs pg_notify on the table's channel
// — at most once per NotifyCooldown, with one trailing notify, for an
// autocommit insert; always in a transaction, where Postgres delivers it at
// the commit — and this process's subscriptions of the table are woken
// directly (never before the row is visible); other processes hear it on
// their broker's one listener connection. After the listener reconnects,
// every subscription claims at once. PollInterval (default 1 s) stays the
// floor. No triggers.
//
// SendWith reports the inserted row's id and takes row options: Priority,
// RunAt (not claimed before) and a DedupeKey (a message whose dedupe key is
// that of a row still in the table is not inserted: Published.Duplicate).
// SendMany inserts many messages with one statement. Broker.Redrive moves
// dead letters back into their inbox, PruneDeadLetters deletes old ones;
// Subscription.Pause and Resume stop and restart one subscription's claims;
// Broker.Backlog reports each subscription's claimable rows and how long
// the next has waited.
//
// # Tables
//
// Migrate creates an inbox table with the default columns, its indexes (the
// partial index on the ready set, the (key, id) index the order guard uses,
// the leased-rows index the lease rescue uses), the dedupe column with its
// unique index, and a dead-letter table; see InboxDDL for the first step's
// SQL. It is versioned per table (pgbridge_schema_version) and takes an
// advisory lock, so processes that migrate at once all succeed. A table of your own works if it has the columns a
// subscription reads (id, key, attempt, run_at; type, content_type and
// payload in payload mode; locked_until for the lease form); name them in
// Table.Columns, "-" for a column it does not have.
package pgbridge
