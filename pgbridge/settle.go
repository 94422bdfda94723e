package pgbridge

import (
	"time"

	"github.com/jackc/pgx/v5"
)

// settle runs the settlement of deliveries ds on conn, in one round trip
// (one implicit transaction), adding to c.settled the ids the lease form's
// fenced statements changed.
func (c *claimer) settle(conn *pgx.Conn, ds []*Delivery, token time.Time) error {
	if err := c.arm(conn); err != nil {
		return err
	}
	st := c.batch()
	c.queueSettle(st, ds, token)
	br := conn.SendBatch(noCancel, st)
	var serr error
	for i := 0; i < st.Len(); i++ {
		rows, err := br.Query()
		if err != nil {
			serr = err
			break
		}
		for rows.Next() {
			raw, fd := rows.RawValues(), rows.FieldDescriptions()
			id, _ := rawInt64(raw[0], fd[0].Format, fd[0].DataTypeOID)
			c.settled[id] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil && serr == nil {
			serr = err
		}
	}
	if err := br.Close(); err != nil && serr == nil {
		serr = err
	}
	return serr
}

// settleEach settles the claim's rows one at a time (lease and advisory
// forms: each row settles on its own), after a settlement of them all
// failed. A row whose settlement the server refuses is retried instead —
// counted, after the subscription's retry delay, so MaxAttempts ends a row
// that can never settle; if that is refused too, the row is left as it is
// (lease: claimed again when its lease ends; advisory: when its key is
// free) and its error is reported to OnSettled.
func (c *claimer) settleEach(conn *pgx.Conn, token time.Time) {
	s := c.s
	clear(c.settled)
	for i, d := range c.live {
		err := c.settle(conn, c.live[i:i+1], token)
		if err != nil && isServerError(err) && d.outcome.Kind != KindRetry {
			d.outcome = RetryAfter(s.retryDelay(d.Attempt), "its settlement was refused: "+err.Error())
			err = c.settle(conn, c.live[i:i+1], token)
		}
		if err != nil {
			d.serr = dbError("pgbridge", err)
			c.b.log.Warn("pgbridge: a row could not be settled", "subscription", s.Name, "id", d.ID, "err", err)
		}
	}
}

// queueSettle queues the settlement statements of deliveries ds (array
// statements, one per outcome kind present) and returns how many.
func (c *claimer) queueSettle(bt *pgx.Batch, ds []*Delivery, token time.Time) int {
	s := c.s
	c.delIDs, c.retryIDs, c.deadIDs = c.delIDs[:0], c.retryIDs[:0], c.deadIDs[:0]
	c.retrySecs, c.retryErrs, c.deadReasons = c.retrySecs[:0], c.retryErrs[:0], c.deadReasons[:0]
	for _, d := range ds {
		o := d.outcome
		if o.Kind == KindRetry && !o.delayed {
			o = RetryAfter(s.retryDelay(d.Attempt), o.Reason)
			d.outcome = o
		}
		if o.Kind == KindRetry && s.MaxAttempts > 0 && d.Attempt >= s.MaxAttempts {
			o = DeadLetterWith("max attempts reached: " + o.Reason)
			d.outcome = o
		}
		if o.Kind == KindDeadLetter && s.sql.dead == "" {
			// No dead-letter table (Subscribe refused MaxAttempts and
			// DecodeDeadLetter without one): a handler's DeadLetter
			// outcome is kept for a later attempt instead of lost.
			o = RetryAfter(s.retryDelay(d.Attempt), "dead letter without a dead-letter table: "+o.Reason)
			d.outcome = o
		}
		switch o.Kind {
		case KindAck, KindDrop:
			c.delIDs = append(c.delIDs, d.ID)
		case KindRetry:
			c.retryIDs = append(c.retryIDs, d.ID)
			c.retrySecs = append(c.retrySecs, o.Delay.Seconds())
			c.retryErrs = append(c.retryErrs, o.Reason)
		case KindDeadLetter:
			c.deadIDs = append(c.deadIDs, d.ID)
			c.deadReasons = append(c.deadReasons, o.Reason)
		}
	}
	n := 0
	lease := s.Form == Lease
	switch {
	case len(c.delIDs) == 1 && lease:
		bt.Queue(s.sql.del1, c.delIDs[0], token)
		n++
	case len(c.delIDs) == 1:
		bt.Queue(s.sql.del1, c.delIDs[0])
		n++
	case len(c.delIDs) > 0 && lease:
		bt.Queue(s.sql.del, c.delIDs, token)
		n++
	case len(c.delIDs) > 0:
		bt.Queue(s.sql.del, c.delIDs)
		n++
	}
	if len(c.retryIDs) > 0 {
		if lease {
			bt.Queue(s.sql.retry, c.retryIDs, token, c.retrySecs, c.retryErrs)
		} else {
			bt.Queue(s.sql.retry, c.retryIDs, c.retrySecs, c.retryErrs)
		}
		n++
	}
	if len(c.deadIDs) > 0 {
		if lease {
			bt.Queue(s.sql.dead, c.deadIDs, token, c.deadReasons)
		} else {
			bt.Queue(s.sql.dead, c.deadIDs, c.deadReasons)
		}
		n++
	}
	return n
}

// report counts the claim's settlements. settled (lease form) holds the
// ids the fenced statements changed; the others lost their lease. err is
// the whole claim's failure (nothing settled); a row's own failure to
// settle is its Delivery's serr.
func (c *claimer) report(settled map[int64]bool, err error) {
	b, s := c.b, c.s
	now := nanotime()
	for _, d := range c.live {
		derr := err
		if err == nil && d.serr != nil {
			derr = d.serr
		} else if err == nil && settled != nil && !settled[d.ID] {
			derr = ErrLeaseLost
			b.stats.leaseLost.Add(1)
			b.obs.LeaseLost(s.Name)
		}
		if derr == nil {
			switch d.outcome.Kind {
			case KindAck:
				b.stats.acked.Add(1)
			case KindRetry:
				b.stats.retried.Add(1)
			case KindDrop:
				b.stats.dropped.Add(1)
			case KindDeadLetter:
				b.stats.dead.Add(1)
			}
			b.obs.Settled(s.Name, d.outcome.Kind, time.Duration(now-d.claimNs))
		}
		if s.OnSettled != nil {
			s.OnSettled(d, d.outcome, derr)
		}
	}
}
