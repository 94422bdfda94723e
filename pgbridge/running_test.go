package pgbridge

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/testutil"
)

// A handler's context ends at the subscription's HandlerTimeout, in every
// form; a subscription without one gets DefaultHandlerTimeout (a handler
// used to run with the broker's context: one that hung held its claim for
// ever).
func TestAHandlerPastItsHandlerTimeoutHasItsContextEnded(t *testing.T) {
	for _, form := range []Form{RowLock, Lease, Advisory} {
		t.Run(form.String(), func(t *testing.T) {
			pool, _ := newPool(t)
			tb := Table{Name: "inbox"}
			migrate(t, pool, tb)
			b := newBroker(t, Config{Pool: pool})
			sendJobs(t, b, tb, 1)
			subscribe(t, b, &Subscription{Table: tb, Form: form, HandlerTimeout: 100 * time.Millisecond, PollInterval: 10 * time.Millisecond},
				Messages(func(ctx context.Context, d *Delivery, m Job) Outcome {
					<-ctx.Done()
					return RetryAfter(time.Hour, ctx.Err().Error())
				}))
			waitFor(t, "the retry settled", func() bool { return b.Stats().Retried == 1 })
			var why string
			if err := pool.QueryRow(bg, "SELECT last_error FROM inbox").Scan(&why); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(why, context.DeadlineExceeded.Error()) {
				t.Fatalf("last_error %q, want the deadline's", why)
			}
		})
	}
	pool, _ := newPool(t)
	b := newBroker(t, Config{Pool: pool})
	s := &Subscription{Table: Table{Name: "inbox"}}
	if err := b.Subscribe(s, Messages(func(ctx context.Context, d *Delivery, m Job) Outcome { return Ack })); err != nil {
		t.Fatal(err)
	}
	if s.HandlerTimeout != DefaultHandlerTimeout || DefaultHandlerTimeout != time.Minute {
		t.Fatalf("HandlerTimeout %v by default, want a minute", s.HandlerTimeout)
	}
}

// Lease form: a handler that ignores its context past its HandlerTimeout
// no longer has its lease extended — the row is claimed again when the
// lease runs out, and the late settlement changes nothing (ErrLeaseLost).
// It used to extend the lease for as long as the handler hung.
func TestALeaseHandlerThatOverrunsItsDeadlineLosesItsLease(t *testing.T) {
	pool, _ := newPool(t)
	tb := Table{Name: "inbox"}
	migrate(t, pool, tb)
	b := newBroker(t, Config{Pool: pool})
	sendJobs(t, b, tb, 1)
	second := make(chan struct{})
	end := make(chan struct{})
	defer close(end)
	var mu sync.Mutex
	var settled []error
	var attempts []int
	subscribe(t, b, &Subscription{Table: tb, Form: Lease, Lease: 300 * time.Millisecond, HandlerTimeout: 100 * time.Millisecond,
		Workers: 2, PollInterval: 20 * time.Millisecond,
		OnSettled: func(d *Delivery, o Outcome, err error) {
			mu.Lock()
			attempts, settled = append(attempts, d.Attempt), append(settled, err)
			mu.Unlock()
		}},
		Messages(func(ctx context.Context, d *Delivery, m Job) Outcome {
			if d.Attempt == 1 {
				select { // hangs, deaf to its context, until the row runs again
				case <-second:
				case <-end:
				}
				return Ack
			}
			close(second)
			return Ack
		}))
	waitFor(t, "both runs settled", func() bool { mu.Lock(); defer mu.Unlock(); return len(settled) == 2 })
	b.Close()
	if attempts[0] == 1 { // the first run's settlement may come first
		attempts[0], attempts[1] = attempts[1], attempts[0]
		settled[0], settled[1] = settled[1], settled[0]
	}
	if attempts[0] != 2 || settled[0] != nil || attempts[1] != 1 || !errors.Is(settled[1], ErrLeaseLost) {
		t.Fatalf("settlements: attempts %v, errors %v; want attempt 2 settled and attempt 1's lease lost", attempts, settled)
	}
	if n := count(t, pool, "inbox"); n != 0 {
		t.Fatalf("%d rows left", n)
	}
}

// Lease form: a row whose lease ran out (its broker crashed) is claimable
// again within about a PollInterval, rescued by whichever claimer is free —
// here while another claimer runs a long handler. The rescue used to run
// only in the first claimer's loop, every half lease (15 s by default).
func TestARowWhoseLeaseRanOutIsRescuedByAnyFreeClaimerWithinAPollInterval(t *testing.T) {
	pool, _ := newPool(t)
	tb := Table{Name: "inbox"}
	migrate(t, pool, tb)
	b := newBroker(t, Config{Pool: pool})
	sendJobs(t, b, tb, 1) // N 0: runs until the end of the test
	end := make(chan struct{})
	defer close(end)
	busy := make(chan struct{})
	ran := make(chan int, 1)
	subscribe(t, b, &Subscription{Table: tb, Form: Lease, Workers: 2, PollInterval: 50 * time.Millisecond},
		Messages(func(ctx context.Context, d *Delivery, m Job) Outcome {
			if m.N == 0 {
				close(busy)
				<-end
				return Ack
			}
			ran <- d.Attempt
			return Ack
		}))
	<-busy
	// A row a crashed broker leased (inserted leased, in one
	// transaction): its lease runs out in 200 ms.
	tx, err := pool.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	if err := Send(bg, b, tx, Repository{Broker: b, Table: tb}, "k1", Job{N: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(bg, "UPDATE inbox SET locked_until = now() + interval '200 ms', attempt = 1 WHERE locked_until IS NULL"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(bg); err != nil {
		t.Fatal(err)
	}
	var attempt atomic.Int64
	testutil.WaitForWithin(t, "the crashed broker's row ran", 5*time.Second, func() bool {
		select {
		case a := <-ran:
			attempt.Store(int64(a))
			return true
		default:
			return false
		}
	})
	if attempt.Load() != 2 || b.Stats().Rescued != 1 {
		t.Fatalf("ran at attempt %d with %d rows rescued; want attempt 2, 1 rescued", attempt.Load(), b.Stats().Rescued)
	}
}
