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
	"slices"
	"sync"
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

func getOfAMissingObjectIsErrNoRow(t *testing.T, x *suite) {
	_, err := x.s.Get(x.ctx, objA)
	if !errors.Is(err, relocation.ErrNoRow) {
		t.Fatalf("Get of a missing object = %v, want ErrNoRow", err)
	}
	if !errors.Is(err, payload.NotFound) {
		t.Errorf("Get of a missing object = %v, want kind NotFound", err)
	}
}

func getReturnsTheRowAsTheLastWriteLeftIt(t *testing.T, x *suite) {
	x.lease(t, "A", 1)
	x.lease(t, "B", 1)
	r := x.reserve(t, objA, "A")
	x.unchanged(t, objA, r, "Reserve")
	r = x.commit(t, objA, r.Ownership)
	x.unchanged(t, objA, r, "Commit")
	moved, err := x.s.NewOwner(x.ctx, objA, r.Ownership, "B")
	if err != nil {
		t.Fatalf("NewOwner = %v", err)
	}
	x.unchanged(t, objA, moved, "NewOwner")
	p := x.preserve(t, objA, moved.Ownership, []byte("order"))
	x.unchanged(t, objA, p, "Preserve")
	// Another object's rows are its own.
	if _, err := x.s.Get(x.ctx, objB); !errors.Is(err, relocation.ErrNoRow) {
		t.Errorf("Get of an untouched object = %v, want ErrNoRow", err)
	}
}

func reserveNeedsALiveLease(t *testing.T, x *suite) {
	_, err := x.s.Reserve(x.ctx, objA, "A")
	if !errors.Is(err, relocation.ErrLeaseExpired) {
		t.Fatalf("Reserve by a host without a lease = %v, want ErrLeaseExpired", err)
	}
	if _, err := x.s.Get(x.ctx, objA); !errors.Is(err, relocation.ErrNoRow) {
		t.Errorf("a refused Reserve left a row: Get = %v", err)
	}
	x.needClock(t)
	x.lease(t, "A", 1)
	x.advance(t, relocation.LeaseTTL+time.Millisecond)
	if _, err := x.s.Reserve(x.ctx, objA, "A"); !errors.Is(err, relocation.ErrLeaseExpired) {
		t.Fatalf("Reserve by a host past its lease deadline = %v, want ErrLeaseExpired", err)
	}
	if _, err := x.s.Get(x.ctx, objA); !errors.Is(err, relocation.ErrNoRow) {
		t.Errorf("a refused Reserve left a row: Get = %v", err)
	}
}

func reserveOfAFreeObjectSucceedsOnce(t *testing.T, x *suite) {
	la := x.lease(t, "A", 7)
	x.lease(t, "B", 1)
	r := x.reserve(t, objA, "A")
	if r.Object != objA || r.State != relocation.Reserved || r.Host != "A" || r.LeaseGen != la.Gen ||
		r.ObjectGen != 1 || r.OwnerGen != 1 {
		t.Fatalf("Reserve of a free object = %s, want reserved by A (lease generation 7), object and owner generation 1", fmtRow(r))
	}
	_, err := x.s.Reserve(x.ctx, objA, "B")
	ce := x.conflictWithCurrent(t, err, "second Reserve by another host", objA, false)
	if ce.Current.Host != "A" {
		t.Errorf("the conflict names host %q, want the winner A", ce.Current.Host)
	}
	x.unchanged(t, objA, r, "the refused Reserve")
}

// A reservation blocks other hosts as an active row does: a row "owned by a
// live host" is either.
func reserveOfALiveOwnersObjectConflicts(t *testing.T, x *suite) {
	x.lease(t, "A", 1)
	x.lease(t, "B", 1)
	reserved := x.reserve(t, objA, "A")
	active := x.active(t, objB, "A")
	for _, c := range []struct {
		obj relocation.Object
		row relocation.Row
	}{{objA, reserved}, {objB, active}} {
		_, err := x.s.Reserve(x.ctx, c.obj, "B")
		ce := x.conflictWithCurrent(t, err, "Reserve of a "+c.row.State.String()+" row of a live host", c.obj, false)
		if ce.Current.Host != "A" || ce.Current.OwnerGen != c.row.OwnerGen {
			t.Errorf("the conflict names %s, want the owner A", fmtRow(ce.Current))
		}
		x.unchanged(t, c.obj, c.row, "the refused Reserve")
	}
}

// The doc says "a row owned by a live host is a ConflictError"; the owner
// itself is not meant: actor's activation path reserves a row it may
// already hold (a Preserve that failed) and commits it, and a Reserve
// retried after a transient failure must not fail against its own first
// attempt. So the owner (same host, same lease generation) gets its row
// back, with its ownership unchanged.
func reserveByItsOwnerReturnsTheRow(t *testing.T, x *suite) {
	x.lease(t, "A", 1)
	for _, c := range []struct {
		obj relocation.Object
		row relocation.Row
	}{{objA, x.reserve(t, objA, "A")}, {objB, x.active(t, objB, "A")}} {
		r := c.row
		again, err := x.s.Reserve(x.ctx, c.obj, "A")
		if err != nil {
			t.Fatalf("Reserve by the owner of a %s row = %v, want its row", r.State, err)
		}
		if again.Host != "A" || again.LeaseGen != r.LeaseGen || again.ObjectGen != r.ObjectGen || again.OwnerGen != r.OwnerGen {
			t.Errorf("Reserve by the owner of %s = %s, want the same ownership", fmtRow(r), fmtRow(again))
		}
		x.unchanged(t, c.obj, again, "Reserve by the owner (returned row)")
		// The row it returns is good for Commit (actor commits it at once).
		if got, err := x.s.Commit(x.ctx, c.obj, again.Ownership); err != nil || got.State != relocation.Active {
			t.Errorf("Commit after the owner's Reserve of a %s row = %s, %v", r.State, fmtRow(got), err)
		}
	}
}

