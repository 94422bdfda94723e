package pgstore

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// inTx runs fn in a transaction on pool whose locks a stalled client
// cannot hold for longer than limit.
//
// The package's transactions lock rows other hosts need: a renewal its
// member's row and, at the end of a silence, every row due; a membership
// change the revision row that every change and expiry sweep takes. A
// client that stops between two statements of one (a SIGSTOP, a starved
// CPU, a network cut that leaves the connection open) would otherwise
// hold them until the server notices the connection is gone — hours with
// the kernel's default keepalive — and every sweep behind it would wait:
// the membership would never expire that host, nor any other. So each
// transaction tells the server (SET LOCAL, in the statement that begins
// it: no extra round trip) to end the session if it waits for this
// client's next statement longer than limit. The client learns it from
// its next call's error (a stall, which its caller retries); its
// transaction is rolled back and its locks released.
//
// limit is the lease the transaction serves (the membership's TTL, the
// lease being renewed): a client silent that long inside a transaction
// has stalled past that lease anyway. The server's clock measures it,
// from the moment the transaction waits for the client, not the store's
// (possibly manual) clock.
func inTx(ctx context.Context, pool *pgxpool.Pool, limit time.Duration, fn func(pgx.Tx) error) error {
	ms := max(limit.Milliseconds(), 1)
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{
		BeginQuery: "BEGIN; SET LOCAL idle_in_transaction_session_timeout = " + strconv.FormatInt(ms, 10),
	}, fn)
}
