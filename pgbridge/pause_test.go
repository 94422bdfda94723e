package pgbridge

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
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