func reserveTakesOverAPreservedRow(t *testing.T, x *suite) {
	x.lease(t, "A", 1)
	lb := x.lease(t, "B", 3)
	r := x.active(t, objA, "A")
	p := x.preserve(t, objA, r.Ownership, nil)
	// Preserved rows are free for any live host, the old owner included.
	got := x.reserve(t, objA, "B")
	if got.State != relocation.Reserved || got.Host != "B" || got.LeaseGen != lb.Gen ||
		got.ObjectGen != p.ObjectGen || got.OwnerGen != p.OwnerGen+1 {
		t.Fatalf("Reserve of %s = %s, want reserved by B, object generation kept, owner generation +1", fmtRow(p), fmtRow(got))
	}
	x.unchanged(t, objA, got, "Reserve of a preserved row")
	p = x.preserve(t, objA, x.commit(t, objA, got.Ownership).Ownership, nil)
	if again := x.reserve(t, objA, "A"); again.Host != "A" || again.OwnerGen != p.OwnerGen+1 || again.ObjectGen != p.ObjectGen {
		t.Errorf("Reserve of %s by its earlier owner = %s, want owner generation +1", fmtRow(p), fmtRow(again))
	}
}

func expiredLeaseLetsAnotherHostTakeOver(t *testing.T, x *suite) {
	x.needClock(t)
	x.lease(t, "A", 1)
	lb := x.lease(t, "B", 1)
	r := x.active(t, objA, "A")
	x.pass(t, relocation.LeaseTTL-time.Millisecond, "B")
	_, err := x.s.Reserve(x.ctx, objA, "B")
	x.conflictWithCurrent(t, err, "Reserve while the owner's lease is live", objA, false)
	x.advance(t, 2*time.Millisecond) // A's lease ran out; B's (renewed) is live
	got, err := x.s.Reserve(x.ctx, objA, "B")
	if err != nil {
		t.Fatalf("Reserve after the owner's lease expired = %v, want a takeover", err)
	}
	if got.State != relocation.Reserved || got.Host != "B" || got.LeaseGen != lb.Gen ||
		got.ObjectGen != r.ObjectGen || got.OwnerGen != r.OwnerGen+1 {
		t.Fatalf("takeover of %s = %s, want reserved by B, object generation kept, owner generation +1", fmtRow(r), fmtRow(got))
	}
	// The expired owner can write nothing with its old ownership, even
	// after it renews.
	if l := x.lease(t, "A", 1); !l.Lapsed {
		t.Errorf("the expired owner's renewal = %+v, want Lapsed", l)
	}
	_, err = x.s.Preserve(x.ctx, objA, r.Ownership, nil)
	x.conflictWithCurrent(t, err, "Preserve by the expired owner", objA, true)
	_, err = x.s.Commit(x.ctx, objA, r.Ownership)
	x.conflictWithCurrent(t, err, "Commit by the expired owner", objA, true)
	x.unchanged(t, objA, got, "the expired owner's writes")
}

// A restart replaces the host's lease with one of a newer generation
// (RenewLease), so the old run's lease is missing — expired in
// ErrLeaseExpired's words — and its rows can be taken over at once, by
// another host or by the new run. actor's peerLive relies on it: an owner
// is live only if its lease has the row's lease generation.
func restartedOwnersRowsCanBeTakenOver(t *testing.T, x *suite) {
	x.lease(t, "A", 1)
	x.lease(t, "B", 1)
	ra := x.active(t, objA, "A")
	rb := x.active(t, objB, "A")
	l2 := x.lease(t, "A", 2) // A restarted
	got, err := x.s.Reserve(x.ctx, objA, "B")
	if err != nil {
		t.Fatalf("Reserve of a row of the restarted host's old run = %v, want a takeover", err)
	}
	if got.Host != "B" || got.OwnerGen != ra.OwnerGen+1 || got.ObjectGen != ra.ObjectGen {
		t.Errorf("takeover of %s = %s, want B, owner generation +1", fmtRow(ra), fmtRow(got))
	}
	mine, err := x.s.Reserve(x.ctx, objB, "A")
	if err != nil {
		t.Fatalf("Reserve by the new run of its old run's row = %v", err)
	}
	if mine.Host != "A" || mine.LeaseGen != l2.Gen || mine.OwnerGen != rb.OwnerGen+1 || mine.ObjectGen != rb.ObjectGen {
		t.Errorf("new run's Reserve of %s = %s, want lease generation 2, owner generation +1", fmtRow(rb), fmtRow(mine))
	}
}

func commitTurnsAReservationActive(t *testing.T, x *suite) {
	x.lease(t, "A", 1)
	r := x.reserve(t, objA, "A")
	c := x.commit(t, objA, r.Ownership)
	want := r
	want.State, want.Version = relocation.Active, r.Version+1
	if !sameRow(c, want) {
		t.Fatalf("Commit of %s = %s, want it active with the same ownership, version +1", fmtRow(r), fmtRow(c))
	}
	x.unchanged(t, objA, c, "Commit")
}

// Commit turns "the host's reservation" into an active row: a Preserved
// row, even with the exact expected ownership, is not a reservation.
func commitNeedsAReservation(t *testing.T, x *suite) {
	x.lease(t, "A", 1)
	p := x.preserve(t, objA, x.active(t, objA, "A").Ownership, nil)
	_, err := x.s.Commit(x.ctx, objA, p.Ownership)
	if err == nil {
		t.Fatalf("Commit of a preserved row succeeded: %s", fmtRow(x.get(t, objA)))
	}
	x.conflictWithCurrent(t, err, "Commit of a preserved row", objA, false)
	x.unchanged(t, objA, p, "Commit of a preserved row")
}

func commitWithAStaleExpectationConflicts(t *testing.T, x *suite) {
	x.lease(t, "A", 1)
	r := x.reserve(t, objA, "A")
	c := x.commit(t, objA, r.Ownership)
	p := x.preserve(t, objA, c.Ownership, nil)
	r2 := x.reserve(t, objA, "A") // a second activation: the first one's ownership is stale
	_, err := x.s.Commit(x.ctx, objA, r.Ownership)
	x.conflictWithCurrent(t, err, "Commit with the ownership of an earlier activation", objA, true)
	_, err = x.s.Commit(x.ctx, objA, p.Ownership)
	x.conflictWithCurrent(t, err, "Commit with the preserved row's ownership", objA, true)
	x.unchanged(t, objA, r2, "stale Commits")
}

