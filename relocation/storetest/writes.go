package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/berthrt/berth/relocation"
)

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
