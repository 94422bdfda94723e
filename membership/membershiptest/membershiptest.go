// Package membershiptest is the conformance suite every membership.Membership
// implementation passes (the in-memory one and the Postgres one): Run runs
// one subtest per rule of the contract, named after the rule.
//
// The suite judges expiry through the harness: it moves the store's clock
// with Harness.New's advance function and then waits (polling with a
// deadline, never sleeping blindly) for the membership to report it.
// Leases expire only while the store is in contact with its hosts (see
// membership, "Silences"): the checks that expect an expiry keep a member
// renewing as the clock moves (pass), as live hosts do.
package membershiptest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/payload"
)

// Harness makes the memberships Run tests.
type Harness struct {
	// New returns a new, empty membership whose leases last TTL by its own
	// clock, and advance, which moves that clock forward by d. New
	// registers the membership's cleanup with t. A store whose clock cannot
	// be stepped may let advance sleep d (keep TTL short then).
	New func(t *testing.T) (m membership.Membership, advance func(d time.Duration))
	// TTL is the lease TTL of the memberships New returns.
	TTL time.Duration
	// Wait bounds every wait for something asynchronous: an event, an
	// expiry noticed by a sweep, a channel closing. Zero means 10 s.
	Wait time.Duration
}

// Run runs the conformance suite against h. Subtests run one after
// another, each on its own membership.
func Run(t *testing.T, h Harness) {
	if h.New == nil || h.TTL <= 0 {
		panic("membershiptest: Run: Harness.New and a positive Harness.TTL are required")
	}
	if h.Wait == 0 {
		h.Wait = 10 * time.Second
	}
	s := &suite{h: h}
	for _, r := range []struct {
		name string
		f    func(t *testing.T)
	}{
		{"JoinedMemberIsListed", s.joinedMemberIsListed},
		{"AMembersVersionAndMessageLimitAreKept", s.aMembersVersionAndMessageLimitAreKept},
		{"JoinRefusesAnInvalidMember", s.joinRefusesAnInvalidMember},
		{"DuplicateNameWithLiveLeaseRefused", s.duplicateNameWithLiveLeaseRefused},
		{"ConcurrentJoinsOfOneNameHaveOneWinner", s.concurrentJoinsOfOneNameHaveOneWinner},
		{"JoinWithTheLiveGenerationRenews", s.joinWithTheLiveGenerationRenews},
		{"RenewExtendsTheLeaseByTheStoreClock", s.renewExtendsTheLease},
		{"RenewWithStaleGenerationRefused", s.renewWithStaleGenerationRefused},
		{"ExpiryRemovesTheMemberAndEmitsAnEvent", s.expiryRemovesTheMember},
		{"ASilenceOfTheStoreExpiresNothing", s.aSilenceOfTheStoreExpiresNothing},
		{"ARefusedJoinIsContact", s.aRefusedJoinIsContact},
		{"NewGenerationMayRejoinAfterExpiry", s.newGenerationMayRejoinAfterExpiry},
		{"LegalStateTransitions", s.legalStateTransitions},
		{"IllegalStateTransitionsRefused", s.illegalStateTransitionsRefused},
		{"SetStateWithStaleGenerationRefused", s.setStateWithStaleGenerationRefused},
		{"LeaveRemovesTheMemberAndFreesTheName", s.leaveRemovesTheMember},
		{"LeaveByAnOlderRunRefused", s.leaveByAnOlderRunRefused},
		{"ReturnedMembersAreCopies", s.returnedMembersAreCopies},
		{"WatchStartsWithSync", s.watchStartsWithSync},
		{"WatchSeesEveryChangeInOrder", s.watchSeesEveryChangeInOrder},
		{"WatchersAgreeUnderConcurrentWriters", s.watchersAgreeUnderConcurrentWriters},
		{"SlowWatcherDoesNotBlockWriters", s.slowWatcherDoesNotBlockWriters},
		{"ContextCancellationHonoured", s.contextCancellationHonoured},
	} {
		t.Run(r.name, r.f)
	}
}

type suite struct{ h Harness }