func newOwnerRaisesTheOwnerGeneration(t *testing.T, x *suite) {
	x.lease(t, "A", 1)
	lb := x.lease(t, "B", 4)
	r := x.active(t, objA, "A")
	moved, err := x.s.NewOwner(x.ctx, objA, r.Ownership, "B")
	if err != nil {
		t.Fatalf("NewOwner = %v", err)
	}
	// The state after a move is Active: the target runs the object as soon
	// as the CAS succeeds (actor opens its queue with the returned row).
	if moved.Object != objA || moved.State != relocation.Active || moved.Host != "B" || moved.LeaseGen != lb.Gen ||
		moved.ObjectGen != r.ObjectGen || moved.OwnerGen != r.OwnerGen+1 || moved.Version != r.Version+1 {
		t.Fatalf("NewOwner of %s to B = %s, want active on B (lease generation 4), object generation kept, owner generation and version +1",
			fmtRow(r), fmtRow(moved))
	}
	x.unchanged(t, objA, moved, "NewOwner")
	// A second move from the new ownership raises it again.
	back, err := x.s.NewOwner(x.ctx, objA, moved.Ownership, "A")
	if err != nil || back.Host != "A" || back.OwnerGen != r.OwnerGen+2 || back.ObjectGen != r.ObjectGen {
		t.Fatalf("move back = %s, %v, want A with owner generation +2", fmtRow(back), err)
	}
}

func newOwnerNeedsALiveLease(t *testing.T, x *suite) {
	x.lease(t, "A", 1)
	r := x.active(t, objA, "A")
	if _, err := x.s.NewOwner(x.ctx, objA, r.Ownership, "B"); !errors.Is(err, relocation.ErrLeaseExpired) {
		t.Fatalf("NewOwner to a host without a lease = %v, want ErrLeaseExpired", err)
	}
	x.unchanged(t, objA, r, "NewOwner to a host without a lease")
	x.needClock(t)
	x.lease(t, "B", 1)
	x.advance(t, relocation.LeaseRenew)
	x.lease(t, "A", 1)
	x.advance(t, relocation.LeaseTTL-relocation.LeaseRenew+time.Millisecond) // B's lease ran out, A's did not
	if _, err := x.s.NewOwner(x.ctx, objA, r.Ownership, "B"); !errors.Is(err, relocation.ErrLeaseExpired) {
		t.Fatalf("NewOwner to a host past its lease deadline = %v, want ErrLeaseExpired", err)
	}
	x.unchanged(t, objA, r, "NewOwner to an expired host")
}

// The target's CAS after a competing move: the row has a newer owner.
func staleMoveReportsANewerOwner(t *testing.T, x *suite) {
	x.lease(t, "A", 1)
	x.lease(t, "B", 1)
	x.lease(t, "C", 1)
	r := x.active(t, objA, "A")
	moved, err := x.s.NewOwner(x.ctx, objA, r.Ownership, "B")
	if err != nil {
		t.Fatalf("NewOwner = %v", err)
	}
	_, err = x.s.NewOwner(x.ctx, objA, r.Ownership, "C")
	ce := x.conflictWithCurrent(t, err, "NewOwner from the ownership before a move", objA, true)
	if ce.Current.Host != "B" {
		t.Errorf("the conflict names %q, want the newer owner B", ce.Current.Host)
	}
	x.unchanged(t, objA, moved, "the stale NewOwner")
}

// Every field of the expected ownership counts: "exactly the expected
// ownership". NewerOwner is set exactly when the row's owner generation is
// above the expected one.
func conditionalWritesNeedTheExactOwnership(t *testing.T, x *suite) {
	x.lease(t, "A", 1)
	x.lease(t, "B", 1)
	// A row whose generations and version are all above 1, so that every
	// field can be perturbed both ways.
	r := x.active(t, objA, "A")
	r, err := x.s.NewOwner(x.ctx, objA, r.Ownership, "B")
	if err != nil {
		t.Fatalf("NewOwner = %v", err)
	}
	r, err = x.s.NewOwner(x.ctx, objA, r.Ownership, "A")
	if err != nil {
		t.Fatalf("NewOwner = %v", err)
	}
	x.lease(t, "A", 2)
	r = x.reserve(t, objA, "A") // the new run takes over: lease generation 2
	r = x.commit(t, objA, r.Ownership)
	type perturb struct {
		name  string
		f     func(*relocation.Ownership)
		newer bool
	}
	perturbs := []perturb{
		{"OtherHost", func(o *relocation.Ownership) { o.Host = "B" }, false},
		{"LowerLeaseGen", func(o *relocation.Ownership) { o.LeaseGen-- }, false},
		{"HigherLeaseGen", func(o *relocation.Ownership) { o.LeaseGen++ }, false},
		{"LowerObjectGen", func(o *relocation.Ownership) { o.ObjectGen-- }, false},
		{"HigherObjectGen", func(o *relocation.Ownership) { o.ObjectGen++ }, false},
		{"LowerOwnerGen", func(o *relocation.Ownership) { o.OwnerGen-- }, true},
		{"HigherOwnerGen", func(o *relocation.Ownership) { o.OwnerGen++ }, false},
		{"LowerVersion", func(o *relocation.Ownership) { o.Version-- }, false},
		{"HigherVersion", func(o *relocation.Ownership) { o.Version++ }, false},
	}
	ops := []struct {
		name string
		call func(relocation.Ownership) error
	}{
		{"Commit", func(o relocation.Ownership) error { _, err := x.s.Commit(x.ctx, objA, o); return err }},
		{"NewOwner", func(o relocation.Ownership) error { _, err := x.s.NewOwner(x.ctx, objA, o, "B"); return err }},
		{"Preserve", func(o relocation.Ownership) error { _, err := x.s.Preserve(x.ctx, objA, o, []byte("x")); return err }},
		{"Delete", func(o relocation.Ownership) error { return x.s.Delete(x.ctx, objA, o) }},
	}
	for _, op := range ops {
		for _, p := range perturbs {
			expect := r.Ownership
			p.f(&expect)
			err := op.call(expect)
			x.conflictWithCurrent(t, err, op.name+" with "+p.name, objA, p.newer)
			x.unchanged(t, objA, r, op.name+" with "+p.name)
		}
	}
}

// ErrNoRow's doc: "the object has no row"; a ConflictError could carry no
// Current. The relocation target treats ErrNoRow from NewOwner as final.
func conditionalWritesOfAMissingRowAreErrNoRow(t *testing.T, x *suite) {
	x.lease(t, "A", 1)
	x.lease(t, "B", 1)
	expect := x.active(t, objB, "A").Ownership // an ownership of another object
	calls := map[string]func() error{
		"Commit":   func() error { _, err := x.s.Commit(x.ctx, objA, expect); return err },
		"NewOwner": func() error { _, err := x.s.NewOwner(x.ctx, objA, expect, "B"); return err },
		"Preserve": func() error { _, err := x.s.Preserve(x.ctx, objA, expect, nil); return err },
		"Delete":   func() error { return x.s.Delete(x.ctx, objA, expect) },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, relocation.ErrNoRow) {
			t.Errorf("%s of a missing row = %v, want ErrNoRow", name, err)
		}
		if _, err := x.s.Get(x.ctx, objA); !errors.Is(err, relocation.ErrNoRow) {
			t.Fatalf("%s of a missing row made one: Get = %v", name, err)
		}
	}
}

