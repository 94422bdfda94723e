package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/berthrt/berth/relocation"
)

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
