package pgbridge

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/testutil"
)

// Pause stops one subscription claiming — the claim in work finishes and
// settles — while the broker's other subscriptions go on; Resume makes it
// claim again at once.
func TestAPausedSubscriptionClaimsNothingUntilResumed(t *testing.T) {
	pool, _ := newPool(t)
	ta, tb := Table{Name: "a"}, Table{Name: "b"}
	migrate(t, pool, ta)
	migrate(t, pool, tb)
	b := newBroker(t, Config{Pool: pool})
	sendJobs(t, b, ta, 1)
	started, release := make(chan struct{}), make(chan struct{})
	var ranA, ranB atomic.Int32
	subA := &Subscription{Table: ta, PollInterval: 10 * time.Millisecond}
	subscribe(t, b, subA, Messages(func(ctx context.Context, d *Delivery, m Job) Outcome {
		if ranA.Add(1) == 1 {
			close(started)
			<-release
		}
		return Ack
	}))
	if err := b.Subscribe(&Subscription{Table: tb, PollInterval: 10 * time.Millisecond},
		Messages(func(ctx context.Context, d *Delivery, m Job) Outcome { ranB.Add(1); return Ack })); err != nil {
		t.Fatal(err)
	}
	<-started
	subA.Pause()
	close(release)
	sendJobs(t, b, ta, 10)
	sendJobs(t, b, tb, 10)
	waitFor(t, "b's rows and a's first row settled", func() bool { return ranB.Load() == 10 && count(t, pool, "b") == 0 && b.Stats().Acked == 11 })
	time.Sleep(200 * time.Millisecond) // twenty of a's poll intervals
	if n, left := ranA.Load(), count(t, pool, "a"); n != 1 || left != 10 || !subA.Paused() {
		t.Fatalf("paused: a ran %d rows and left %d (paused %v); want 1 run, 10 left", n, left, subA.Paused())
	}
	subA.Resume()
	waitFor(t, "a drained after Resume", func() bool { return count(t, pool, "a") == 0 })
	if n := ranA.Load(); n != 11 {
		t.Fatalf("a ran %d rows, want 11", n)
	}
}

// Backlog reports each subscription's claimable rows (not those whose
// run_at is ahead) and how long the next one to be claimed has been ready.
func TestBacklogCountsClaimableRowsAndTheNextOnesWait(t *testing.T) {
	pool, _ := newPool(t)
	tb := Table{Name: "inbox"}
	migrate(t, pool, tb)
	b := newBroker(t, Config{Pool: pool})
	sub := &Subscription{Table: tb, Name: "jobs"}
	sub.Pause()
	subscribe(t, b, sub, Messages(func(ctx context.Context, d *Delivery, m Job) Outcome { return Ack }))
	sendJobs(t, b, tb, 5)
	if _, err := pool.Exec(bg, `UPDATE inbox SET run_at = now() - interval '10 s' WHERE id = 1;
		UPDATE inbox SET run_at = now() + interval '1 hour' WHERE id IN (4, 5)`); err != nil {
		t.Fatal(err)
	}
	bl, err := b.Backlog(bg)
	if err != nil {
		t.Fatal(err)
	}
	if len(bl) != 1 || bl[0].Subscription != "jobs" || bl[0].Ready != 3 || bl[0].Capped ||
		bl[0].OldestReady < 10*time.Second || bl[0].OldestReady > time.Minute {
		t.Fatalf("backlog %+v; want jobs: 3 ready, the next ready for 10 s", bl)
	}
	if _, err := pool.Exec(bg, "DELETE FROM inbox WHERE id <= 3"); err != nil {
		t.Fatal(err)
	}
	if bl, err := b.Backlog(bg); err != nil || bl[0].Ready != 0 || bl[0].OldestReady != 0 {
		t.Fatalf("backlog %+v, %v; want none ready", bl, err)
	}
}

// Per-key order: when a key's row settles, its next row is claimed at once
// — it became claimable then — not at the next poll (a minute here).
func TestAKeysNextRowIsClaimedWhenTheRowBeforeItSettles(t *testing.T) {
	for _, c := range []struct {
		form    Form
		ordered bool
	}{{RowLock, true}, {Lease, true}, {Advisory, false}} {
		t.Run(c.form.String(), func(t *testing.T) {
			pool, _ := newPool(t)
			tb := Table{Name: "inbox"}
			migrate(t, pool, tb)
			b := newBroker(t, Config{Pool: pool})
			for i := range 3 {
				if err := Send(bg, b, pool, Repository{Broker: b, Table: tb}, "one key", Job{N: i}); err != nil {
					t.Fatal(err)
				}
			}
			var ran atomic.Int32
			subscribe(t, b, &Subscription{Table: tb, Form: c.form, Ordered: c.ordered, Batch: 4, PollInterval: time.Minute},
				Messages(func(ctx context.Context, d *Delivery, m Job) Outcome { ran.Add(1); return Ack }))
			testutil.WaitForWithin(t, "the key's three rows ran", 10*time.Second, func() bool { return ran.Load() == 3 })
		})
	}
}
