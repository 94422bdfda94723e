package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/pgtest"
	"github.com/berthrt/berth/membership"
	"github.com/jackc/pgx/v5/pgxpool"
)

// When the changelog no longer holds every change after a watcher's
// position (pruned while it was away), the watcher gets a Sync with the
// list as it is and Dropped set to the changes it missed, then the changes
// after it. The dispatcher is replaced by direct catchUp calls, so that
// nothing reads the changelog before the test prunes it.
func TestWatcherGetsASyncWhenTheChangelogWasPruned(t *testing.T) {
	db := pgtest.New(t)
	pool, err := pgxpool.New(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ctx := context.Background()
	m, err := OpenMembership(ctx, pool, MembershipOptions{ManualClock: true, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.mu.Lock()
	m.stopDisp = func() {} // Watch starts no dispatcher: the test reads the changelog itself
	m.mu.Unlock()
	ch, err := m.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recv := func() membership.Event {
		t.Helper()
		select {
		case ev := <-ch:
			return ev
		case <-time.After(10 * time.Second):
			t.Fatal("no event")
		}
		panic("unreachable")
	}
	if ev := recv(); ev.Type != membership.Sync || ev.Rev != 0 {
		t.Fatalf("first event %v rev %d", ev.Type, ev.Rev)
	}
	for _, name := range []string{"a", "b", "c"} {
		if _, err := m.Join(ctx, membership.Member{Name: name, LeaseGen: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "DELETE FROM pgstore_member_events WHERE rev <= 2"); err != nil {
		t.Fatal(err)
	}
	if err := m.catchUp(ctx); err != nil {
		t.Fatal(err)
	}
	ev := recv()
	if ev.Type != membership.Sync || ev.Rev != 3 || ev.Dropped != 3 || len(ev.Members) != 3 {
		t.Fatalf("after a pruned gap: %+v, want a Sync at rev 3 of a, b, c with Dropped 3", ev)
	}
	if _, err := m.Join(ctx, membership.Member{Name: "d", LeaseGen: 1}); err != nil {
		t.Fatal(err)
	}
	if err := m.catchUp(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := recv(); ev.Type != membership.Joined || ev.Member.Name != "d" || ev.Rev != 4 {
		t.Fatalf("after the Sync: %v %s rev %d, want joined d rev 4", ev.Type, ev.Member.Name, ev.Rev)
	}
}

// A watcher whose pump stays one event behind the dispatcher keeps a
// bounded backlog array: the consumed prefix is given back (fifo.Compact),
// not kept until the backlog happens to empty.
func TestWatcherBacklogGivesBackWhatThePumpTook(t *testing.T) {
	w := &watcher{limit: 16, notify: make(chan struct{}, 1)}
	w.push(membership.Event{Rev: 1})
	for rev := uint64(2); rev <= 100_000; rev++ {
		w.push(membership.Event{Rev: rev})
		if ev, ok := w.pop(); !ok || ev.Rev != rev-1 {
			t.Fatalf("pop = %v, %v; want revision %d", ev.Rev, ok, rev-1)
		}
	}
	if c := cap(w.queue); c > 4096 {
		t.Fatalf("backlog array holds %d slots for one pending event", c)
	}
}
