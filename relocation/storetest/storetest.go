// Package storetest is the conformance suite for the Location Store
// (relocation.Store, docs/architecture.md, "Relocation"). Every implementation runs the same suite:
// the in-memory relocation.MemoryStore and the Postgres store alike call Run
// with a Harness that makes a fresh, empty store for each check and, when it
// can, moves the store's clock forward.
//
// Run checks, through the Store interface only, every rule the interface's
// documentation states and the actor package relies on:
//
//   - Get returns the row as the last write left it, or ErrNoRow.
//   - Reserve needs a live lease (else ErrLeaseExpired); it creates a row
//     with object and owner generation 1, takes over a Preserved row or one
//     whose owner's lease expired or was replaced by a restart (owner
//     generation +1, object generation kept), returns the row to its own
//     owner unchanged, and refuses a row a live host owns with a
//     *ConflictError naming that host.
//   - Commit, NewOwner, Preserve and Delete are conditional: they write only
//     when the row has exactly the expected ownership; otherwise they fail
//     with a *ConflictError whose Current is the row as it is (NewerOwner
//     set exactly when the row's owner generation is above the expected
//     one), or with ErrNoRow when there is no row, and write nothing.
//   - NewOwner raises the owner generation and keeps the object generation;
//     the new host's lease must be live. Preserve keeps both generations
//     and stores the receive-order state, which only Preserve writes.
//   - Every write of a row raises its Version by one.
//   - Leases: RenewLease starts or extends a lease for LeaseTTL (Lease.Remaining
//     says how long it has left by the store's clock); a newer
//     generation replaces it and an older one is refused (kind Rejected).
//     A renewal says whether the run's lease had run out (Lease.Lapsed);
//     Owned then says which rows still name the run. A takeover and the
//     owner's renewal are ordered: no row Owned reported after a renewal
//     is taken over before that lease runs out again.
//   - Silences: a store that heard no renewal for longer than half a lease
//     takes nothing over; its next renewal gives every lease live before
//     the silence a full length from then.
//   - Of many concurrent Reserves (or NewOwners) of one object exactly one
//     wins; every other caller gets a *ConflictError naming the winner.
//   - Implementations must honour ctx: a call with a done ctx fails and
//     writes nothing.
//
// Checks of lease expiry need Harness.Advance; with a nil Advance they are
// skipped with a message saying so, and the rest runs.
//
// Each rule is one subtest named after it, so that a failure names the rule
// an implementation breaks.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
)

// Harness tells Run how to make and drive the store under test.
type Harness struct {
	// New returns a fresh, empty store, private to the calling test. It
	// registers any clean-up with t.Cleanup. Required.
	New func(t *testing.T) relocation.Store
	// Advance moves the clock of store s (made by New) forward by exactly d,
	// as if d passed for every lease in it. Nil when the store's clock
	// cannot be controlled: the checks that need leases to run out are
	// then skipped.
	Advance func(t *testing.T, s relocation.Store, d time.Duration)
}

// wallClockLease is the length of the suite's leases on a store whose
// clock it cannot advance.
const wallClockLease = time.Hour

// Run runs the conformance suite over the store h makes: one subtest per
// rule, named after the rule. Run panics if h.New is nil.
func Run(t *testing.T, h Harness) {
	if h.New == nil {
		panic("storetest: Harness.New is nil")
	}
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			r.check(t, &suite{h: h, s: h.New(t), ctx: context.Background()})
		})
	}
}

