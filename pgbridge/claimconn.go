package pgbridge

import (
	"context"
	"errors"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Statements on a claim's connection run with a context that is never
// cancelled (pgx then skips its per-round-trip cancel watcher: measured,
// a tenth of the client's CPU per row) and a deadline on the connection
// itself: arm sets it before each round trip, under curMu, after checking
// that the broker is not closing; Close cancels the broker and then sets
// every armed connection's deadline to now. Whichever comes second wins,
// so no round trip starts or goes on after Close.
var noCancel = context.Background()

// acquire takes a connection, armed for its first round trip; done
// returns it, closing it first unless ok
// (a connection in an unknown state — a failed transaction, advisory locks
// still held, a deadline passed — is never reused).
func (c *claimer) acquire() (*pgx.Conn, func(ok bool), error) {
	pc, err := c.b.pool.Acquire(c.b.ctx)
	if err != nil {
		return nil, nil, err
	}
	conn := pc.Conn()
	if err := c.arm(conn); err != nil {
		pc.Release()
		return nil, nil, err
	}
	return conn, func(ok bool) {
		c.disarm(conn)
		if !ok {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			conn.Close(cctx)
			cancel()
		}
		pc.Release()
	}, nil
}

// arm gives conn's next round trip the statement timeout, unless the
// broker is closing.
func (c *claimer) arm(conn *pgx.Conn) error {
	c.curMu.Lock()
	defer c.curMu.Unlock()
	if err := c.b.ctx.Err(); err != nil {
		return payload.Wrap(payload.ShuttingDown, "pgbridge", err)
	}
	c.cur = conn
	return conn.PgConn().Conn().SetDeadline(time.Now().Add(c.b.cfg.StatementTimeout))
}

// disarm clears conn's deadline before it goes back to the pool.
func (c *claimer) disarm(conn *pgx.Conn) {
	c.curMu.Lock()
	defer c.curMu.Unlock()
	c.cur = nil
	conn.PgConn().Conn().SetDeadline(time.Time{})
}

// abort ends the claimer's round trip in flight (Close).
func (c *claimer) abort() {
	c.curMu.Lock()
	defer c.curMu.Unlock()
	if c.cur != nil {
		c.cur.PgConn().Conn().SetDeadline(time.Now())
	}
}

// claimQuery returns a claim statement and its arguments: lead, then — when
// the claim continues from the floor — the floor's position. The arguments
// live in the claimer's reused slice until its next claim.
func (c *claimer) claimQuery(fromStart, fromFloor string, lead ...any) (string, []any) {
	c.args = append(c.args[:0], lead...)
	if !c.fromSet {
		return fromStart, c.args
	}
	if c.s.cols.Priority != "" {
		c.args = append(c.args, c.fromP)
	}
	return fromFloor, append(c.args, c.fromID)
}

// batch returns the claimer's reused, emptied batch.
func (c *claimer) batch() *pgx.Batch {
	clear(c.bt.QueuedQueries)
	c.bt.QueuedQueries = c.bt.QueuedQueries[:0]
	return &c.bt
}

// execBatch sends a batch on conn and reads every result; it returns the
// first error.
func execBatch(conn *pgx.Conn, bt *pgx.Batch) error {
	br := conn.SendBatch(noCancel, bt)
	var first error
	for i := 0; i < bt.Len(); i++ {
		if _, err := br.Exec(); err != nil && first == nil {
			first = err
		}
	}
	if err := br.Close(); err != nil && first == nil {
		first = err
	}
	return first
}

// isServerError reports whether the server refused a statement (as
// opposed to the connection failing).
func isServerError(err error) bool {
	var pge *pgconn.PgError
	return errors.As(err, &pge)
}