// keeper is the member some checks keep renewing while the clock moves, as
// a live host renews (pass), so that the membership is not silent and the
// leases of the others expire. Its name sorts after the others'.
const keeper = "~keeper"

// pass moves the clock forward by d in steps of a quarter TTL, renewing
// the named members' runs (generation 1) after each step.
func (s *suite) pass(t *testing.T, ctx context.Context, m membership.Membership, advance func(time.Duration), d time.Duration, renew ...string) {
	t.Helper()
	for d > 0 {
		step := min(d, s.h.TTL/4)
		advance(step)
		d -= step
		for _, name := range renew {
			if _, err := m.Renew(ctx, name, 1); err != nil {
				t.Fatalf("Renew(%s, 1) while the clock moves: %v", name, err)
			}
		}
	}
}

// ctx returns a context for one subtest's calls.
func (s *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 4*s.h.Wait)
	t.Cleanup(cancel)
	return ctx
}

func member(name string, gen uint64, kinds ...string) membership.Member {
	return membership.Member{Name: name, Address: "addr-" + name, Kinds: kinds, LeaseGen: gen}
}

func mustJoin(t *testing.T, ctx context.Context, m membership.Membership, mem membership.Member) membership.Lease {
	t.Helper()
	l, err := m.Join(ctx, mem)
	if err != nil {
		t.Fatalf("Join(%s gen %d): %v", mem.Name, mem.LeaseGen, err)
	}
	return l
}

func mustMembers(t *testing.T, ctx context.Context, m membership.Membership) []membership.Member {
	t.Helper()
	list, err := m.Members(ctx)
	if err != nil {
		t.Fatalf("Members: %v", err)
	}
	return list
}

// names returns "name/gen/state" for each member.
func names(list []membership.Member) []string {
	out := make([]string, 0, len(list))
	for _, m := range list {
		out = append(out, fmt.Sprintf("%s/%d/%s", m.Name, m.LeaseGen, m.State))
	}
	return out
}

func wantList(t *testing.T, ctx context.Context, m membership.Membership, want ...string) {
	t.Helper()
	if got := names(mustMembers(t, ctx, m)); !slices.Equal(got, want) {
		t.Fatalf("Members = %v, want %v", got, want)
	}
}

// wantErr fails t unless err matches every target (errors.Is).
func wantErr(t *testing.T, what string, err error, targets ...error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %v", what, targets)
	}
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Fatalf("%s: error %q is not %v", what, err, target)
		}
	}
}

// wantGenErr fails t unless err is a *GenerationError naming current.
func wantGenErr(t *testing.T, what string, err error, current uint64) {
	t.Helper()
	wantErr(t, what, err, membership.ErrStaleGeneration, payload.Rejected)
	var ge *membership.GenerationError
	if !errors.As(err, &ge) {
		t.Fatalf("%s: error %q is not a *GenerationError", what, err)
	}
	if ge.Current != current {
		t.Fatalf("%s: GenerationError.Current = %d, want %d", what, ge.Current, current)
	}
}

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

func (s *suite) renewExtendsTheLease(t *testing.T) {
	m, advance := s.h.New(t)
	ctx := s.ctx(t)
	mustJoin(t, ctx, m, member(keeper, 1))
	mustJoin(t, ctx, m, member("a", 1))
	s.pass(t, ctx, m, advance, s.h.TTL*3/4, keeper)
	l, err := m.Renew(ctx, "a", 1)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if l != (membership.Lease{Name: "a", Gen: 1, TTL: s.h.TTL}) {
		t.Fatalf("Renew returned %+v", l)
	}
	s.pass(t, ctx, m, advance, s.h.TTL*3/4, keeper) // 1.5 TTL after the join, 0.75 after the renewal
	wantList(t, ctx, m, "a/1/serving", keeper+"/1/serving")
	s.pass(t, ctx, m, advance, s.h.TTL/2, keeper) // 1.25 TTL after the renewal
	wantList(t, ctx, m, keeper+"/1/serving")
}

