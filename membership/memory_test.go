package membership_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/membership/membershiptest"
	"github.com/berthrt/berth/payload"
)

// fakeClock is a clock tests step by hand. Safe for concurrent use.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock(start time.Time) *fakeClock { return &fakeClock{now: start} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// newTestMemory returns a Memory on a fake clock with a small watch
// backlog and a fast sweep, closed when t ends.
func newTestMemory(t *testing.T, ttl time.Duration, buf int) (*membership.Memory, *fakeClock) {
	clk := newFakeClock(epoch)
	m := membership.NewMemory(membership.Options{Now: clk.Now, TTL: ttl, SweepEvery: time.Millisecond, WatchBuffer: buf})
	t.Cleanup(m.Close)
	return m, clk
}

func TestMemoryConformance(t *testing.T) {
	const ttl = 10 * time.Second
	membershiptest.Run(t, membershiptest.Harness{
		New: func(t *testing.T) (membership.Membership, func(time.Duration)) {
			m, clk := newTestMemory(t, ttl, 8)
			return m, clk.Advance
		},
		TTL: ttl,
	})
}

func TestMemoryConformanceDefaultBuffer(t *testing.T) {
	const ttl = time.Minute
	membershiptest.Run(t, membershiptest.Harness{
		New: func(t *testing.T) (membership.Membership, func(time.Duration)) {
			m, clk := newTestMemory(t, ttl, 0)
			return m, clk.Advance
		},
		TTL: ttl,
	})
}

// The margin leaves time for a renewal before the deadline.
func TestDefaultMarginLeavesTimeToRenew(t *testing.T) {
	if membership.DefaultMargin >= membership.DefaultTTL-membership.DefaultRenew {
		t.Fatalf("DefaultMargin %v leaves no time for a renewal", membership.DefaultMargin)
	}
}

// A watcher that is not reading is told, by one Sync, how many changes it
// missed, and gets the list as it is.
func TestMemorySlowWatcherGetsOneSyncWithDropped(t *testing.T) {
	m, _ := newTestMemory(t, time.Minute, 4)
	ctx := context.Background()
	ch, err := m.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-ch; ev.Type != membership.Sync || len(ev.Members) != 0 {
		t.Fatalf("first event %+v", ev)
	}
	const joins = 20
	for i := range joins {
		if _, err := m.Join(ctx, membership.Member{Name: string(rune('a' + i)), LeaseGen: 1}); err != nil {
			t.Fatal(err)
		}
	}
	// The watcher gets the one item already in the pump's hand (an event,
	// or a Sync from an earlier overflow), then one Sync, then at most a
	// backlog of events; every change is either delivered or counted in a
	// Sync.
	delivered, dropped, syncs := 0, 0, 0
	var last membership.Event
	for last.Rev != joins {
		select {
		case last = <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("stuck at rev %d after %d events", last.Rev, delivered)
		}
		if last.Type == membership.Sync {
			syncs++
			dropped += last.Dropped
		} else {
			delivered++
		}
	}
	if syncs < 1 || syncs > 2 || delivered > 1+4 || delivered+dropped != joins {
		t.Fatalf("got %d events and %d Syncs dropping %d; want 1 or 2 Syncs, at most 5 events, %d in all", delivered, syncs, dropped, joins)
	}
	// Later changes follow the Sync as usual.
	if err := m.Leave(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	if ev := <-ch; ev.Type != membership.Left || ev.Member.Name != "a" || ev.Rev != joins+1 {
		t.Fatalf("event after the Sync: %+v", ev)
	}
}

// Expiry is judged by the store's clock: the lease runs out exactly TTL
// after the store handled the last renewal (while another member's
// renewals keep the store in contact).
func TestMemoryExpiryAtTheDeadline(t *testing.T) {
	const ttl = 10 * time.Second
	m, clk := newTestMemory(t, ttl, 0)
	ctx := context.Background()
	for _, name := range []string{"a", "b"} {
		if _, err := m.Join(ctx, membership.Member{Name: name, LeaseGen: 1}); err != nil {
			t.Fatal(err)
		}
	}
	renewB := func() {
		t.Helper()
		if _, err := m.Renew(ctx, "b", 1); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		clk.Advance(ttl / 4)
		renewB()
	}
	clk.Advance(ttl/4 - time.Nanosecond)
	renewB()
	if list, _ := m.Members(ctx); len(list) != 2 {
		t.Fatalf("listed %d members 1 ns before a's deadline, want a and b", len(list))
	}
	clk.Advance(time.Nanosecond)
	if list, _ := m.Members(ctx); len(list) != 1 || list[0].Name != "b" {
		t.Fatalf("listed %v at a's deadline, want b alone", list)
	}
}

// A silence of the store (no Join or Renew for more than half a TTL)
// expires nobody, even when the sweep runs meanwhile; the next Renew gives
// every live lease a full TTL from then.
func TestMemorySilenceExpiresNobodyUntilItEnds(t *testing.T) {
	const ttl = 10 * time.Second
	m, clk := newTestMemory(t, ttl, 0)
	ctx := context.Background()
	for _, name := range []string{"a", "b"} {
		if _, err := m.Join(ctx, membership.Member{Name: name, LeaseGen: 1}); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(3 * ttl)
	if list, _ := m.Members(ctx); len(list) != 2 {
		t.Fatalf("listed %v after a silence of 3 TTLs, want a and b", list)
	}
	if _, err := m.Renew(ctx, "b", 1); err != nil {
		t.Fatalf("b's renewal ending the silence: %v", err)
	}
	clk.Advance(ttl - time.Nanosecond)
	if _, err := m.Renew(ctx, "a", 1); err != nil {
		t.Fatalf("a's renewal within the TTL the silence's end gave it: %v", err)
	}
}

// Expire reports the expiry at once.
func TestMemoryExpire(t *testing.T) {
	m, _ := newTestMemory(t, time.Minute, 0)
	ctx := context.Background()
	if _, err := m.Join(ctx, membership.Member{Name: "a", LeaseGen: 1}); err != nil {
		t.Fatal(err)
	}
	ch, _ := m.Watch(ctx)
	<-ch
	m.Expire("a")
	m.Expire("nobody")
	if ev := <-ch; ev.Type != membership.Expired || ev.Member.Name != "a" {
		t.Fatalf("event after Expire: %+v", ev)
	}
	if _, err := m.Renew(ctx, "a", 1); !errors.Is(err, membership.ErrLeaseExpired) {
		t.Fatalf("Renew after Expire: %v", err)
	}
}

// Close ends every watch and every later call, and leaves no goroutine.
func TestMemoryClose(t *testing.T) {
	clk := newFakeClock(epoch)
	m := membership.NewMemory(membership.Options{Now: clk.Now})
	ctx := context.Background()
	if _, err := m.Join(ctx, membership.Member{Name: "a", LeaseGen: 1}); err != nil {
		t.Fatal(err)
	}
	ch, _ := m.Watch(ctx)
	m.Close()
	m.Close()
	for range ch { // the Sync may or may not come; the channel closes
	}
	if _, err := m.Members(ctx); !errors.Is(err, membership.ErrClosed) || !errors.Is(err, payload.ShuttingDown) {
		t.Fatalf("Members after Close: %v", err)
	}
	if _, err := m.Watch(ctx); !errors.Is(err, membership.ErrClosed) {
		t.Fatalf("Watch after Close: %v", err)
	}
	testutil.CheckNoGoroutines(t)
}

func TestNewMemoryPanicsOnNegativeOptions(t *testing.T) {
	for _, o := range []membership.Options{{TTL: -1}, {SweepEvery: -1}, {WatchBuffer: -1}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewMemory(%+v) did not panic", o)
				}
			}()
			membership.NewMemory(o).Close()
		}()
	}
}