// Preserve "ends the owner's ownership, keeping the generations". What the
// Host field of a preserved row holds is not stated (MemoryStore clears it);
// actor tests the state, so this check does too.
func preserveKeepsTheGenerations(t *testing.T, x *suite) {
	x.lease(t, "A", 1)
	x.lease(t, "B", 1)
	r := x.active(t, objA, "A")
	r, err := x.s.NewOwner(x.ctx, objA, r.Ownership, "B")
	if err != nil {
		t.Fatalf("NewOwner = %v", err)
	}
	p := x.preserve(t, objA, r.Ownership, nil)
	if p.State != relocation.Preserved || p.ObjectGen != r.ObjectGen || p.OwnerGen != r.OwnerGen {
		t.Fatalf("Preserve of %s = %s, want preserved with the generations kept", fmtRow(r), fmtRow(p))
	}
	x.unchanged(t, objA, p, "Preserve")
	// The owner's ownership ended: a host the old owner's lease would have
	// blocked reserves the row.
	if got := x.reserve(t, objA, "A"); got.Host != "A" {
		t.Errorf("Reserve after Preserve = %s, want A", fmtRow(got))
	}
}

// Preserve stores the order state, the next activation (Reserve) reads it,
// nil clears it. The store keeps its own copy: changing the caller's slice
// afterwards changes nothing in the row.
func preserveKeepsTheOrderState(t *testing.T, x *suite) {
	x.lease(t, "A", 1)
	order := []byte("receive-order state")
	p := x.preserve(t, objA, x.active(t, objA, "A").Ownership, order)
	if string(p.Order) != "receive-order state" {
		t.Fatalf("Preserve returned order %q, want the one given", p.Order)
	}
	copy(order, "XXXXXXX")
	if got := x.get(t, objA); string(got.Order) != "receive-order state" {
		t.Fatalf("Get after Preserve: order %q, want the one given (the store keeps its own copy)", got.Order)
	}
	r := x.reserve(t, objA, "A")
	if string(r.Order) != "receive-order state" {
		t.Fatalf("Reserve after Preserve: order %q, want the preserved one", r.Order)
	}
	p = x.preserve(t, objA, x.commit(t, objA, r.Ownership).Ownership, nil)
	if len(p.Order) != 0 || len(x.get(t, objA).Order) != 0 {
		t.Fatalf("Preserve with nil order left order %q", x.get(t, objA).Order)
	}
	if r := x.reserve(t, objA, "A"); len(r.Order) != 0 {
		t.Fatalf("Reserve after Preserve(nil): order %q, want none", r.Order)
	}
}

func onlyPreserveWritesTheOrderState(t *testing.T, x *suite) {
	x.lease(t, "A", 1)
	x.lease(t, "B", 1)
	p := x.preserve(t, objA, x.active(t, objA, "A").Ownership, []byte("order"))
	r := x.reserve(t, objA, "A")
	r = x.commit(t, objA, r.Ownership)
	if string(r.Order) != "order" {
		t.Errorf("Commit changed order %q to %q", p.Order, r.Order)
	}
	moved, err := x.s.NewOwner(x.ctx, objA, r.Ownership, "B")
	if err != nil {
		t.Fatalf("NewOwner = %v", err)
	}
	if string(moved.Order) != "order" || string(x.get(t, objA).Order) != "order" {
		t.Errorf("NewOwner changed order %q to %q", p.Order, moved.Order)
	}
}

// Reserve "creates the row (object and owner generation 1)": after a
// Delete the next Reserve creates a new row.
func deleteRemovesTheRow(t *testing.T, x *suite) {
	x.lease(t, "A", 1)
	x.lease(t, "B", 1)
	r := x.active(t, objA, "A")
	other := x.active(t, objB, "A")
	if err := x.s.Delete(x.ctx, objA, r.Ownership); err != nil {
		t.Fatalf("Delete = %v", err)
	}
	if _, err := x.s.Get(x.ctx, objA); !errors.Is(err, relocation.ErrNoRow) {
		t.Fatalf("Get after Delete = %v, want ErrNoRow", err)
	}
	x.unchanged(t, objB, other, "Delete of another object")
	if err := x.s.Delete(x.ctx, objA, r.Ownership); !errors.Is(err, relocation.ErrNoRow) {
		t.Errorf("second Delete = %v, want ErrNoRow", err)
	}
	again := x.reserve(t, objA, "B")
	if again.Host != "B" || again.State != relocation.Reserved || again.ObjectGen != 1 || again.OwnerGen != 1 {
		t.Errorf("Reserve after Delete = %s, want a new row reserved by B, generations 1", fmtRow(again))
	}
}

// Version: "+1 on every write of the row"; failed calls write nothing.
func everyWriteRaisesTheVersionByOne(t *testing.T, x *suite) {
	x.lease(t, "A", 1)
	x.lease(t, "B", 1)
	v := x.reserve(t, objA, "A").Version
	step := func(what string) func(relocation.Row, error) relocation.Row {
		return func(r relocation.Row, err error) relocation.Row {
			t.Helper()
			if err != nil {
				t.Fatalf("%s = %v", what, err)
			}
			if r.Version != v+1 {
				t.Fatalf("%s: version %d, want %d", what, r.Version, v+1)
			}
			v = r.Version
			return r
		}
	}
	r := step("Commit")(x.s.Commit(x.ctx, objA, x.get(t, objA).Ownership))
	x.s.Reserve(x.ctx, objA, "B") // refused: no write
	x.unchanged(t, objA, r, "a refused Reserve")
	r = step("NewOwner")(x.s.NewOwner(x.ctx, objA, r.Ownership, "B"))
	r = step("Preserve")(x.s.Preserve(x.ctx, objA, r.Ownership, []byte("o")))
	r = step("Reserve of a preserved row")(x.s.Reserve(x.ctx, objA, "A"))
	x.s.Commit(x.ctx, objA, relocation.Ownership{}) // refused: no write
	x.unchanged(t, objA, r, "a refused Commit")
	step("Commit")(x.s.Commit(x.ctx, objA, r.Ownership))
}

