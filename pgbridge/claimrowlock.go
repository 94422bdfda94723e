package pgbridge

import (
	"context"
	"errors"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/jackc/pgx/v5"
)

func (c *claimer) claimRowLock() (n int, err error) {
	b, s := c.b, c.s
	conn, done, err := c.acquire()
	if err != nil {
		return 0, err
	}
	ok := false
	defer func() { done(ok) }()
	bt := c.batch()
	bt.Queue("BEGIN")
	if len(c.solo) > 0 {
		bt.Queue(s.sql.claimOne, c.solo[0])
		c.solo = c.solo[1:]
	} else {
		sql, args := c.claimQuery(s.sql.claim, s.sql.claimFrom)
		bt.Queue(sql, args...)
	}
	br := conn.SendBatch(noCancel, bt)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return 0, err
	}
	rows, err := br.Query()
	if err == nil {
		n, err = c.read(rows, conn)
		rows.Close()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	if n == 0 {
		_, err = conn.Exec(noCancel, "COMMIT")
		ok = err == nil
		return 0, err
	}
	b.stats.claimed.Add(uint64(n))
	b.obs.Claimed(s.Name, n)
	c.disarm(conn) // the handler may take as long as it needs
	c.run()
	// The settlement and the commit go in one round trip; a failure of any
	// statement (the handler's own, in the claim's transaction, included)
	// rolls the whole claim back.
	serr := c.arm(conn)
	if serr == nil {
		st := c.batch()
		c.queueSettle(st, c.live, time.Time{})
		st.Queue("COMMIT")
		serr = execBatch(conn, st)
	}
	if serr == nil && conn.PgConn().TxStatus() != 'I' {
		serr = errors.New("transaction did not commit")
	}
	if serr != nil && !isServerError(serr) && c.xid != 0 && b.ctx.Err() == nil {
		// No statement was refused by the server: the connection ended,
		// maybe after COMMIT arrived. Close it (so its backend ends the
		// transaction) and ask the server what became of it.
		// Give the connection back first: when the server restarted,
		// every claimer is here, and the pool must have connections for
		// their questions.
		done(false)
		done = func(bool) {}
		committed, rerr := c.commitFate(c.xid)
		switch {
		case rerr != nil:
			b.stats.unknown.Add(1)
			c.report(nil, payload.Wrap(payload.Unavailable, "pgbridge", errors.Join(ErrOutcomeUnknown, serr, rerr)))
			return n, nil
		case committed:
			c.tx.committed(b)
			c.report(nil, nil)
			return n, nil
		}
	}
	if serr != nil {
		s.floor.reset() // its rows are claimable again, before the floor
		b.stats.rollbacks.Add(1)
		b.obs.RolledBack(s.Name, n)
		if isServerError(serr) && b.ctx.Err() == nil {
			// The server refused a statement — the handler's, in the
			// claim's transaction, or a settlement's — and the claim rolled
			// back. Claimed again as it was, the row would fail the same way
			// at once, for ever (its attempt is counted only by a
			// settlement). One row: its failure is a retry, counted outside
			// the rolled-back transaction, so the subscription's retry delay
			// and MaxAttempts end the loop. A batch: which of its rows
			// failed is not known, so each is claimed again on its own.
			if n == 1 {
				if c.countRolledBack(conn, serr) {
					ok = true
					return n, nil
				}
			} else {
				for _, d := range c.live {
					c.solo = append(c.solo, d.ID)
				}
			}
		}
		c.report(nil, payload.Wrap(payload.Unavailable, "pgbridge", errors.Join(ErrBatchRolledBack, serr)))
		return n, nil
	}
	ok = true
	c.tx.committed(b)
	c.report(nil, nil)
	return n, nil
}

// countRolledBack settles the one row of a row-lock claim that rolled back
// because the server refused a statement (serr) as a retry — counted, after
// the subscription's retry delay, or dead-lettered past MaxAttempts — on
// conn, outside the rolled-back transaction. It reports false if that
// failed too (the row is then claimable again as it was).
func (c *claimer) countRolledBack(conn *pgx.Conn, serr error) bool {
	s := c.s
	if conn.PgConn().TxStatus() != 'I' {
		if c.arm(conn) != nil {
			return false
		}
		if _, err := conn.Exec(noCancel, "ROLLBACK"); err != nil {
			return false
		}
	}
	d := c.live[0]
	d.outcome = RetryAfter(s.retryDelay(d.Attempt), "the claim's transaction rolled back: "+serr.Error())
	st := c.batch()
	c.queueSettle(st, c.live, time.Time{})
	if c.arm(conn) != nil {
		return false
	}
	if err := execBatch(conn, st); err != nil || conn.PgConn().TxStatus() != 'I' {
		c.b.log.Warn("pgbridge: a rolled-back row's retry could not be counted", "subscription", s.Name, "id", d.ID, "err", err)
		return false
	}
	c.report(nil, nil)
	return true
}

// commitFate asks, on another connection, whether transaction xid committed,
// waiting while its backend has not yet ended it.
func (c *claimer) commitFate(xid int64) (bool, error) {
	ctx, cancel := context.WithTimeout(c.b.ctx, c.b.cfg.StatementTimeout)
	defer cancel()
	for {
		var status *string
		var started time.Time
		if err := c.b.pool.QueryRow(ctx, "SELECT txid_status($1), pg_postmaster_start_time()", xid).Scan(&status, &started); err != nil {
			if ctx.Err() != nil {
				return false, err
			}
		} else if !started.Equal(c.started) {
			return false, errors.New("the server restarted since the claim")
		} else if status == nil || *status == "aborted" {
			return false, nil
		} else if *status == "committed" {
			return true, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