func (s *suite) renewWithStaleGenerationRefused(t *testing.T) {
	m, _ := s.h.New(t)
	ctx := s.ctx(t)
	mustJoin(t, ctx, m, member("a", 5))
	_, err := m.Renew(ctx, "a", 4)
	wantGenErr(t, "Renew of an older generation", err, 5)
	_, err = m.Renew(ctx, "a", 6)
	wantGenErr(t, "Renew of a generation that never joined", err, 5)
	_, err = m.Renew(ctx, "nobody", 1)
	wantErr(t, "Renew of an unknown name", err, membership.ErrNotMember, payload.NotFound)
	if _, err := m.Renew(ctx, "a", 5); err != nil {
		t.Fatalf("Renew of the current generation: %v", err)
	}
}

func (s *suite) expiryRemovesTheMember(t *testing.T) {
	m, advance := s.h.New(t)
	ctx := s.ctx(t)
	ch, first := s.watch(t, ctx, m)
	mustJoin(t, ctx, m, member("a", 1))
	mustJoin(t, ctx, m, member("b", 1))
	rev := s.expectEvents(t, ch, first.Rev, "joined a/1/serving", "joined b/1/serving")
	advance(s.h.TTL / 2)
	if _, err := m.Renew(ctx, "b", 1); err != nil {
		t.Fatalf("Renew b: %v", err)
	}
	// Past a's lease, not b's. b keeps renewing, as a live host does, so
	// the membership is not silent: its sweep, or b's next renewal, finds
	// the expiry.
	s.pass(t, ctx, m, advance, s.h.TTL/2+s.h.TTL/10, "b")
	s.expectEvents(t, ch, rev, "expired a/1/serving")
	wantList(t, ctx, m, "b/1/serving")
	_, err := m.Renew(ctx, "a", 1)
	wantErr(t, "Renew after expiry", err, membership.ErrLeaseExpired, payload.Unavailable)
	_, err = m.SetState(ctx, "a", 1, membership.Draining)
	wantErr(t, "SetState after expiry", err, membership.ErrLeaseExpired, payload.Unavailable)
	if err := m.Leave(ctx, "a", 1); err != nil {
		t.Fatalf("Leave after expiry: %v", err)
	}
}

// aSilenceOfTheStoreExpiresNothing: a membership that heard no Join or
// Renew for longer than the leases (its store was restarted, failed
// over, cut off from every host) expires nobody for it: the next Renew
// (or Join) gives every live lease a full TTL from then, and a member
// that then keeps renewing stays. Only a member that stops renewing while
// others renew expires.
func (s *suite) aSilenceOfTheStoreExpiresNothing(t *testing.T) {
	m, advance := s.h.New(t)
	ctx := s.ctx(t)
	ch, first := s.watch(t, ctx, m)
	mustJoin(t, ctx, m, member("a", 1))
	mustJoin(t, ctx, m, member("b", 1))
	rev := s.expectEvents(t, ch, first.Rev, "joined a/1/serving", "joined b/1/serving")
	advance(2 * s.h.TTL) // nobody reached the store
	wantList(t, ctx, m, "a/1/serving", "b/1/serving")
	if _, err := m.Renew(ctx, "b", 1); err != nil {
		t.Fatalf("b's renewal after the silence: %v", err)
	}
	s.pass(t, ctx, m, advance, s.h.TTL*3/4, "b")
	if _, err := m.Renew(ctx, "a", 1); err != nil {
		t.Fatalf("a's renewal within the TTL the silence's end gave it: %v", err)
	}
	wantList(t, ctx, m, "a/1/serving", "b/1/serving")
	// a stops renewing while b goes on: a expires, as before.
	s.pass(t, ctx, m, advance, s.h.TTL+s.h.TTL/10, "b")
	s.expectEvents(t, ch, rev, "expired a/1/serving")
	wantList(t, ctx, m, "b/1/serving")
}

