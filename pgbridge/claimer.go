package pgbridge

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// claimer is one worker of a subscription: it claims, runs and settles.
type claimer struct {
	s    *Subscription
	b    *Broker
	r    runner
	wake chan struct{}

	free     []*Delivery // reused deliveries
	live     []*Delivery // the current claim
	arena    []byte
	keys     []string
	lastType string
	lastCT   string
	fromSet  bool // claim from the floor (fromP, fromID)
	fromP    int32
	fromID   int64
	minSet   bool // the claim's first position so far
	minP     int32
	minID    int64
	xid      int64      // row lock: the claim's transaction id
	tx       claimTx    // row lock: the claim's transaction, as handlers see it
	hctx     handlerCtx // the handler's context, with its deadline
	solo     []int64    // row lock: rows of a rolled-back batch, to claim again one at a time
	started  time.Time  // row lock: the server's start time at the claim

	bt      pgx.Batch // reused for every round trip
	args    []any     // reused claim arguments (claimQuery)
	curMu   sync.Mutex
	cur     *pgx.Conn // the connection of the round trip in flight (armed)
	ext     extender
	settled map[int64]bool // lease: ids the fenced settlement changed

	// settlement scratch
	delIDs, retryIDs, deadIDs []int64
	retrySecs                 []float64
	retryErrs, deadReasons    []string
}

func (c *claimer) loop() {
	b, s := c.b, c.s
	defer b.wg.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		select {
		case <-b.stopping:
			return
		default:
		}
		if s.paused.Load() {
			// Paused: claim nothing until Resume (or Stop) wakes it.
			select {
			case <-c.wake:
				continue
			case <-b.stopping:
				return
			}
		}
		if s.Form == Lease && s.rescueDue(nanotime()) {
			c.rescue()
		}
		c.fromSet, c.fromP, c.fromID = s.floor.get(nanotime())
		n, err := c.claimOnce()
		if err != nil && b.ctx.Err() == nil {
			b.stats.claimErrors.Add(1)
			b.obs.ClaimFailed(s.Name, err)
			b.log.Warn("pgbridge: claim failed", "subscription", s.Name, "err", err)
		}
		if err != nil {
			s.floor.reset()
		}
		if err == nil && (n >= s.Batch || len(c.solo) > 0) {
			continue // more may be ready, or a rolled-back batch's rows wait to run one at a time
		}
		if err == nil && n > 0 && (s.Ordered || s.Form == Advisory) {
			// The claim's rows settled: the next row of each of their keys
			// became claimable (a claim takes a key's oldest row only).
			continue
		}
		if err == nil && c.fromSet {
			// Nothing from the floor on: look from the start before
			// sleeping.
			s.floor.reset()
			continue
		}
		timer.Reset(s.PollInterval)
		select {
		case <-c.wake:
			if !timer.Stop() {
				<-timer.C
			}
		case <-timer.C:
		case <-b.stopping:
			return
		}
	}
}

// rescue makes the rows whose lease ran out (their claimer crashed, or
// overran its handler deadline) claimable again, and wakes the
// subscription's claimers when there were any.
func (c *claimer) rescue() {
	ctx, cancel := context.WithTimeout(c.b.ctx, c.b.cfg.StatementTimeout)
	defer cancel()
	tag, err := c.b.pool.Exec(ctx, c.s.sql.rescue)
	if err != nil {
		if c.b.ctx.Err() == nil {
			c.b.log.Warn("pgbridge: lease rescue failed", "subscription", c.s.Name, "err", err)
		}
		return
	}
	if n := tag.RowsAffected(); n > 0 {
		c.b.stats.rescued.Add(uint64(n))
		c.s.floor.reset() // the rows may lie before the floor
		c.s.wake()
	}
}

func (c *claimer) endClaim() {
	if c.minSet {
		c.s.floor.advance(c.minP, c.minID)
		c.minSet = false
	}
	c.r.reset()
	c.tx.forget()
	c.tx.conn = nil
	c.xid = 0
	c.live = c.live[:0]
	if cap(c.arena) > 1<<20 {
		c.arena = nil
	}
	c.arena = c.arena[:0]
}

// claimOnce claims, runs and settles one claim; it returns the rows claimed.
func (c *claimer) claimOnce() (int, error) {
	defer c.endClaim()
	switch c.s.Form {
	case Lease:
		return c.claimLease()
	case Advisory:
		return c.claimAdvisory()
	}
	return c.claimRowLock()
}

// run runs the handler over the claim's deliveries, with the
// subscription's handler deadline.
func (c *claimer) run() {
	if t := c.s.HandlerTimeout; t > 0 {
		if c.hctx.parent == nil {
			c.hctx.init(c.b.ctx)
		}
		c.hctx.arm(t)
		c.r.run(&c.hctx, c.live)
		c.hctx.disarm()
		return
	}
	c.r.run(c.b.ctx, c.live)
}

func nanotime() int64 { return time.Now().UnixNano() }
