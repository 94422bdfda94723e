package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
)

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