// aRefusedJoinIsContact: a Join is contact with the store whether or not
// it succeeds. A lone host that crashed is replaced by a new run whose
// Joins are refused while the old run's lease lasts: the first one after
// a silence gives the old run one more TTL, and the ones after it keep
// the store in contact, so the old run expires and the new one joins
// within that TTL.
func (s *suite) aRefusedJoinIsContact(t *testing.T) {
	m, advance := s.h.New(t)
	ctx := s.ctx(t)
	mustJoin(t, ctx, m, member("a", 1))
	advance(2 * s.h.TTL) // a crashed; nobody else calls
	step := s.h.TTL / 4
	for waited := time.Duration(0); ; waited += step {
		_, err := m.Join(ctx, member("a", 2))
		if err == nil {
			break
		}
		wantErr(t, "Join while the old run's lease lasts", err, membership.ErrNameTaken)
		if waited > s.h.TTL+step {
			t.Fatalf("the new run was refused %v after its first Join: the old run never expires", waited)
		}
		advance(step)
	}
	wantList(t, ctx, m, "a/2/serving")
}

func (s *suite) newGenerationMayRejoinAfterExpiry(t *testing.T) {
	m, advance := s.h.New(t)
	ctx := s.ctx(t)
	mustJoin(t, ctx, m, member(keeper, 1))
	mustJoin(t, ctx, m, member("a", 3))
	s.pass(t, ctx, m, advance, s.h.TTL+s.h.TTL/10, keeper)
	wantList(t, ctx, m, keeper+"/1/serving")
	_, err := m.Join(ctx, member("a", 3))
	wantGenErr(t, "Join of the expired generation", err, 3)
	_, err = m.Join(ctx, member("a", 2))
	wantGenErr(t, "Join of an older generation", err, 3)
	mustJoin(t, ctx, m, member("a", 4))
	wantList(t, ctx, m, "a/4/serving", keeper+"/1/serving")
	_, err = m.Renew(ctx, "a", 3)
	wantGenErr(t, "Renew of the expired run", err, 4)
}

func (s *suite) legalStateTransitions(t *testing.T) {
	m, _ := s.h.New(t)
	ctx := s.ctx(t)
	mustJoin(t, ctx, m, member("a", 1))
	ch, first := s.watch(t, ctx, m)
	got, err := m.SetState(ctx, "a", 1, membership.Draining)
	if err != nil || got.State != membership.Draining || got.Name != "a" {
		t.Fatalf("SetState draining = %+v, %v", got, err)
	}
	wantList(t, ctx, m, "a/1/draining")
	if got, err := m.SetState(ctx, "a", 1, membership.Draining); err != nil || got.State != membership.Draining {
		t.Fatalf("SetState to the current state = %+v, %v; want a no-op", got, err)
	}
	if got, err := m.SetState(ctx, "a", 1, membership.Gone); err != nil || got.State != membership.Gone {
		t.Fatalf("SetState gone = %+v, %v", got, err)
	}
	wantList(t, ctx, m) // Gone is not listed
	if _, err := m.Renew(ctx, "a", 1); err != nil {
		t.Fatalf("Renew of a gone member (it keeps its name): %v", err)
	}
	_, err = m.Join(ctx, member("a", 2))
	wantErr(t, "Join while the gone run still holds its lease", err, membership.ErrNameTaken)
	s.expectEvents(t, ch, first.Rev, "state changed a/1 serving->draining", "state changed a/1 draining->gone")
}

func (s *suite) illegalStateTransitionsRefused(t *testing.T) {
	m, _ := s.h.New(t)
	ctx := s.ctx(t)
	mustJoin(t, ctx, m, member("a", 1))
	for _, c := range []struct {
		from membership.State
		to   []membership.State
	}{
		{membership.Serving, []membership.State{membership.Gone, 0, membership.State(9)}},
		{membership.Draining, []membership.State{membership.Serving, 0}},
		{membership.Gone, []membership.State{membership.Serving, membership.Draining}},
	} {
		if c.from != membership.Serving {
			if _, err := m.SetState(ctx, "a", 1, c.from); err != nil {
				t.Fatalf("SetState %s: %v", c.from, err)
			}
		}
		for _, to := range c.to {
			_, err := m.SetState(ctx, "a", 1, to)
			wantErr(t, fmt.Sprintf("SetState %s->%s", c.from, to), err, membership.ErrIllegalTransition, payload.InvalidOperation)
			if c.from == membership.Gone {
				wantList(t, ctx, m)
			} else {
				wantList(t, ctx, m, "a/1/"+c.from.String())
			}
		}
	}
}

