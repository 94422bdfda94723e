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
	"slices"
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