func TestStateAndEventNames(t *testing.T) {
	for s, want := range map[membership.State]string{
		membership.Serving: "serving", membership.Draining: "draining", membership.Gone: "gone", 0: "state(0)",
	} {
		if s.String() != want {
			t.Errorf("State(%d).String() = %q, want %q", s, s.String(), want)
		}
	}
	for e, want := range map[membership.EventType]string{
		membership.Sync: "sync", membership.Joined: "joined", membership.StateChanged: "state changed",
		membership.Left: "left", membership.Expired: "expired", 0: "event(0)",
	} {
		if e.String() != want {
			t.Errorf("EventType(%d).String() = %q, want %q", e, e.String(), want)
		}
	}
	err := &membership.GenerationError{Op: "Renew", Name: "a", Gen: 1, Current: 2}
	if got := err.Error(); got != "membership.Renew: rejected: a generation 1 is not current (current 2)" {
		t.Errorf("GenerationError.Error() = %q", got)
	}
}

// A Memory runs its expiry sweep only while some member is live: once its
// members left and its watches ended, no goroutine of it is left, without
// Close; a later Join starts the sweep again (expiry still works).
func TestMemoryRunsNoGoroutineWithoutLiveMembers(t *testing.T) {
	clk := newFakeClock(epoch)
	m := membership.NewMemory(membership.Options{Now: clk.Now, TTL: time.Second, SweepEvery: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := m.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for gen := uint64(1); gen <= 2; gen++ {
		if _, err := m.Join(ctx, membership.Member{Name: "a", LeaseGen: gen}); err != nil {
			t.Fatal(err)
		}
		if gen == 1 {
			if err := m.Leave(ctx, "a", gen); err != nil {
				t.Fatal(err)
			}
			continue
		}
		// b renews as a live host does (the store is not silent) while
		// the clock passes a's lease: the sweep, started again, finds a
		// expired.
		if _, err := m.Join(ctx, membership.Member{Name: "b", LeaseGen: 1}); err != nil {
			t.Fatal(err)
		}
		for range 8 {
			clk.Advance(250 * time.Millisecond)
			if _, err := m.Renew(ctx, "b", 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	for ev := range ch {
		if ev.Type == membership.Expired {
			break
		}
	}
	if err := m.Leave(ctx, "b", 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	for range ch {
	}
	testutil.CheckNoGoroutines(t)
	if list, err := m.Members(context.Background()); err != nil || len(list) != 0 {
		t.Fatalf("Members: %v, %v; want none", list, err)
	}
}

// The sweep ends when the last live member leaves, not at its next tick:
// a program whose hosts all left has no goroutine of the membership left
// at once (here the tick is an hour away).
func TestMemorySweepEndsWhenTheLastMemberLeaves(t *testing.T) {
	m := membership.NewMemory(membership.Options{SweepEvery: time.Hour})
	ctx := context.Background()
	for _, name := range []string{"a", "b"} {
		if _, err := m.Join(ctx, membership.Member{Name: name, LeaseGen: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Leave(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	m.Expire("b")
	testutil.CheckNoGoroutines(t)
}