func renewLeaseStartsALease(t *testing.T, x *suite) {
	if _, ok, err := x.s.Lease(x.ctx, "A"); err != nil || ok {
		t.Fatalf("Lease of a host that never renewed = ok %v, %v; want none", ok, err)
	}
	l := x.lease(t, "A", 3)
	if l.Host != "A" || l.Gen != 3 {
		t.Fatalf("RenewLease(A, 3) = %+v", l)
	}
	got, ok, err := x.s.Lease(x.ctx, "A")
	if err != nil || !ok || got.Host != l.Host || got.Gen != l.Gen || !got.Deadline.Equal(l.Deadline) {
		t.Fatalf("Lease(A) = %+v, ok %v, %v; want %+v", got, ok, err, l)
	}
	// The same generation renewing extends (or keeps) the deadline.
	l2 := x.lease(t, "A", 3)
	if l2.Gen != 3 || l2.Deadline.Before(l.Deadline) {
		t.Errorf("renewal %+v moved the deadline back from %v", l2, l.Deadline)
	}
	if _, ok, _ := x.s.Lease(x.ctx, "B"); ok {
		t.Errorf("A's lease gave B one")
	}
}

// leaseRemainingIsByTheStoresClock: RenewLease and Lease say how long the
// lease has left by the store's clock (what a host compares, never the
// deadline with its own clock): LeaseTTL at a renewal, less as the store's
// clock moves, zero or less once it ran out while other hosts renewed.
func leaseRemainingIsByTheStoresClock(t *testing.T, x *suite) {
	x.needClock(t)
	if l := x.lease(t, "A", 1); l.Remaining != relocation.LeaseTTL {
		t.Errorf("RenewLease: Remaining %v, want LeaseTTL (%v)", l.Remaining, relocation.LeaseTTL)
	}
	part := relocation.LeaseTTL / 4
	x.advance(t, part)
	l, ok, err := x.s.Lease(x.ctx, "A")
	if err != nil || !ok || l.Remaining != relocation.LeaseTTL-part {
		t.Errorf("Lease %v after the renewal: %+v, %v, %v; want Remaining %v", part, l, ok, err, relocation.LeaseTTL-part)
	}
	x.pass(t, relocation.LeaseTTL, "B") // another host renews: no silence keeps A's lease
	if l, ok, err := x.s.Lease(x.ctx, "A"); err != nil || !ok || l.Remaining > 0 {
		t.Errorf("Lease after it ran out: %+v, %v, %v; want Remaining <= 0", l, ok, err)
	}
}

// A lease lasts LeaseTTL from its renewal (by the store's clock): live just
// before, expired just after; renewing starts it again. The instant of the
// deadline itself is left open ("past its deadline" suggests live, while
// MemoryStore counts it expired).
func leaseLastsLeaseTTL(t *testing.T, x *suite) {
	x.needClock(t)
	l0 := x.lease(t, "A", 1)
	x.advance(t, relocation.LeaseRenew)
	l1 := x.lease(t, "A", 1)
	if d := l1.Deadline.Sub(l0.Deadline); d != relocation.LeaseRenew {
		t.Errorf("renewing %v later moved the deadline by %v, want %v", relocation.LeaseRenew, d, relocation.LeaseRenew)
	}
	x.advance(t, relocation.LeaseTTL-time.Millisecond)
	x.reserve(t, objA, "A") // still live
	x.advance(t, 2*time.Millisecond)
	if _, err := x.s.Reserve(x.ctx, objB, "A"); !errors.Is(err, relocation.ErrLeaseExpired) {
		t.Fatalf("Reserve just past LeaseTTL after the last renewal = %v, want ErrLeaseExpired", err)
	}
	x.lease(t, "A", 1) // an expired lease starts again
	x.reserve(t, objB, "A")
}

func renewalKeepsTheLeaseLive(t *testing.T, x *suite) {
	x.needClock(t)
	x.lease(t, "A", 1)
	x.lease(t, "B", 1)
	r := x.active(t, objA, "A")
	for range 4 * relocation.LeaseTTL / relocation.LeaseRenew {
		x.advance(t, relocation.LeaseRenew)
		x.lease(t, "A", 1)
		x.lease(t, "B", 1)
	}
	_, err := x.s.Reserve(x.ctx, objA, "B")
	x.conflictWithCurrent(t, err, "Reserve of a row whose owner kept renewing", objA, false)
	x.unchanged(t, objA, r, "the refused Reserve")
}

func leaseOfANewerGenerationReplacesTheOld(t *testing.T, x *suite) {
	x.lease(t, "A", 1)
	l := x.lease(t, "A", 2)
	got, ok, err := x.s.Lease(x.ctx, "A")
	if err != nil || !ok || got.Gen != 2 || !got.Deadline.Equal(l.Deadline) {
		t.Fatalf("Lease(A) after a restart = %+v, ok %v, %v; want generation 2", got, ok, err)
	}
	if r := x.reserve(t, objA, "A"); r.LeaseGen != 2 {
		t.Errorf("Reserve after a restart: lease generation %d, want 2", r.LeaseGen)
	}
}

// Once a newer run holds the lease, the old run (lower generation) cannot
// renew: RenewLease is refused with kind Rejected (not Unavailable, which
// would invite a retry) and the lease stays the newer run's.
func leaseOfAnotherGenerationIsRefused(t *testing.T, x *suite) {
	x.lease(t, "A", 1)
	l := x.lease(t, "A", 2)
	_, err := x.s.RenewLease(x.ctx, "A", 1, 0)
	if err == nil {
		t.Fatalf("the old run renewed after the new run: %+v", l)
	}
	if !errors.Is(err, payload.Rejected) {
		t.Errorf("RenewLease of an older generation = %v, want kind Rejected", err)
	}
	got, ok, err := x.s.Lease(x.ctx, "A")
	if err != nil || !ok || got.Gen != 2 || !got.Deadline.Equal(l.Deadline) {
		t.Errorf("Lease(A) after a refused renewal = %+v, ok %v, %v; want %+v", got, ok, err, l)
	}
}