func (s *suite) setStateWithStaleGenerationRefused(t *testing.T) {
	m, _ := s.h.New(t)
	ctx := s.ctx(t)
	mustJoin(t, ctx, m, member("a", 2))
	_, err := m.SetState(ctx, "a", 1, membership.Draining)
	wantGenErr(t, "SetState of an older generation", err, 2)
	_, err = m.SetState(ctx, "nobody", 1, membership.Draining)
	wantErr(t, "SetState of an unknown name", err, membership.ErrNotMember, payload.NotFound)
	wantList(t, ctx, m, "a/2/serving")
}

func (s *suite) leaveRemovesTheMember(t *testing.T) {
	m, _ := s.h.New(t)
	ctx := s.ctx(t)
	mustJoin(t, ctx, m, member("a", 1))
	ch, first := s.watch(t, ctx, m)
	if err := m.Leave(ctx, "a", 1); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	wantList(t, ctx, m)
	if err := m.Leave(ctx, "a", 1); err != nil {
		t.Fatalf("Leave again: %v", err)
	}
	_, err := m.Renew(ctx, "a", 1)
	wantErr(t, "Renew after Leave", err, membership.ErrNotMember, payload.NotFound)
	_, err = m.SetState(ctx, "a", 1, membership.Draining)
	wantErr(t, "SetState after Leave", err, membership.ErrNotMember, payload.NotFound)
	_, err = m.Join(ctx, member("a", 1))
	wantGenErr(t, "Join of the run that left", err, 1)
	mustJoin(t, ctx, m, member("a", 2)) // the name is free at once
	wantList(t, ctx, m, "a/2/serving")
	err = m.Leave(ctx, "nobody", 1)
	wantErr(t, "Leave of an unknown name", err, membership.ErrNotMember, payload.NotFound)
	s.expectEvents(t, ch, first.Rev, "left a/1/serving", "joined a/2/serving")
}

func (s *suite) leaveByAnOlderRunRefused(t *testing.T) {
	m, advance := s.h.New(t)
	ctx := s.ctx(t)
	mustJoin(t, ctx, m, member(keeper, 1))
	mustJoin(t, ctx, m, member("a", 1))
	s.pass(t, ctx, m, advance, s.h.TTL+s.h.TTL/10, keeper)
	wantList(t, ctx, m, keeper+"/1/serving")
	mustJoin(t, ctx, m, member("a", 2))
	err := m.Leave(ctx, "a", 1)
	wantGenErr(t, "Leave by the expired run", err, 2)
	wantList(t, ctx, m, "a/2/serving", keeper+"/1/serving")
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

func (s *suite) contextCancellationHonoured(t *testing.T) {
	m, _ := s.h.New(t)
	ctx := s.ctx(t)
	mustJoin(t, ctx, m, member("a", 1))
	watchCtx, stopWatch := context.WithCancel(ctx)
	ch, _ := s.watch(t, watchCtx, m)

	dead, cancel := context.WithCancel(ctx)
	cancel()
	_, err := m.Join(dead, member("b", 1))
	wantErr(t, "Join with a cancelled context", err, context.Canceled)
	_, err = m.Renew(dead, "a", 1)
	wantErr(t, "Renew with a cancelled context", err, context.Canceled)
	_, err = m.SetState(dead, "a", 1, membership.Draining)
	wantErr(t, "SetState with a cancelled context", err, context.Canceled)
	wantErr(t, "Leave with a cancelled context", m.Leave(dead, "a", 1), context.Canceled)
	_, err = m.Members(dead)
	wantErr(t, "Members with a cancelled context", err, context.Canceled)
	_, err = m.Watch(dead)
	wantErr(t, "Watch with a cancelled context", err, context.Canceled)
	wantList(t, ctx, m, "a/1/serving") // nothing changed

	// Cancelling a watch closes its channel; it may deliver nothing more
	// that happened after, but must close.
	stopWatch()
	mustJoin(t, ctx, m, member("c", 1))
	timer := time.NewTimer(s.h.Wait)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timer.C:
			t.Fatalf("watch channel still open %v after its context was cancelled", s.h.Wait)
		}
	}
}
