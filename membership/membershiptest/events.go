package membershiptest

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/berthrt/berth/membership"
)

// watch subscribes and returns the channel and the first event (a Sync).
func (s *suite) watch(t *testing.T, ctx context.Context, m membership.Membership) (<-chan membership.Event, membership.Event) {
	t.Helper()
	ch, err := m.Watch(ctx)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	first := s.next(t, ch)
	if first.Type != membership.Sync {
		t.Fatalf("first event of a watch is %v, want sync", first.Type)
	}
	return ch, first
}

// next receives one event, failing t after Harness.Wait or if ch closed.
func (s *suite) next(t *testing.T, ch <-chan membership.Event) membership.Event {
	t.Helper()
	timer := time.NewTimer(s.h.Wait)
	defer timer.Stop()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed early")
		}
		return ev
	case <-timer.C:
		t.Fatalf("no event within %v", s.h.Wait)
	}
	panic("unreachable")
}

// describe returns "type name/gen/state" (sync: "sync" and the list).
func describe(ev membership.Event) string {
	if ev.Type == membership.Sync {
		return fmt.Sprintf("sync %v", names(ev.Members))
	}
	m := ev.Member
	if ev.Type == membership.StateChanged {
		return fmt.Sprintf("%s %s/%d %s->%s", ev.Type, m.Name, m.LeaseGen, ev.From, m.State)
	}
	return fmt.Sprintf("%s %s/%d/%s", ev.Type, m.Name, m.LeaseGen, m.State)
}

// expectEvents receives len(want) events and compares them with want, in
// order, also checking that revisions grow.
func (s *suite) expectEvents(t *testing.T, ch <-chan membership.Event, rev uint64, want ...string) uint64 {
	t.Helper()
	for i, w := range want {
		ev := s.next(t, ch)
		if got := describe(ev); got != w {
			t.Fatalf("event %d = %q, want %q", i, got, w)
		}
		if ev.Rev <= rev {
			t.Fatalf("event %d (%s) has rev %d, not above the previous %d", i, w, ev.Rev, rev)
		}
		rev = ev.Rev
	}
	return rev
}

// mirror is the list a watcher rebuilds from events.
type mirror struct {
	members map[string]membership.Member
	rev     uint64
	syncs   int // Syncs with Dropped > 0
}

// apply applies ev as the Event doc says, checking that revisions grow.
func (mr *mirror) apply(t *testing.T, ev membership.Event) {
	t.Helper()
	if ev.Rev < mr.rev || (ev.Rev == mr.rev && ev.Type != membership.Sync) {
		t.Fatalf("event %s has rev %d after rev %d", describe(ev), ev.Rev, mr.rev)
	}
	mr.rev = ev.Rev
	switch ev.Type {
	case membership.Sync:
		if ev.Dropped > 0 {
			mr.syncs++
		}
		mr.members = map[string]membership.Member{}
		for _, m := range ev.Members {
			mr.members[m.Name] = m
		}
	case membership.Joined:
		mr.members[ev.Member.Name] = ev.Member
	case membership.StateChanged:
		if ev.Member.State == membership.Gone {
			delete(mr.members, ev.Member.Name)
		} else {
			mr.members[ev.Member.Name] = ev.Member
		}
	case membership.Left, membership.Expired:
		delete(mr.members, ev.Member.Name)
	default:
		t.Fatalf("unknown event type %v", ev.Type)
	}
}

func (mr *mirror) list() []membership.Member {
	out := make([]membership.Member, 0, len(mr.members))
	for _, m := range mr.members {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b membership.Member) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// catchUp applies events until the mirror equals want (the list at the
// end of the writes), failing t after Harness.Wait.
func (s *suite) catchUp(t *testing.T, ch <-chan membership.Event, mr *mirror, want []membership.Member) {
	t.Helper()
	deadline := time.NewTimer(s.h.Wait)
	defer deadline.Stop()
	for !reflect.DeepEqual(names(mr.list()), names(want)) {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("watch channel closed early")
			}
			mr.apply(t, ev)
		case <-deadline.C:
			t.Fatalf("watcher's view %v never reached Members %v", names(mr.list()), names(want))
		}
	}
}
