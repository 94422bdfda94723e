package pgbridge

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// notifier is the listen_notify side of a broker: the per-channel cooldown
// of pg_notify, and one listener connection that wakes subscriptions.
type notifier struct {
	b    *Broker
	last sync.Map // channel → *chanState
}

type chanState struct {
	last     atomic.Int64 // unix ns of the last notify sent
	trailing atomic.Bool  // a notify is scheduled for the end of the cooldown
}

func newNotifier(b *Broker) *notifier { return &notifier{b: b} }

// due reports whether an insert on ch should notify now. Within the
// cooldown it does not, and one trailing notify is sent when the cooldown
// ends, so a listener is never left waiting for the poll.
func (n *notifier) due(ch string) bool {
	v, ok := n.last.Load(ch)
	if !ok {
		v, _ = n.last.LoadOrStore(ch, &chanState{})
	}
	st := v.(*chanState)
	now := time.Now().UnixNano()
	last := st.last.Load()
	cd := int64(n.b.cfg.NotifyCooldown)
	if now-last >= cd && st.last.CompareAndSwap(last, now) {
		return true
	}
	if st.trailing.CompareAndSwap(false, true) {
		wait := time.Duration(last + cd - now)
		if wait < 0 {
			wait = 0
		}
		time.AfterFunc(wait, func() {
			st.trailing.Store(false)
			if n.b.closed.Load() {
				return
			}
			st.last.Store(time.Now().UnixNano())
			ctx, cancel := context.WithTimeout(n.b.ctx, n.b.cfg.StatementTimeout)
			defer cancel()
			if _, err := n.b.pool.Exec(ctx, "SELECT pg_notify($1::text, '')", ch); err == nil {
				n.b.stats.notifies.Add(1)
			}
		})
	}
	return false
}

// listen runs the listener connection until the broker stops: it LISTENs on
// the channel of every subscription's table and wakes them on each
// notification. After a reconnect every subscription polls at once
// (notifications sent while it was away are lost).
func (n *notifier) listen() {
	b := n.b
	defer b.wg.Done()
	backoff := 50 * time.Millisecond
	first := true
	for !b.closed.Load() {
		conn, err := n.connect()
		if err != nil {
			b.log.Warn("pgbridge: listener connect failed", "err", err)
			if !n.sleep(backoff) {
				return
			}
			backoff = min(backoff*2, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		if !first {
			b.stats.reconnects.Add(1)
			b.wakeChannel("") // poll at once: notifications may have been missed
		}
		first = false
		n.serve(conn)
		conn.Close(context.Background())
	}
}

// connect takes the listener's connection from the pool — made with the
// pool's configuration and hooks (BeforeConnect, AfterConnect) — and
// hijacks it: it leaves the pool, which may open another in its place.
//
// The wait is bounded by the statement timeout: a connection attempt to a
// server that is restarting may never be answered.
func (n *notifier) connect() (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(n.b.ctx, n.b.cfg.StatementTimeout)
	defer cancel()
	pc, err := n.b.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return pc.Hijack(), nil
}

func (n *notifier) serve(conn *pgx.Conn) {
	b := n.b
	listening := map[string]bool{}
	for !b.closed.Load() {
		b.mu.Lock()
		subs := b.subs
		b.mu.Unlock()
		for _, s := range subs {
			if !listening[s.channel] {
				ctx, cancel := context.WithTimeout(b.ctx, b.cfg.StatementTimeout)
				_, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize())
				cancel()
				if err != nil {
					b.log.Warn("pgbridge: LISTEN failed", "channel", s.channel, "err", err)
					return
				}
				listening[s.channel] = true
				s.wake() // rows may have arrived before the LISTEN
			}
		}
		ctx, cancel := context.WithTimeout(b.ctx, 250*time.Millisecond)
		nt, err := conn.WaitForNotification(ctx)
		cancel()
		if err != nil {
			if b.ctx.Err() != nil {
				return
			}
			if ctx.Err() != nil && !conn.IsClosed() {
				continue // the wait timed out: look for new channels
			}
			b.log.Warn("pgbridge: listener connection lost", "err", err)
			return
		}
		b.stats.wakeups.Add(1)
		b.obs.Woken(nt.Channel)
		b.wakeChannel(nt.Channel)
	}
}

func (n *notifier) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-n.b.stopping:
		return false
	}
}