// aRenewalSaysWhetherTheLeaseLapsed: Lease.Lapsed is set exactly when the
// renewing run's own lease had run out by the store's clock (while the
// store was in contact with other hosts): not for a first lease, a live
// one, or a new run's.
func aRenewalSaysWhetherTheLeaseLapsed(t *testing.T, x *suite) {
	if l := x.lease(t, "A", 1); l.Lapsed {
		t.Errorf("a first lease: %+v, want not Lapsed", l)
	}
	want := relocation.LeaseTTL
	if x.h.Advance == nil {
		want = wallClockLease
	}
	if l := x.lease(t, "A", 1); l.Lapsed || l.TTL != want {
		t.Errorf("a renewal of a live lease: %+v, want not Lapsed, TTL %v", l, want)
	}
	x.needClock(t)
	x.lease(t, "B", 1)
	x.pass(t, relocation.LeaseTTL+relocation.LeaseRenew, "B")
	if l := x.lease(t, "A", 1); !l.Lapsed || l.Remaining != relocation.LeaseTTL {
		t.Errorf("a renewal after the lease ran out: %+v, want Lapsed and a fresh LeaseTTL", l)
	}
	if l := x.lease(t, "A", 1); l.Lapsed {
		t.Errorf("the next renewal: %+v, want not Lapsed", l)
	}
	x.pass(t, relocation.LeaseTTL+relocation.LeaseRenew, "B")
	if l := x.lease(t, "A", 2); l.Lapsed {
		t.Errorf("a new run's first lease after the old one ran out: %+v, want not Lapsed", l)
	}
	// A lease of another length lasts that long.
	short := relocation.LeaseTTL / 2
	l, err := x.s.RenewLease(x.ctx, "C", 1, short)
	if err != nil || l.TTL != short || l.Remaining != short {
		t.Fatalf("RenewLease(C, 1, %v) = %+v, %v; want TTL and Remaining %v", short, l, err, short)
	}
	x.pass(t, short+time.Millisecond, "B")
	if l, ok, err := x.s.Lease(x.ctx, "C"); err != nil || !ok || l.Remaining > 0 || l.TTL != short {
		t.Errorf("Lease(C) %v after its renewal = %+v, %v, %v; want run out, TTL %v", short+time.Millisecond, l, ok, err, short)
	}
}

// ownedNamesTheRowsOfTheRun: Owned is true exactly for the rows, reserved
// or active, that name the host's run.
func ownedNamesTheRowsOfTheRun(t *testing.T, x *suite) {
	x.lease(t, "A", 1)
	x.lease(t, "B", 1)
	objC := relocation.Object{Kind: "storetest", ID: "c"}
	objD := relocation.Object{Kind: "storetest", ID: "d"}
	objE := relocation.Object{Kind: "storetest", ID: "e"}
	x.active(t, objA, "A")
	x.reserve(t, objB, "A")
	x.preserve(t, objC, x.active(t, objC, "A").Ownership, nil)
	x.active(t, objD, "B")
	objs := []relocation.Object{objA, objB, objC, objD, objE}
	got, err := x.s.Owned(x.ctx, "A", 1, objs)
	if want := []bool{true, true, false, false, false}; err != nil || !slices.Equal(got, want) {
		t.Errorf("Owned(A, 1, a b c d e) = %v, %v; want %v", got, err, want)
	}
	if got, err := x.s.Owned(x.ctx, "A", 2, objs); err != nil || slices.Contains(got, true) || len(got) != len(objs) {
		t.Errorf("Owned(A, 2, ...) of another run = %v, %v; want all false", got, err)
	}
	if got, err := x.s.Owned(x.ctx, "A", 1, nil); err != nil || len(got) != 0 {
		t.Errorf("Owned(A, 1, none) = %v, %v; want empty", got, err)
	}
}

// aSilenceOfTheStoreTakesNothingOver: a store that heard no renewal for
// longer than the leases (it was restarted, failed over, cut off from
// every host) takes no row over for it, before or after its next renewal;
// that renewal gives every lease live before the silence a full length.
// Only renewals that keep coming let a lease run out.
func aSilenceOfTheStoreTakesNothingOver(t *testing.T, x *suite) {
	x.needClock(t)
	x.lease(t, "A", 1)
	x.lease(t, "B", 1)
	r := x.active(t, objA, "A")
	x.advance(t, 2*relocation.LeaseTTL) // nobody reached the store
	if _, err := x.s.Reserve(x.ctx, objA, "B"); err == nil {
		t.Fatalf("Reserve of A's row after a silence of the store took it over")
	} else if !errors.Is(err, relocation.ErrLeaseExpired) {
		x.conflictWithCurrent(t, err, "Reserve after a silence, before any renewal", objA, false)
	}
	x.unchanged(t, objA, r, "a Reserve after a silence")
	if l := x.lease(t, "B", 1); l.Lapsed {
		t.Errorf("B's renewal after the silence = %+v: the silence kept its lease, want not Lapsed", l)
	}
	if l, ok, err := x.s.Lease(x.ctx, "A"); err != nil || !ok || l.Remaining != relocation.LeaseTTL {
		t.Errorf("A's lease after the silence ended = %+v, %v, %v; want a full LeaseTTL from then", l, ok, err)
	}
	_, err := x.s.Reserve(x.ctx, objA, "B")
	x.conflictWithCurrent(t, err, "Reserve after the silence ended", objA, false)
	x.pass(t, relocation.LeaseTTL-relocation.LeaseRenew, "B")
	if l := x.lease(t, "A", 1); l.Lapsed {
		t.Errorf("A's renewal within the window the silence gave it = %+v, want not Lapsed", l)
	}
	if got, err := x.s.Owned(x.ctx, "A", 1, []relocation.Object{objA}); err != nil || !got[0] {
		t.Errorf("Owned(A, objA) = %v, %v; want true", got, err)
	}
	// Renewals that keep coming let a lease run out as before.
	x.pass(t, relocation.LeaseTTL+relocation.LeaseRenew, "B")
	taken, err := x.s.Reserve(x.ctx, objA, "B")
	if err != nil || taken.Host != "B" {
		t.Fatalf("Reserve after A stopped renewing while B renewed = %s, %v; want a takeover", fmtRow(taken), err)
	}
}

// aLeaseASilenceKeepsReadsLive: a lease that ran out during a silence of
// the store that no renewal has ended reads live (Remaining its TTL) — a
// host that judges its peers by their leases judges them as Reserve does,
// and does not route around a live owner the store would not let it take
// over; a lease that ran out while others renewed reads run out.
func aLeaseASilenceKeepsReadsLive(t *testing.T, x *suite) {
	x.needClock(t)
	x.lease(t, "A", 1)
	x.lease(t, "B", 1)
	x.advance(t, 2*relocation.LeaseTTL) // nobody reached the store
	for _, h := range []string{"A", "B"} {
		if l, ok, err := x.s.Lease(x.ctx, h); err != nil || !ok || l.Remaining != relocation.LeaseTTL {
			t.Errorf("%s's lease in a silence = %+v, %v, %v; want Remaining a full LeaseTTL (the silence keeps it)", h, l, ok, err)
		}
	}
	x.lease(t, "B", 1) // the silence ends: A's lease gets a full length
	x.pass(t, relocation.LeaseTTL+relocation.LeaseRenew, "B")
	if l, ok, err := x.s.Lease(x.ctx, "A"); err != nil || !ok || l.Remaining > 0 {
		t.Errorf("A's lease after it stopped renewing while B renewed = %+v, %v, %v; want it run out", l, ok, err)
	}
}

