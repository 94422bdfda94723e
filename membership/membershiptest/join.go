package membershiptest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/payload"
)

func (s *suite) joinedMemberIsListed(t *testing.T) {
	m, _ := s.h.New(t)
	ctx := s.ctx(t)
	l := mustJoin(t, ctx, m, member("b", 7, "cart", "user"))
	if l != (membership.Lease{Name: "b", Gen: 7, TTL: s.h.TTL}) {
		t.Fatalf("Join returned %+v, want name b, gen 7, TTL %v", l, s.h.TTL)
	}
	mustJoin(t, ctx, m, membership.Member{Name: "a", Address: "addr-a", State: membership.Serving, LeaseGen: 1})
	got := mustMembers(t, ctx, m)
	want := []membership.Member{
		{Name: "a", Address: "addr-a", State: membership.Serving, LeaseGen: 1},
		{Name: "b", Address: "addr-b", State: membership.Serving, Kinds: []string{"cart", "user"}, LeaseGen: 7},
	}
	if len(got) != 2 || !sameMember(got[0], want[0]) || !sameMember(got[1], want[1]) {
		t.Fatalf("Members = %+v, want %+v", got, want)
	}
}

// A member's Version and MaxMessage are kept as joined: Members lists
// them, and a watch's Sync and Joined event carry them. A Join of the
// live generation with another version is another process: refused.
func (s *suite) aMembersVersionAndMessageLimitAreKept(t *testing.T) {
	m, _ := s.h.New(t)
	ctx := s.ctx(t)
	a := membership.Member{Name: "a", Address: "addr-a", State: membership.Serving, Kinds: []string{"cart"}, LeaseGen: 3, MaxMessage: 1 << 20, Version: "v1.4.2"}
	mustJoin(t, ctx, m, a)
	ch, sync := s.watch(t, ctx, m)
	if len(sync.Members) != 1 || !sameMember(sync.Members[0], a) {
		t.Fatalf("the watch's sync lists %+v, want %+v", sync.Members, a)
	}
	b := membership.Member{Name: "b", Address: "addr-b", State: membership.Serving, LeaseGen: 5, MaxMessage: 4096, Version: "v1.5.0"}
	mustJoin(t, ctx, m, b)
	if ev := s.next(t, ch); ev.Type != membership.Joined || !sameMember(ev.Member, b) {
		t.Fatalf("the watch's event after b joined: %s %+v, want b joined as %+v", describe(ev), ev.Member, b)
	}
	got := mustMembers(t, ctx, m)
	if len(got) != 2 || !sameMember(got[0], a) || !sameMember(got[1], b) {
		t.Fatalf("Members = %+v, want %+v and %+v", got, a, b)
	}
	other := b
	other.Version = "v1.6.0"
	_, err := m.Join(ctx, other)
	wantErr(t, "a Join of b's live generation with another version", err, membership.ErrNameTaken)
}

// sameMember compares members, taking nil and empty Kinds as equal.
func sameMember(a, b membership.Member) bool {
	return a.Name == b.Name && a.Address == b.Address && a.State == b.State &&
		a.LeaseGen == b.LeaseGen && a.MaxMessage == b.MaxMessage && a.Version == b.Version && slices.Equal(a.Kinds, b.Kinds)
}

func (s *suite) joinRefusesAnInvalidMember(t *testing.T) {
	m, _ := s.h.New(t)
	ctx := s.ctx(t)
	for _, bad := range []membership.Member{
		{Name: "", LeaseGen: 1},
		{Name: "a", LeaseGen: 0},
		{Name: "a", LeaseGen: 1, State: membership.Draining},
		{Name: "a", LeaseGen: 1, State: membership.Gone},
		{Name: "a", LeaseGen: 1, State: membership.State(9)},
	} {
		_, err := m.Join(ctx, bad)
		wantErr(t, fmt.Sprintf("Join(%+v)", bad), err, membership.ErrInvalidMember, payload.InvalidOperation)
	}
	wantList(t, ctx, m)
}

func (s *suite) duplicateNameWithLiveLeaseRefused(t *testing.T) {
	m, _ := s.h.New(t)
	ctx := s.ctx(t)
	mustJoin(t, ctx, m, member("a", 2, "cart"))
	_, err := m.Join(ctx, member("a", 3, "cart"))
	wantErr(t, "Join of a newer run while the old one is live", err, membership.ErrNameTaken, payload.AlreadyExists)
	other := member("a", 2, "cart")
	other.Address = "elsewhere"
	_, err = m.Join(ctx, other)
	wantErr(t, "Join with the live generation from another address", err, membership.ErrNameTaken, payload.AlreadyExists)
	_, err = m.Join(ctx, member("a", 2, "user"))
	wantErr(t, "Join with the live generation and other kinds", err, membership.ErrNameTaken, payload.AlreadyExists)
	_, err = m.Join(ctx, member("a", 1, "cart"))
	wantGenErr(t, "Join of an older run", err, 2)
	wantList(t, ctx, m, "a/2/serving")
}

func (s *suite) concurrentJoinsOfOneNameHaveOneWinner(t *testing.T) {
	m, _ := s.h.New(t)
	ctx := s.ctx(t)
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = m.Join(ctx, member("a", uint64(i+1)))
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("generations %d and %d both joined", winner+1, i+1)
			}
			winner = i
		case errors.Is(err, membership.ErrNameTaken), errors.Is(err, membership.ErrStaleGeneration):
		default:
			t.Fatalf("Join gen %d: unexpected error %v", i+1, err)
		}
	}
	if winner < 0 {
		t.Fatal("no Join succeeded")
	}
	wantList(t, ctx, m, fmt.Sprintf("a/%d/serving", winner+1))
}

func (s *suite) joinWithTheLiveGenerationRenews(t *testing.T) {
	m, advance := s.h.New(t)
	ctx := s.ctx(t)
	mustJoin(t, ctx, m, member("a", 1, "cart"))
	ch, first := s.watch(t, ctx, m)
	advance(s.h.TTL * 3 / 4)
	if l := mustJoin(t, ctx, m, member("a", 1, "cart")); l.Gen != 1 || l.TTL != s.h.TTL {
		t.Fatalf("retried Join returned %+v", l)
	}
	advance(s.h.TTL * 3 / 4)
	wantList(t, ctx, m, "a/1/serving")
	mustJoin(t, ctx, m, member("b", 1))
	// The retried Join was no change: the next event is b's.
	s.expectEvents(t, ch, first.Rev, "joined b/1/serving")
}

func (s *suite) returnedMembersAreCopies(t *testing.T) {
	m, _ := s.h.New(t)
	ctx := s.ctx(t)
	in := member("a", 1, "cart", "user")
	mustJoin(t, ctx, m, in)
	in.Kinds[0] = "changed by the caller"
	list := mustMembers(t, ctx, m)
	list[0].Kinds[1] = "changed by the caller"
	list = mustMembers(t, ctx, m)
	if !slices.Equal(list[0].Kinds, []string{"cart", "user"}) {
		t.Fatalf("Kinds = %q after the caller changed its copies", list[0].Kinds)
	}
}