// rules lists the checks in the order Run runs them.
var rules = []struct {
	name  string
	check func(*testing.T, *suite)
}{
	{"GetOfAMissingObjectIsErrNoRow", getOfAMissingObjectIsErrNoRow},
	{"GetReturnsTheRowAsTheLastWriteLeftIt", getReturnsTheRowAsTheLastWriteLeftIt},
	{"ReserveNeedsALiveLease", reserveNeedsALiveLease},
	{"ReserveOfAFreeObjectSucceedsOnce", reserveOfAFreeObjectSucceedsOnce},
	{"ReserveOfALiveOwnersObjectConflicts", reserveOfALiveOwnersObjectConflicts},
	{"ReserveByItsOwnerReturnsTheRow", reserveByItsOwnerReturnsTheRow},
	{"ReserveTakesOverAPreservedRow", reserveTakesOverAPreservedRow},
	{"ExpiredLeaseLetsAnotherHostTakeOver", expiredLeaseLetsAnotherHostTakeOver},
	{"RestartedOwnersRowsCanBeTakenOver", restartedOwnersRowsCanBeTakenOver},
	{"CommitTurnsAReservationActive", commitTurnsAReservationActive},
	{"CommitNeedsAReservation", commitNeedsAReservation},
	{"CommitWithAStaleExpectationConflicts", commitWithAStaleExpectationConflicts},
	{"NewOwnerRaisesTheOwnerGeneration", newOwnerRaisesTheOwnerGeneration},
	{"NewOwnerNeedsALiveLease", newOwnerNeedsALiveLease},
	{"StaleMoveReportsANewerOwner", staleMoveReportsANewerOwner},
	{"ConditionalWritesNeedTheExactOwnership", conditionalWritesNeedTheExactOwnership},
	{"ConditionalWritesOfAMissingRowAreErrNoRow", conditionalWritesOfAMissingRowAreErrNoRow},
	{"PreserveKeepsTheGenerations", preserveKeepsTheGenerations},
	{"PreserveKeepsTheOrderState", preserveKeepsTheOrderState},
	{"OnlyPreserveWritesTheOrderState", onlyPreserveWritesTheOrderState},
	{"DeleteRemovesTheRow", deleteRemovesTheRow},
	{"EveryWriteRaisesTheVersionByOne", everyWriteRaisesTheVersionByOne},
	{"RenewLeaseStartsALease", renewLeaseStartsALease},
	{"LeaseLastsLeaseTTL", leaseLastsLeaseTTL},
	{"LeaseRemainingIsByTheStoresClock", leaseRemainingIsByTheStoresClock},
	{"RenewalKeepsTheLeaseLive", renewalKeepsTheLeaseLive},
	{"LeaseOfANewerGenerationReplacesTheOld", leaseOfANewerGenerationReplacesTheOld},
	{"LeaseOfAnotherGenerationIsRefused", leaseOfAnotherGenerationIsRefused},
	{"ARenewalSaysWhetherTheLeaseLapsed", aRenewalSaysWhetherTheLeaseLapsed},
	{"OwnedNamesTheRowsOfTheRun", ownedNamesTheRowsOfTheRun},
	{"ASilenceOfTheStoreTakesNothingOver", aSilenceOfTheStoreTakesNothingOver},
	{"ASilenceShorterThanALeaseTakesNothingOver", aSilenceShorterThanALeaseTakesNothingOver},
	{"ATakeoverAndTheOwnersRenewalAreOrdered", aTakeoverAndTheOwnersRenewalAreOrdered},
	{"ALeaseASilenceKeepsReadsLive", aLeaseASilenceKeepsReadsLive},
	{"ConcurrentReservesHaveOneWinner", concurrentReservesHaveOneWinner},
	{"ConcurrentNewOwnersHaveOneWinner", concurrentNewOwnersHaveOneWinner},
	{"ADoneContextFailsTheCall", aDoneContextFailsTheCall},
	{"CountObjectsCountsRowsByOwnerAndKind", countObjectsCountsRowsByOwnerAndKind},
}

// suite is one check's store and helpers.
type suite struct {
	h   Harness
	s   relocation.Store
	ctx context.Context
}

var (
	objA = relocation.Object{Kind: "storetest", ID: "a"}
	objB = relocation.Object{Kind: "storetest", ID: "b"}
)

// needClock skips the check when the harness cannot move the store's clock.
func (x *suite) needClock(t *testing.T) {
	t.Helper()
	if x.h.Advance == nil {
		t.Skip("storetest: Harness.Advance is nil: the store's clock cannot be moved, so lease expiry is not checked")
	}
}

func (x *suite) advance(t *testing.T, d time.Duration) {
	t.Helper()
	x.h.Advance(t, x.s, d)
}

// pass moves the store's clock forward by d in steps of LeaseRenew,
// renewing the leases of hosts (generation 1) after each step, as live
// hosts do: the store is never silent, so the leases of other hosts run
// out as their TTL says.
func (x *suite) pass(t *testing.T, d time.Duration, hosts ...string) {
	t.Helper()
	for d > 0 {
		step := min(d, relocation.LeaseRenew)
		x.advance(t, step)
		d -= step
		for _, h := range hosts {
			x.lease(t, h, 1)
		}
	}
}