// aSilenceShorterThanALeaseTakesNothingOver: a silence longer than half a
// lease but shorter than the taker's own lease: the taker's lease is live,
// the owner's ran out during the silence — and still nothing is taken
// over until a renewal ended the silence (which keeps the owner's lease).
func aSilenceShorterThanALeaseTakesNothingOver(t *testing.T, x *suite) {
	x.needClock(t)
	x.lease(t, "A", 1)
	r := x.active(t, objA, "A")
	x.advance(t, relocation.LeaseTTL*2/5)
	x.lease(t, "B", 1)
	x.advance(t, relocation.LeaseTTL*7/10) // A's lease ran out in a silence; B's is live
	_, err := x.s.Reserve(x.ctx, objA, "B")
	x.conflictWithCurrent(t, err, "Reserve of a row whose owner's lease ran out in a silence", objA, false)
	x.unchanged(t, objA, r, "the refused Reserve")
	x.lease(t, "B", 1) // the silence ends: A's lease was live when it began
	if l, ok, err := x.s.Lease(x.ctx, "A"); err != nil || !ok || l.Remaining != relocation.LeaseTTL {
		t.Errorf("A's lease after the silence ended = %+v, %v, %v; want a full LeaseTTL from then", l, ok, err)
	}
	_, err = x.s.Reserve(x.ctx, objA, "B")
	x.conflictWithCurrent(t, err, "Reserve after the silence ended", objA, false)
}

// aTakeoverAndTheOwnersRenewalAreOrdered: an owner whose lease ran out
// renews while another host takes its rows over. Whatever the
// interleaving, a row that Owned reports as the owner's after the
// renewal is never taken over by a Reserve that raced it, and the owner's
// renewal says Lapsed.
func aTakeoverAndTheOwnersRenewalAreOrdered(t *testing.T, x *suite) {
	x.needClock(t)
	x.lease(t, "B", 1)
	for round := range rounds {
		objs := make([]relocation.Object, 8)
		gen := uint64(round + 1)
		x.lease(t, "A", gen)
		for i := range objs {
			objs[i] = relocation.Object{Kind: "storetest", ID: fmt.Sprint("ordered-", round, "-", i)}
			x.active(t, objs[i], "A")
		}
		x.pass(t, relocation.LeaseTTL+relocation.LeaseRenew, "B") // A's lease ran out
		var wg sync.WaitGroup
		taken := make([]bool, len(objs))
		errs := make([]error, len(objs))
		start := make(chan struct{})
		for i := range objs {
			wg.Go(func() {
				<-start
				row, err := x.s.Reserve(x.ctx, objs[i], "B")
				taken[i] = err == nil && row.Host == "B"
				var ce *relocation.ConflictError
				if err != nil && !errors.As(err, &ce) {
					errs[i] = err
				}
			})
		}
		var l relocation.Lease
		var lerr error
		var owned []bool
		var oerr error
		wg.Go(func() {
			<-start
			if l, lerr = x.s.RenewLease(x.ctx, "A", gen, 0); lerr == nil {
				owned, oerr = x.s.Owned(x.ctx, "A", gen, objs)
			}
		})
		close(start)
		wg.Wait()
		if lerr != nil || oerr != nil {
			t.Fatalf("round %d: RenewLease = %v, Owned = %v", round, lerr, oerr)
		}
		if !l.Lapsed {
			t.Errorf("round %d: the renewal after the lease ran out = %+v, want Lapsed", round, l)
		}
		for i := range objs {
			if errs[i] != nil {
				t.Errorf("round %d: Reserve(%v) = %v", round, objs[i], errs[i])
			}
			if owned[i] && taken[i] {
				t.Errorf("round %d: %v was reported A's after A's renewal and taken over by B too", round, objs[i])
			}
			if !owned[i] && !taken[i] {
				t.Errorf("round %d: %v is neither A's after its renewal nor taken by B: %s", round, objs[i], fmtRow(x.get(t, objs[i])))
			}
		}
	}
}

// contenders is how many goroutines race in the concurrency checks; rounds
// is how many objects they race for.
const (
	contenders = 16
	rounds     = 20
)

// race runs call(i) for every contender at once and returns the results.
func race(call func(i int) (relocation.Row, error)) ([]relocation.Row, []error) {
	rows, errs := make([]relocation.Row, contenders), make([]error, contenders)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range contenders {
		wg.Go(func() {
			<-start
			rows[i], errs[i] = call(i)
		})
	}
	close(start)
	wg.Wait()
	return rows, errs
}

// oneWinner checks that exactly one call succeeded and every other one got
// a conflict naming the winner, and that the store holds the winner's row.
func (x *suite) oneWinner(t *testing.T, obj relocation.Object, rows []relocation.Row, errs []error, newer bool) {
	t.Helper()
	win := -1
	for i, err := range errs {
		if err == nil {
			if win >= 0 {
				t.Fatalf("%v: two winners: %s and %s", obj, fmtRow(rows[win]), fmtRow(rows[i]))
			}
			win = i
		}
	}
	if win < 0 {
		t.Fatalf("%v: no winner; first error: %v", obj, errs[0])
	}
	w := rows[win]
	x.unchanged(t, obj, w, "the race (winner's row)")
	for i, err := range errs {
		if i == win {
			continue
		}
		ce := conflict(t, err, fmt.Sprintf("%v: loser %d", obj, i))
		if !sameRow(ce.Current, w) {
			t.Errorf("%v: loser %d's conflict shows %s, want the winner's row %s", obj, i, fmtRow(ce.Current), fmtRow(w))
		}
		if ce.NewerOwner != newer {
			t.Errorf("%v: loser %d's conflict has NewerOwner %v, want %v", obj, i, ce.NewerOwner, newer)
		}
	}
}

func hostName(i int) string { return fmt.Sprintf("H%02d", i) }

