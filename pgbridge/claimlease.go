package pgbridge

import (
	"context"
	"sync"
	"time"

	"github.com/berthrt/berth/payload"
)

func (c *claimer) claimLease() (n int, err error) {
	b, s := c.b, c.s
	conn, done, err := c.acquire()
	if err != nil {
		return 0, err
	}
	ok := false
	defer func() { done(ok) }()
	sql, args := c.claimQuery(s.sql.claim, s.sql.claimFrom, s.Lease.Microseconds())
	rows, err := conn.Query(noCancel, sql, args...)
	if err != nil {
		return 0, err
	}
	n, err = c.read(rows, nil)
	rows.Close()
	if err != nil || n == 0 {
		ok = err == nil
		return n, err
	}
	b.stats.claimed.Add(uint64(n))
	b.obs.Claimed(s.Name, n)
	// The lease needs no connection while the handler runs: give it
	// back, so the extensions (and other claimers) find one.
	done(true)
	ext := &c.ext
	ext.start(c, c.live[0].token)
	c.run()
	token := ext.stop()
	conn, done, err = c.acquire()
	if err != nil {
		// Not settled: the leases expire and the rows are claimed again.
		done = func(bool) {}
		c.report(nil, payload.Wrap(payload.Unavailable, "pgbridge", err))
		return n, err
	}
	clear(c.settled)
	serr := c.settle(conn, c.live, token)
	if serr != nil && isServerError(serr) && b.ctx.Err() == nil {
		// The server refused a statement, and nothing of the implicit
		// transaction committed: each row settles on its own.
		c.settleEach(conn, token)
		c.report(c.settled, nil)
		ok = true
		return n, nil
	}
	if serr != nil {
		// Not settled: the leases expire and the rows are claimed again.
		c.report(nil, payload.Wrap(payload.Unavailable, "pgbridge", serr))
		return n, serr
	}
	c.report(c.settled, nil)
	ok = true
	return n, nil
}

// extender keeps a lease claim's rows leased while the handler runs: every
// half lease it moves their locked_until (the token) on, on a connection of
// its own. Each claimer has one, reused claim after claim.
type extender struct {
	c       *claimer
	mu      sync.Mutex
	token   time.Time
	until   time.Time // the handler's deadline: no extension past it (zero: none)
	timer   *time.Timer
	stopped bool
	ids     []int64
	kept    map[int64]bool
}

func (e *extender) start(c *claimer, token time.Time) {
	e.mu.Lock()
	e.c, e.token, e.stopped = c, token, false
	e.until = time.Time{}
	if t := c.s.HandlerTimeout; t > 0 {
		e.until = time.Now().Add(t)
	}
	e.mu.Unlock()
	if e.timer == nil {
		e.timer = time.AfterFunc(c.s.Lease/2, e.extend)
	} else {
		e.timer.Reset(c.s.Lease / 2)
	}
}

func (e *extender) extend() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return
	}
	c := e.c
	if !e.until.IsZero() && time.Now().After(e.until) {
		// The handler overran its deadline: its rows' leases run out,
		// and the rows are claimed again.
		c.b.log.Warn("pgbridge: a handler overran its deadline; its lease is no longer extended", "subscription", c.s.Name)
		return
	}
	e.ids = e.ids[:0]
	for _, d := range c.live {
		if !d.LeaseLost() {
			e.ids = append(e.ids, d.ID)
		}
	}
	ctx, cancel := context.WithTimeout(c.b.ctx, c.b.cfg.StatementTimeout)
	defer cancel()
	rows, err := c.b.pool.Query(ctx, c.s.sql.extend, e.ids, e.token, c.s.Lease.Microseconds())
	if err != nil {
		c.b.log.Warn("pgbridge: lease extension failed", "subscription", c.s.Name, "err", err)
		e.timer.Reset(c.s.Lease / 4)
		return
	}
	if e.kept == nil {
		e.kept = map[int64]bool{}
	}
	clear(e.kept)
	var tok time.Time
	for rows.Next() {
		raw, fd := rows.RawValues(), rows.FieldDescriptions()
		id, _ := rawInt64(raw[0], fd[0].Format, fd[0].DataTypeOID)
		tok, _ = rawTime(raw[1], fd[1].Format, fd[1].DataTypeOID)
		e.kept[id] = true
	}
	rows.Close()
	if rows.Err() != nil {
		e.timer.Reset(c.s.Lease / 4)
		return
	}
	for _, d := range c.live {
		if !e.kept[d.ID] && !d.LeaseLost() {
			d.markLost()
		} else if e.kept[d.ID] {
			d.setToken(tok)
		}
	}
	if len(e.kept) > 0 {
		e.token = tok
	}
	e.timer.Reset(c.s.Lease / 2)
}

// stop ends the extensions and returns the current token.
func (e *extender) stop() time.Time {
	e.timer.Stop()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopped = true
	return e.token
}
