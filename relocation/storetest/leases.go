package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
)

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