func concurrentReservesHaveOneWinner(t *testing.T, x *suite) {
	for i := range contenders {
		x.lease(t, hostName(i), 1)
	}
	for n := range rounds {
		// A new row, then the same row preserved: both free for all.
		obj := relocation.Object{Kind: "storetest", ID: fmt.Sprint("race-", n)}
		rows, errs := race(func(i int) (relocation.Row, error) { return x.s.Reserve(x.ctx, obj, hostName(i)) })
		x.oneWinner(t, obj, rows, errs, false)
		r := x.get(t, obj)
		p := x.preserve(t, obj, x.commit(t, obj, r.Ownership).Ownership, nil)
		rows, errs = race(func(i int) (relocation.Row, error) { return x.s.Reserve(x.ctx, obj, hostName(i)) })
		x.oneWinner(t, obj, rows, errs, false)
		if w := x.get(t, obj); w.OwnerGen != p.OwnerGen+1 {
			t.Errorf("%v: the winner's owner generation is %d, want %d (one takeover)", obj, w.OwnerGen, p.OwnerGen+1)
		}
	}
}

// Competing moves of one object from the same ownership (a target's CAS
// each): one commits, the others find a newer owner.
func concurrentNewOwnersHaveOneWinner(t *testing.T, x *suite) {
	for i := range contenders {
		x.lease(t, hostName(i), 1)
	}
	x.lease(t, "A", 1)
	for n := range rounds {
		obj := relocation.Object{Kind: "storetest", ID: fmt.Sprint("move-", n)}
		r := x.active(t, obj, "A")
		rows, errs := race(func(i int) (relocation.Row, error) {
			return x.s.NewOwner(x.ctx, obj, r.Ownership, hostName(i))
		})
		x.oneWinner(t, obj, rows, errs, true)
		if w := x.get(t, obj); w.OwnerGen != r.OwnerGen+1 {
			t.Errorf("%v: owner generation %d after the race, want %d", obj, w.OwnerGen, r.OwnerGen+1)
		}
	}
}

// Implementations must honour ctx: a call whose ctx is done (cancelled, or
// past its deadline) fails and writes nothing. Which error it returns is
// not fixed (ctx.Err() or one wrapping it is the natural choice); actor
// treats any store error as Unavailable. Each call gets a fresh store, so
// that one call's wrongful write cannot hide or fake another's.
func aDoneContextFailsTheCall(t *testing.T, x *suite) {
	calls := []struct {
		name string
		call func(ctx context.Context, s relocation.Store, r relocation.Row) error
	}{
		{"Get", func(ctx context.Context, s relocation.Store, r relocation.Row) error {
			_, err := s.Get(ctx, objA)
			return err
		}},
		{"Reserve", func(ctx context.Context, s relocation.Store, r relocation.Row) error {
			_, err := s.Reserve(ctx, objB, "A")
			return err
		}},
		{"Commit", func(ctx context.Context, s relocation.Store, r relocation.Row) error {
			_, err := s.Commit(ctx, objA, r.Ownership)
			return err
		}},
		{"NewOwner", func(ctx context.Context, s relocation.Store, r relocation.Row) error {
			_, err := s.NewOwner(ctx, objA, r.Ownership, "B")
			return err
		}},
		{"Preserve", func(ctx context.Context, s relocation.Store, r relocation.Row) error {
			_, err := s.Preserve(ctx, objA, r.Ownership, []byte("o"))
			return err
		}},
		{"Delete", func(ctx context.Context, s relocation.Store, r relocation.Row) error {
			return s.Delete(ctx, objA, r.Ownership)
		}},
		{"RenewLease", func(ctx context.Context, s relocation.Store, r relocation.Row) error {
			_, err := s.RenewLease(ctx, "A", 2, 0)
			return err
		}},
		{"Lease", func(ctx context.Context, s relocation.Store, r relocation.Row) error {
			_, _, err := s.Lease(ctx, "A")
			return err
		}},
	}
	dones := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"Cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}},
		{"PastDeadline", func() (context.Context, context.CancelFunc) {
			return context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		}},
	}
	for _, d := range dones {
		for _, c := range calls {
			t.Run(d.name+"/"+c.name, func(t *testing.T) {
				y := &suite{h: x.h, s: x.h.New(t), ctx: x.ctx}
				la := y.lease(t, "A", 1)
				y.lease(t, "B", 1)
				// A reserved row: the conditional writes would all succeed
				// with its ownership and a live ctx.
				r := y.reserve(t, objA, "A")
				ctx, cancel := d.ctx()
				defer cancel()
				if err := c.call(ctx, y.s, r); err == nil {
					t.Errorf("%s with a done ctx succeeded", c.name)
				}
				y.unchanged(t, objA, r, c.name+" with a done ctx")
				if _, err := y.s.Get(y.ctx, objB); !errors.Is(err, relocation.ErrNoRow) {
					t.Errorf("Reserve with a done ctx made a row: Get = %v", err)
				}
				if l, _, _ := y.s.Lease(y.ctx, "A"); l.Gen != la.Gen || !l.Deadline.Equal(la.Deadline) {
					t.Errorf("RenewLease with a done ctx changed the lease from %+v to %+v", la, l)
				}
			})
		}
	}
}

// A Counter counts rows by the host they name and kind: Active and
// Reserved rows count, Preserved ones do not. (Skipped for a store that
// is no relocation.Counter: counting is optional.)
func countObjectsCountsRowsByOwnerAndKind(t *testing.T, x *suite) {
	c, ok := x.s.(relocation.Counter)
	if !ok {
		t.Skip("the store is no relocation.Counter")
	}
	x.lease(t, "h1", 1)
	x.lease(t, "h2", 1)
	other := relocation.Object{Kind: "storetest2", ID: "a"}
	x.active(t, objA, "h1")
	x.reserve(t, objB, "h1") // Reserved: counts for h1
	x.active(t, other, "h2")
	gone := relocation.Object{Kind: "storetest", ID: "gone"}
	x.preserve(t, gone, x.active(t, gone, "h2").Ownership, nil) // Preserved: counts for none
	got, err := c.CountObjects(x.ctx)
	if err != nil {
		t.Fatalf("CountObjects = %v", err)
	}
	want := []relocation.ObjectCount{{Host: "h1", Kind: "storetest", Objects: 2}, {Host: "h2", Kind: "storetest2", Objects: 1}}
	if !slices.Equal(got, want) {
		t.Fatalf("CountObjects = %+v, want %+v", got, want)
	}
}
