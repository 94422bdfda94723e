package pgstore

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A client stalled in the middle of a transaction holds what it locked.
//
// The package's calls of more than one statement lock rows other hosts
// need: a renewal its own row and, at the end of a silence, every row due;
// a membership change the revision row that every change and expiry sweep
// takes. A client that stops between two statements of one (a SIGSTOP, a
// starved CPU, a network cut that leaves the connection open) would hold
// them until the server noticed its connection was gone — hours with the
// kernel's default keepalive — and the takeovers of its objects, the
// sweeps that would expire it, and the renewals of every other host
// waiting behind those rows would wait as long. Two rules keep that from
// happening:
//
//   - The renewals (Store.RenewLease, Membership.Renew), which every host
//     makes every few hundred milliseconds, are a batch: every statement
//     goes in one write, and the server runs them as one implicit
//     transaction and commits it without waiting for the client
//     (sendBatch). A stalled client cannot hold their locks at all, and a
//     renewal is one round trip.
//   - A membership change needs the client's decision between statements
//     (inChange). Its transaction tells the server to end it if the client
//     is silent inside it for longer than the membership's lease (inTx). A
//     client silent that long has stalled past its lease anyway; it learns
//     of it from its next call's error (Unavailable: a stall, which its
//     caller retries).

// sendBatch sends b on pool and reads its results with read; the batch's
// statements run in one implicit transaction (all or nothing).
func sendBatch(ctx context.Context, pool *pgxpool.Pool, b *pgx.Batch, read func(pgx.BatchResults) error) error {
	br := pool.SendBatch(ctx, b)
	err := read(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// inTx runs fn in a transaction on pool that the server ends (and its
// locks with it) once its client has been silent inside it for longer
// than limit. The limit is set in the statement that begins the
// transaction: no extra round trip. The server's clock measures it, not
// the store's (possibly manual) one.
func inTx(ctx context.Context, pool *pgxpool.Pool, limit time.Duration, fn func(pgx.Tx) error) error {
	ms := max(limit.Milliseconds(), 1)
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{
		BeginQuery: "BEGIN; SET LOCAL idle_in_transaction_session_timeout = " + strconv.FormatInt(ms, 10),
	}, fn)
}
