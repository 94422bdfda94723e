package membershiptest

import (
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/membership"
)

func (s *suite) watchStartsWithSync(t *testing.T) {
	m, _ := s.h.New(t)
	ctx := s.ctx(t)
	mustJoin(t, ctx, m, member("b", 1))
	mustJoin(t, ctx, m, member("a", 1, "cart"))
	mustJoin(t, ctx, m, member("c", 1))
	if _, err := m.SetState(ctx, "c", 1, membership.Draining); err != nil {
		t.Fatal(err)
	}
	if _, err := m.SetState(ctx, "c", 1, membership.Gone); err != nil {
		t.Fatal(err)
	}
	_, first := s.watch(t, ctx, m)
	if got := names(first.Members); !slices.Equal(got, []string{"a/1/serving", "b/1/serving"}) {
		t.Fatalf("first Sync lists %v, want a and b", got)
	}
	if first.Dropped != 0 {
		t.Fatalf("first Sync has Dropped %d", first.Dropped)
	}
	if !reflect.DeepEqual(first.Members, mustMembers(t, ctx, m)) {
		t.Fatalf("first Sync %+v differs from Members", first.Members)
	}
}

func (s *suite) watchSeesEveryChangeInOrder(t *testing.T) {
	m, advance := s.h.New(t)
	ctx := s.ctx(t)
	mustJoin(t, ctx, m, member(keeper, 1))
	mustJoin(t, ctx, m, member("z", 1))
	ch1, sync1 := s.watch(t, ctx, m)
	ch2, sync2 := s.watch(t, ctx, m)
	step := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	_, err := m.Join(ctx, member("a", 1))
	step("join a", err)
	_, err = m.Join(ctx, member("b", 1))
	step("join b", err)
	_, err = m.SetState(ctx, "a", 1, membership.Draining)
	step("drain a", err)
	step("leave b", m.Leave(ctx, "b", 1))
	_, err = m.SetState(ctx, "a", 1, membership.Gone)
	step("a gone", err)
	step("leave a", m.Leave(ctx, "a", 1))
	_, err = m.Join(ctx, member("a", 2))
	step("join a again", err)
	want := []string{
		"joined a/1/serving",
		"joined b/1/serving",
		"state changed a/1 serving->draining",
		"left b/1/serving",
		"state changed a/1 draining->gone",
		"left a/1/gone",
		"joined a/2/serving",
	}
	rev1 := s.expectEvents(t, ch1, sync1.Rev, want...)
	rev2 := s.expectEvents(t, ch2, sync2.Rev, want...)
	if rev1 != rev2 {
		t.Fatalf("watchers disagree on the last revision: %d, %d", rev1, rev2)
	}
	// Expiry is a change like the others, in the same order.
	advance(s.h.TTL / 10)
	_, err = m.Renew(ctx, "a", 2)
	step("renew a", err)
	s.pass(t, ctx, m, advance, s.h.TTL+s.h.TTL/10, keeper)
	// Leases that expire together are reported by deadline: z's came first.
	s.expectEvents(t, ch1, rev1, "expired z/1/serving", "expired a/2/serving")
	s.expectEvents(t, ch2, rev2, "expired z/1/serving", "expired a/2/serving")
}

func (s *suite) watchersAgreeUnderConcurrentWriters(t *testing.T) {
	m, _ := s.h.New(t)
	ctx := s.ctx(t)
	const writers, rounds = 8, 50
	ch, first := s.watch(t, ctx, m)
	mr := &mirror{}
	mr.apply(t, first)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			name := fmt.Sprintf("w%d", w)
			for gen := uint64(1); gen <= rounds; gen++ {
				if _, err := m.Join(ctx, member(name, gen)); err != nil {
					errs <- err
					return
				}
				if gen%2 == 0 {
					if _, err := m.SetState(ctx, name, gen, membership.Draining); err != nil {
						errs <- err
						return
					}
				}
				if gen < rounds {
					if err := m.Leave(ctx, name, gen); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	// Read concurrently with the writers; each watcher's view must end
	// equal to Members.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	perName := map[string]uint64{} // last generation seen joining, per name, since the last Sync
read:
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("watch channel closed early")
			}
			mr.apply(t, ev)
			switch ev.Type {
			case membership.Sync:
				clear(perName)
			case membership.Joined:
				if last := perName[ev.Member.Name]; ev.Member.LeaseGen <= last {
					t.Fatalf("%s joined with generation %d after %d", ev.Member.Name, ev.Member.LeaseGen, last)
				}
				perName[ev.Member.Name] = ev.Member.LeaseGen
			}
		case <-done:
			break read
		}
	}
	close(errs)
	for err := range errs {
		t.Fatalf("writer: %v", err)
	}
	want := mustMembers(t, ctx, m)
	s.catchUp(t, ch, mr, want)
}

func (s *suite) slowWatcherDoesNotBlockWriters(t *testing.T) {
	m, _ := s.h.New(t)
	ctx := s.ctx(t)
	slow, first := s.watch(t, ctx, m) // never read while the writers run
	const changes = 2000
	// A writer the watcher blocks makes no progress: the writers must not
	// go s.h.Wait without completing a change (a slow machine only makes
	// each change slower).
	done := make(chan error, 1)
	var made atomic.Int64
	go func() {
		for gen := uint64(1); gen <= changes/2; gen++ {
			if _, err := m.Join(ctx, member("a", gen)); err != nil {
				done <- err
				return
			}
			made.Add(1)
			if err := m.Leave(ctx, "a", gen); err != nil {
				done <- err
				return
			}
			made.Add(1)
		}
		_, err := m.Join(ctx, member("last", 1))
		done <- err
	}()
	timer := time.NewTimer(s.h.Wait)
	defer timer.Stop()
	for seen := int64(-1); ; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("writer: %v", err)
			}
		case <-timer.C:
			n := made.Load()
			if n == seen {
				t.Fatalf("the writers made no change for %v (%d of %d made) while a watcher was not reading", s.h.Wait, n, changes)
			}
			seen = n
			timer.Reset(s.h.Wait)
			continue
		}
		break
	}
	// The slow watcher then catches up: all changes in order, or a Sync
	// standing for those it missed.
	mr := &mirror{}
	mr.apply(t, first)
	s.catchUp(t, slow, mr, mustMembers(t, ctx, m))
	if mr.rev < first.Rev+changes+1 {
		t.Fatalf("slow watcher reached rev %d, want at least %d", mr.rev, first.Rev+changes+1)
	}
}
