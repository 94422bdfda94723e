package pgstore

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// clockSQL is the store's time in every statement: $1 is NULL (the
// database's statement_timestamp(), when the statement began) unless the
// clock is manual, when it is the frozen database time; $2 is the test
// offset in microseconds. Every statement that judges a lease uses it, and
// only it: the caller's clock never enters a comparison.
//
// Not now(): that is when the transaction began, and a renewal or a
// membership change is a transaction of several statements, which may
// wait for a lock in one of them (the revision lock behind other changes;
// a lease row behind a takeover). A lease dated from before that wait
// would be short by it — a Join that waited a lease for the revision lock
// would commit an expired member — and a lease judged by a time from
// before a lock was granted could miss what the lock's holder did.
// statement_timestamp() is taken again by each statement of a batch or
// transaction, so a statement that follows the one that waited judges and
// dates by a time after the wait.
const clockSQL = `(coalesce($1::timestamptz, statement_timestamp()) + $2::bigint * interval '1 microsecond')`

// clock is a store's view of the database's clock: the database's time,
// frozen at Open for a manual clock, plus the offset Advance adds. Safe for
// concurrent use.
type clock struct {
	mu     sync.Mutex
	frozen *time.Time    // guarded by mu; nil: the running database clock
	offset time.Duration // guarded by mu
}

// newClock reads the database's time for a manual clock.
func newClock(ctx context.Context, pool *pgxpool.Pool, manual bool) (*clock, error) {
	c := &clock{}
	if manual {
		var t time.Time
		if err := pool.QueryRow(ctx, "SELECT now()").Scan(&t); err != nil {
			return nil, err
		}
		c.frozen = &t
	}
	return c, nil
}

// args returns the values of clockSQL's $1 and $2.
func (c *clock) args() (any, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.frozen != nil {
		return c.frozen.Add(c.offset), 0
	}
	return nil, c.offset.Microseconds()
}

// advance moves the clock forward by d (d < 0 panics).
func (c *clock) advance(d time.Duration) {
	if d < 0 {
		panic("pgstore: Advance by a negative duration")
	}
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}
