package mailbox

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/payload"
)

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

type grantee struct {
	granted, abandoned atomic.Int32
	onGrant            func()
}

func (g *grantee) Granted() {
	g.granted.Add(1)
	if g.onGrant != nil {
		g.onGrant()
	}
}
func (g *grantee) Abandoned() { g.abandoned.Add(1) }

func TestPermitsSaturationWaitsAndNeverRejects(t *testing.T) {
	p := NewPermits(2, nil)
	ctx := context.Background()
	if err := p.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if p.TryAcquire() {
		t.Fatal("TryAcquire succeeded beyond the limit")
	}
	got := make(chan error, 1)
	go func() { got <- p.Acquire(ctx) }()
	waitFor(t, "the third Acquire to queue", func() bool { return p.Waiters() == 1 })
	select {
	case err := <-got:
		t.Fatalf("Acquire returned %v while saturated; it must wait", err)
	default:
	}
	if p.InUse() != 2 {
		t.Fatalf("in use %d; waiters must not be counted", p.InUse())
	}
	p.Release()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if p.InUse() != 2 || p.Waiters() != 0 {
		t.Fatalf("after hand-over: in use %d, waiters %d", p.InUse(), p.Waiters())
	}
	p.Release()
	p.Release()
	if p.InUse() != 0 {
		t.Fatal("count not back to zero")
	}
	mustPanic(t, "Release without a permit", p.Release)
}

func TestPermitsCancelledWaitLeavesCountUnchanged(t *testing.T) {
	p := NewPermits(1, nil)
	if !p.TryAcquire() {
		t.Fatal("no permit")
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() { got <- p.Acquire(ctx) }()
	waitFor(t, "the waiter to queue", func() bool { return p.Waiters() == 1 })
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire = %v", err)
	}
	if p.InUse() != 1 || p.Waiters() != 0 {
		t.Fatalf("after cancel: in use %d, waiters %d; want 1 and 0", p.InUse(), p.Waiters())
	}
	p.Release()
	if p.InUse() != 0 {
		t.Fatal("a cancelled waiter kept a permit")
	}
}

func TestPermitsCancelRacingGrantLeavesCountUnchanged(t *testing.T) {
	for i := 0; i < 500; i++ {
		p := NewPermits(1, nil)
		p.TryAcquire()
		ctx, cancel := context.WithCancel(context.Background())
		got := make(chan error, 1)
		go func() { got <- p.Acquire(ctx) }()
		waitFor(t, "queue", func() bool { return p.Waiters() == 1 })
		go cancel()
		p.Release() // races with the cancellation
		err := <-got
		want := 0
		if err == nil {
			want = 1 // the waiter won and holds the permit
		}
		if p.InUse() != want {
			t.Fatalf("round %d: Acquire = %v, in use %d, want %d", i, err, p.InUse(), want)
		}
		if err == nil {
			p.Release()
		}
	}
}

func TestPermitsAreFIFOAndTryAcquireDoesNotOvertake(t *testing.T) {
	p := NewPermits(1, nil)
	p.TryAcquire()
	var order []int
	var mu sync.Mutex
	var done sync.WaitGroup
	for i := 0; i < 5; i++ {
		done.Add(1)
		go func() {
			defer done.Done()
			if err := p.Acquire(context.Background()); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			p.Release()
		}()
		waitFor(t, "waiter to queue", func() bool { return p.Waiters() == i+1 })
	}
	g := &grantee{}
	p.Enqueue(g) // an asynchronous source queues behind them
	if p.TryAcquire() {
		t.Fatal("TryAcquire overtook queued waiters")
	}
	g.onGrant = p.Release
	p.Release()
	done.Wait()
	waitFor(t, "the async source", func() bool { return g.granted.Load() == 1 })
	for i, v := range order {
		if v != i {
			t.Fatalf("grant order %v, want FIFO", order)
		}
	}
	if p.InUse() != 0 {
		t.Fatalf("in use %d at the end", p.InUse())
	}
}

func TestPermitsEnqueueGrantsAtOnceWhenFree(t *testing.T) {
	p := NewPermits(1, nil)
	g := &grantee{}
	p.Enqueue(g)
	if g.granted.Load() != 1 || p.InUse() != 1 {
		t.Fatal("a free permit was not granted at once")
	}
	p.Release()
}

func TestPermitsCloseWakesWaitersAndAbandonsSources(t *testing.T) {
	p := NewPermits(1, nil)
	p.TryAcquire()
	got := make(chan error, 1)
	go func() { got <- p.Acquire(context.Background()) }()
	waitFor(t, "queue", func() bool { return p.Waiters() == 1 })
	g := &grantee{}
	p.Enqueue(g)
	p.Close()
	if err := <-got; !errors.Is(err, ErrPermitsClosed) || !errors.Is(err, payload.ShuttingDown) {
		t.Fatalf("Acquire after Close = %v", err)
	}
	if g.abandoned.Load() != 1 || g.granted.Load() != 0 {
		t.Fatal("async waiter not abandoned")
	}
	late := &grantee{}
	p.Enqueue(late)
	if late.abandoned.Load() != 1 {
		t.Fatal("Enqueue after Close not abandoned")
	}
	if p.TryAcquire() {
		t.Fatal("TryAcquire after Close")
	}
	p.Release() // the permit held before Close comes back normally
	if p.InUse() != 0 {
		t.Fatal("count wrong after Close")
	}
}

func TestPermitsPressurePausesAt80AndResumesAt60Percent(t *testing.T) {
	var events []bool
	p := NewPermits(10, func(paused bool) { events = append(events, paused) })
	if pa, re := p.Thresholds(); pa != 8 || re != 6 {
		t.Fatalf("thresholds %d/%d, want 8/6", pa, re)
	}
	for i := 0; i < 7; i++ {
		p.TryAcquire()
	}
	if p.Paused() {
		t.Fatal("paused below 80 %")
	}
	p.TryAcquire() // 8 in use
	if !p.Paused() || len(events) != 1 || !events[0] {
		t.Fatalf("not paused at 80 %%: %v", events)
	}
	p.Release() // 7
	if !p.Paused() {
		t.Fatal("resumed above 60 %")
	}
	p.Release() // 6
	if p.Paused() || len(events) != 2 || events[1] {
		t.Fatalf("not resumed at 60 %%: %v", events)
	}
	// Odd sizes round as specified: pause at ceil, resume at floor.
	q := NewPermits(7, nil)
	if pa, re := q.Thresholds(); pa != 6 || re != 4 {
		t.Fatalf("thresholds for 7: %d/%d, want 6/4", pa, re)
	}
}

func TestPermitsConcurrentUseKeepsCount(t *testing.T) {
	p := NewPermits(4, nil)
	var wg sync.WaitGroup
	var inside atomic.Int32
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%3)*time.Microsecond)
				err := p.Acquire(ctx)
				cancel()
				if err != nil {
					continue
				}
				if n := inside.Add(1); n > 4 {
					t.Errorf("%d holders of 4 permits", n)
				}
				inside.Add(-1)
				p.Release()
			}
		}()
	}
	wg.Wait()
	if p.InUse() != 0 || p.Waiters() != 0 {
		t.Fatalf("in use %d, waiters %d after all released", p.InUse(), p.Waiters())
	}
}
