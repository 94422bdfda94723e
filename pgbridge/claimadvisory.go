package pgbridge

import (
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/jackc/pgx/v5"
)

func (c *claimer) claimAdvisory() (n int, err error) {
	b, s := c.b, c.s
	conn, done, err := c.acquire()
	if err != nil {
		return 0, err
	}
	ok := false
	defer func() { done(ok) }()
	sql, args := c.claimQuery(s.sql.lock, s.sql.lockFrom, s.Table.Name)
	rows, err := conn.Query(noCancel, sql, args...)
	if err != nil {
		return 0, err
	}
	c.keys = c.keys[:0]
	for rows.Next() {
		c.keys = append(c.keys, string(rows.RawValues()[0]))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(c.keys) == 0 {
		ok = true
		return 0, nil
	}
	if len(c.keys) == 1 {
		rows, err = conn.Query(noCancel, s.sql.heads1, c.keys[0])
	} else {
		rows, err = conn.Query(noCancel, s.sql.heads, c.keys)
	}
	if err != nil {
		return 0, err
	}
	n, err = c.read(rows, conn)
	rows.Close()
	if err != nil {
		return 0, err
	}
	if n == 0 {
		st := c.batch()
		c.queueUnlock(st)
		err := execBatch(conn, st)
		ok = err == nil
		return 0, err
	}
	b.stats.claimed.Add(uint64(n))
	b.obs.Claimed(s.Name, n)
	c.disarm(conn)
	c.run()
	// The settlement and the unlock go in one round trip (one implicit
	// transaction). A claimer that takes a key between the unlock and the
	// commit cannot run a settled row: its heads statement is an UPDATE,
	// which waits for this transaction and then skips a deleted row or one
	// whose run_at moved on.
	serr := c.arm(conn)
	if serr == nil {
		st := c.batch()
		c.queueSettle(st, c.live, time.Time{})
		c.queueUnlock(st)
		serr = execBatch(conn, st)
	}
	if serr != nil && isServerError(serr) && b.ctx.Err() == nil {
		// The server refused a statement, and nothing of the implicit
		// transaction committed: each row settles on its own, then the
		// keys are unlocked.
		c.settleEach(conn, time.Time{})
		if serr = c.arm(conn); serr == nil {
			st := c.batch()
			c.queueUnlock(st)
			serr = execBatch(conn, st)
		}
		ok = serr == nil
		c.report(nil, nil)
		return n, nil
	}
	if serr != nil {
		// Nothing of the implicit transaction committed; the connection
		// (and its locks) is closed by done.
		c.report(nil, payload.Wrap(payload.Unavailable, "pgbridge", serr))
		return n, serr
	}
	c.report(nil, nil)
	ok = true
	return n, nil
}

// queueUnlock queues the release of the claim's advisory locks.
func (c *claimer) queueUnlock(bt *pgx.Batch) {
	if len(c.keys) == 1 {
		bt.Queue(c.s.sql.unlock1, c.s.Table.Name, c.keys[0])
		return
	}
	bt.Queue(c.s.sql.unlock, c.s.Table.Name, c.keys)
}