// lease renews host's lease at generation gen: for the store's default
// length, or — on a store whose clock the suite cannot advance — for
// wallClockLease, so that a slow or loaded machine never lets a lease run
// out mid-check (the checks that need one to run out are skipped there).
func (x *suite) lease(t *testing.T, host string, gen uint64) relocation.Lease {
	t.Helper()
	ttl := time.Duration(0) // the store's default, relocation.LeaseTTL
	if x.h.Advance == nil {
		ttl = wallClockLease
	}
	l, err := x.s.RenewLease(x.ctx, host, gen, ttl)
	if err != nil {
		t.Fatalf("RenewLease(%q, %d) = %v", host, gen, err)
	}
	return l
}

func (x *suite) get(t *testing.T, obj relocation.Object) relocation.Row {
	t.Helper()
	r, err := x.s.Get(x.ctx, obj)
	if err != nil {
		t.Fatalf("Get(%v) = %v", obj, err)
	}
	return r
}

func (x *suite) reserve(t *testing.T, obj relocation.Object, host string) relocation.Row {
	t.Helper()
	r, err := x.s.Reserve(x.ctx, obj, host)
	if err != nil {
		t.Fatalf("Reserve(%v, %q) = %v", obj, host, err)
	}
	return r
}

func (x *suite) commit(t *testing.T, obj relocation.Object, expect relocation.Ownership) relocation.Row {
	t.Helper()
	r, err := x.s.Commit(x.ctx, obj, expect)
	if err != nil {
		t.Fatalf("Commit(%v, %+v) = %v", obj, expect, err)
	}
	return r
}

// active reserves and commits obj on host (whose lease must be live).
func (x *suite) active(t *testing.T, obj relocation.Object, host string) relocation.Row {
	t.Helper()
	return x.commit(t, obj, x.reserve(t, obj, host).Ownership)
}

func (x *suite) preserve(t *testing.T, obj relocation.Object, expect relocation.Ownership, order []byte) relocation.Row {
	t.Helper()
	r, err := x.s.Preserve(x.ctx, obj, expect, order)
	if err != nil {
		t.Fatalf("Preserve(%v, %+v) = %v", obj, expect, err)
	}
	return r
}

// unchanged fails the check unless obj's row is still want.
func (x *suite) unchanged(t *testing.T, obj relocation.Object, want relocation.Row, after string) {
	t.Helper()
	if got := x.get(t, obj); !sameRow(got, want) {
		t.Errorf("after %s the row is %s, want it unchanged: %s", after, fmtRow(got), fmtRow(want))
	}
}

// sameRow compares rows; a nil and an empty Order are the same.
func sameRow(a, b relocation.Row) bool {
	return a.Object == b.Object && a.Ownership == b.Ownership && a.State == b.State && bytes.Equal(a.Order, b.Order)
}

func fmtRow(r relocation.Row) string {
	return fmt.Sprintf("{%v %s host=%q leaseGen=%d objectGen=%d ownerGen=%d version=%d order=%q}",
		r.Object, r.State, r.Host, r.LeaseGen, r.ObjectGen, r.OwnerGen, r.Version, r.Order)
}

// conflict returns err as a *ConflictError, failing the check if it is not one.
func conflict(t *testing.T, err error, call string) *relocation.ConflictError {
	t.Helper()
	var ce *relocation.ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("%s = %v, want a *relocation.ConflictError", call, err)
	}
	if !errors.Is(err, payload.Rejected) {
		t.Errorf("%s = %v: a conflict must be of kind Rejected", call, err)
	}
	return ce
}

// conflictWithCurrent checks that err is a conflict whose Current is the row
// as the store holds it, with NewerOwner as wanted.
func (x *suite) conflictWithCurrent(t *testing.T, err error, call string, obj relocation.Object, newer bool) *relocation.ConflictError {
	t.Helper()
	ce := conflict(t, err, call)
	if now := x.get(t, obj); !sameRow(ce.Current, now) {
		t.Errorf("%s: conflict's Current = %s, want the row as it is: %s", call, fmtRow(ce.Current), fmtRow(now))
	}
	if ce.NewerOwner != newer {
		t.Errorf("%s: conflict's NewerOwner = %v, want %v", call, ce.NewerOwner, newer)
	}
	return ce
}
