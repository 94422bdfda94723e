package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
)

// The state store rules (relocation.StateStore), run over a store that
// implements it and skipped, saying so, over one that does not:
//
//   - LoadState of an object never written is ErrNoState.
//   - A write of the current owner lands; LoadState returns its bytes and
//     owner generation.
//   - A write of anyone but the current owner is fenced and writes
//     nothing: after a move (NewOwner), a takeover (Reserve), a Preserve,
//     with another lease generation, before Commit, without a row.
//   - A batch is judged write by write: the fenced ones are reported by
//     index, the others land.
//   - A batch with two writes of one object is refused whole.
//   - Ownership changes keep the state row.
//   - A write racing a takeover either lands before it (and the new
//     owner's LoadState sees it) or not at all.
//   - A call with a done ctx fails and writes nothing.
var stateRules = []struct {
	name  string
	check func(*testing.T, *suite, relocation.StateStore)
}{
	{"LoadStateOfAnObjectNeverWrittenIsErrNoState", loadStateOfAnObjectNeverWrittenIsErrNoState},
	{"AStateWriteOfTheCurrentOwnerLands", aStateWriteOfTheCurrentOwnerLands},
	{"AStateWriteOfAnyoneButTheCurrentOwnerIsFenced", aStateWriteOfAnyoneButTheCurrentOwnerIsFenced},
	{"AStateBatchIsJudgedWriteByWrite", aStateBatchIsJudgedWriteByWrite},
	{"AStateBatchWithTwoWritesOfOneObjectIsRefused", aStateBatchWithTwoWritesOfOneObjectIsRefused},
	{"OwnershipChangesKeepTheState", ownershipChangesKeepTheState},
	{"AStateWriteRacingATakeoverLandsBeforeItOrNotAtAll", aStateWriteRacingATakeoverLandsBeforeItOrNotAtAll},
	{"AStateCallWithADoneContextFailsAndWritesNothing", aStateCallWithADoneContextFailsAndWritesNothing},
}

func init() {
	for _, r := range stateRules {
		rules = append(rules, struct {
			name  string
			check func(*testing.T, *suite)
		}{r.name, func(t *testing.T, x *suite) {
			ss, ok := x.s.(relocation.StateStore)
			if !ok {
				t.Skip("the store is no relocation.StateStore")
			}
			r.check(t, x, ss)
		}})
	}
}

func (x *suite) load(t *testing.T, ss relocation.StateStore, obj relocation.Object) (relocation.StoredState, bool) {
	t.Helper()
	st, err := ss.LoadState(x.ctx, obj)
	if errors.Is(err, relocation.ErrNoState) {
		return st, false
	}
	if err != nil {
		t.Fatalf("LoadState(%v) = %v", obj, err)
	}
	return st, true
}

// write writes one state and reports whether it landed (not fenced).
func (x *suite) write(t *testing.T, ss relocation.StateStore, obj relocation.Object, owner relocation.Ownership, data string) bool {
	t.Helper()
	fenced, err := ss.WriteStates(x.ctx, []relocation.StateWrite{{Object: obj, Owner: owner, Data: []byte(data)}})
	if err != nil {
		t.Fatalf("WriteStates(%v, %q) = %v", obj, data, err)
	}
	return len(fenced) == 0
}

// hasState fails the check unless obj's state is data, written by owner
// generation gen.
func (x *suite) hasState(t *testing.T, ss relocation.StateStore, obj relocation.Object, data string, gen uint64, after string) {
	t.Helper()
	st, ok := x.load(t, ss, obj)
	if !ok {
		t.Fatalf("after %s %v has no state, want %q", after, obj, data)
	}
	if string(st.Data) != data || st.OwnerGen != gen {
		t.Fatalf("after %s %v's state is %q (owner generation %d), want %q (owner generation %d)", after, obj, st.Data, st.OwnerGen, data, gen)
	}
}

func loadStateOfAnObjectNeverWrittenIsErrNoState(t *testing.T, x *suite, ss relocation.StateStore) {
	if _, err := ss.LoadState(x.ctx, objA); !errors.Is(err, relocation.ErrNoState) || !errors.Is(err, payload.NotFound) {
		t.Fatalf("LoadState of an object without a row = %v, want ErrNoState (NotFound)", err)
	}
	x.lease(t, "A", 1)
	x.active(t, objA, "A")
	if _, err := ss.LoadState(x.ctx, objA); !errors.Is(err, relocation.ErrNoState) {
		t.Fatalf("LoadState of an active object never written = %v, want ErrNoState", err)
	}
}

func aStateWriteOfTheCurrentOwnerLands(t *testing.T, x *suite, ss relocation.StateStore) {
	x.lease(t, "A", 1)
	r := x.active(t, objA, "A")
	if !x.write(t, ss, objA, r.Ownership, "one") {
		t.Fatal("the owner's write was fenced")
	}
	x.hasState(t, ss, objA, "one", r.OwnerGen, "the owner's write")
	if !x.write(t, ss, objA, r.Ownership, "two") {
		t.Fatal("the owner's second write was fenced")
	}
	x.hasState(t, ss, objA, "two", r.OwnerGen, "the owner's second write")
	// Binary and empty states keep every byte.
	bin := string([]byte{0, 1, 2, 0xff, 0})
	x.write(t, ss, objA, r.Ownership, bin)
	x.hasState(t, ss, objA, bin, r.OwnerGen, "a binary write")
	x.write(t, ss, objA, r.Ownership, "")
	x.hasState(t, ss, objA, "", r.OwnerGen, "an empty write")
	// Only the fenced fields count: ObjectGen and Version may differ.
	other := r.Ownership
	other.Version += 7
	other.ObjectGen += 3
	if !x.write(t, ss, objA, other, "three") {
		t.Fatal("a write with another store version and object generation was fenced; only host, lease and owner generation count")
	}
	// The location row is not touched by state writes.
	x.unchanged(t, objA, r, "state writes")
}

func aStateWriteOfAnyoneButTheCurrentOwnerIsFenced(t *testing.T, x *suite, ss relocation.StateStore) {
	x.lease(t, "A", 1)
	x.lease(t, "B", 1)
	r := x.active(t, objA, "A")
	x.write(t, ss, objA, r.Ownership, "a1")
	check := func(owner relocation.Ownership, who string) {
		t.Helper()
		if x.write(t, ss, objA, owner, "zombie "+who) {
			t.Errorf("the write of %s landed; want it fenced", who)
		}
	}
	for _, c := range []struct {
		who string
		f   func(*relocation.Ownership)
	}{
		{"another host", func(o *relocation.Ownership) { o.Host = "B" }},
		{"another lease generation", func(o *relocation.Ownership) { o.LeaseGen++ }},
		{"an older owner generation", func(o *relocation.Ownership) { o.OwnerGen-- }},
		{"a newer owner generation", func(o *relocation.Ownership) { o.OwnerGen++ }},
	} {
		o := r.Ownership
		c.f(&o)
		check(o, c.who)
	}
	x.hasState(t, ss, objA, "a1", r.OwnerGen, "fenced writes")

	// After a move the source is fenced; the target writes.
	moved, err := x.s.NewOwner(x.ctx, objA, r.Ownership, "B")
	if err != nil {
		t.Fatalf("NewOwner = %v", err)
	}
	check(r.Ownership, "the source after the move")
	x.hasState(t, ss, objA, "a1", r.OwnerGen, "the source's write after the move")
	if !x.write(t, ss, objA, moved.Ownership, "b1") {
		t.Fatal("the target's write after the move was fenced")
	}
	// After a Preserve nobody writes, not even the last owner.
	p := x.preserve(t, objA, moved.Ownership, nil)
	check(moved.Ownership, "the owner after its Preserve")
	check(p.Ownership, "the preserved row's ownership")
	x.hasState(t, ss, objA, "b1", moved.OwnerGen, "writes after the Preserve")
	// A reservation not yet committed runs nothing: fenced too.
	res := x.reserve(t, objA, "A")
	check(res.Ownership, "a reservation not yet committed")
	// No row at all.
	if x.write(t, ss, objB, r.Ownership, "nobody") {
		t.Error("a write of an object without a location row landed")
	}
	if _, ok := x.load(t, ss, objB); ok {
		t.Error("a fenced write of an object without a row left a state")
	}
}

func aStateBatchIsJudgedWriteByWrite(t *testing.T, x *suite, ss relocation.StateStore) {
	x.lease(t, "A", 1)
	x.lease(t, "B", 1)
	var writes []relocation.StateWrite
	var want []int
	for i := range 6 {
		obj := relocation.Object{Kind: "storetest", ID: "batch-" + strconv.Itoa(i)}
		r := x.active(t, obj, "A")
		owner := r.Ownership
		if i%3 == 1 {
			owner.Host = "B" // fenced
			want = append(want, i)
		}
		writes = append(writes, relocation.StateWrite{Object: obj, Owner: owner, Data: []byte("v" + strconv.Itoa(i))})
	}
	fenced, err := ss.WriteStates(x.ctx, writes)
	if err != nil {
		t.Fatalf("WriteStates = %v", err)
	}
	if !slices.Equal(fenced, want) {
		t.Fatalf("WriteStates fenced %v, want %v", fenced, want)
	}
	for i, w := range writes {
		st, ok := x.load(t, ss, w.Object)
		if slices.Contains(want, i) {
			if ok {
				t.Errorf("fenced write %d left state %q", i, st.Data)
			}
			continue
		}
		if !ok || !bytes.Equal(st.Data, w.Data) {
			t.Errorf("write %d: state %q (present %v), want %q", i, st.Data, ok, w.Data)
		}
	}
	// An empty batch is no error.
	if fenced, err := ss.WriteStates(x.ctx, nil); err != nil || len(fenced) != 0 {
		t.Errorf("WriteStates(nil) = %v, %v", fenced, err)
	}
}

func aStateBatchWithTwoWritesOfOneObjectIsRefused(t *testing.T, x *suite, ss relocation.StateStore) {
	x.lease(t, "A", 1)
	ra := x.active(t, objA, "A")
	rb := x.active(t, objB, "A")
	_, err := ss.WriteStates(x.ctx, []relocation.StateWrite{
		{Object: objB, Owner: rb.Ownership, Data: []byte("b")},
		{Object: objA, Owner: ra.Ownership, Data: []byte("1")},
		{Object: objA, Owner: ra.Ownership, Data: []byte("2")},
	})
	if !errors.Is(err, relocation.ErrDuplicateWrite) || !errors.Is(err, payload.InvalidOperation) {
		t.Fatalf("a batch with two writes of one object = %v, want ErrDuplicateWrite (InvalidOperation)", err)
	}
	for _, obj := range []relocation.Object{objA, objB} {
		if st, ok := x.load(t, ss, obj); ok {
			t.Errorf("the refused batch wrote %v: %q", obj, st.Data)
		}
	}
}

func ownershipChangesKeepTheState(t *testing.T, x *suite, ss relocation.StateStore) {
	x.lease(t, "A", 1)
	x.lease(t, "B", 1)
	r := x.active(t, objA, "A")
	x.write(t, ss, objA, r.Ownership, "kept")
	moved, err := x.s.NewOwner(x.ctx, objA, r.Ownership, "B")
	if err != nil {
		t.Fatalf("NewOwner = %v", err)
	}
	x.hasState(t, ss, objA, "kept", r.OwnerGen, "NewOwner")
	p := x.preserve(t, objA, moved.Ownership, []byte("order"))
	x.hasState(t, ss, objA, "kept", r.OwnerGen, "Preserve")
	back := x.commit(t, objA, x.reserve(t, objA, "A").Ownership)
	if back.OwnerGen != p.OwnerGen+1 {
		t.Fatalf("reactivation's owner generation %d, want %d", back.OwnerGen, p.OwnerGen+1)
	}
	x.hasState(t, ss, objA, "kept", r.OwnerGen, "a reactivation")
	if x.h.Advance == nil {
		return
	}
	// A takeover after the owner's lease ran out keeps it too.
	x.lease(t, "B", 1)
	x.pass(t, relocation.LeaseTTL+1, "B")
	taken := x.reserve(t, objA, "B")
	if taken.Host != "B" {
		t.Fatalf("takeover reserved %s", fmtRow(taken))
	}
	x.hasState(t, ss, objA, "kept", r.OwnerGen, "a takeover")
}

// The fence must be one atomic step with the write: a writer that checked
// the location row before a takeover committed must not land its write
// after the new owner loaded the state. Writers keep writing increasing
// values while another host takes the object over (its former owner's
// lease having been replaced by a newer run) and loads; no write may land
// after that load.
func aStateWriteRacingATakeoverLandsBeforeItOrNotAtAll(t *testing.T, x *suite, ss relocation.StateStore) {
	x.lease(t, "A", 1)
	x.lease(t, "B", 1)
	for round := range rounds {
		obj := relocation.Object{Kind: "storetest", ID: fmt.Sprint("takeover-", round)}
		r := x.active(t, obj, "A")
		var stop atomic.Bool
		var wg sync.WaitGroup
		var seq atomic.Int64
		for w := range 4 {
			wg.Go(func() {
				for !stop.Load() {
					v := seq.Add(1)
					if _, err := ss.WriteStates(x.ctx, []relocation.StateWrite{{Object: obj, Owner: r.Ownership,
						Data: []byte(strconv.FormatInt(v, 10) + "/" + strconv.Itoa(w))}}); err != nil {
						t.Errorf("WriteStates = %v", err)
						return
					}
				}
			})
		}
		// Let the writers run, then end A's ownership by a move to B (the
		// same fence as a takeover: the owner generation moves on).
		for seq.Load() < 20 && !t.Failed() {
			runtime.Gosched()
		}
		moved, err := x.s.NewOwner(x.ctx, obj, r.Ownership, "B")
		if err != nil {
			stop.Store(true)
			wg.Wait()
			t.Fatalf("NewOwner = %v", err)
		}
		seen, _ := x.load(t, ss, obj)
		target := seq.Load() + 20
		for seq.Load() < target && !t.Failed() {
			runtime.Gosched()
		}
		stop.Store(true)
		wg.Wait()
		after, _ := x.load(t, ss, obj)
		if !bytes.Equal(seen.Data, after.Data) {
			t.Fatalf("round %d: the new owner loaded %q, then a write of the former owner landed: %q", round, seen.Data, after.Data)
		}
		if after.OwnerGen != r.OwnerGen || moved.OwnerGen != r.OwnerGen+1 {
			t.Fatalf("round %d: state written by owner generation %d, want %d", round, after.OwnerGen, r.OwnerGen)
		}
	}
}

func aStateCallWithADoneContextFailsAndWritesNothing(t *testing.T, x *suite, ss relocation.StateStore) {
	x.lease(t, "A", 1)
	r := x.active(t, objA, "A")
	x.write(t, ss, objA, r.Ownership, "before")
	ctx, cancel := context.WithCancel(x.ctx)
	cancel()
	if _, err := ss.WriteStates(ctx, []relocation.StateWrite{{Object: objA, Owner: r.Ownership, Data: []byte("after")}}); err == nil {
		t.Error("WriteStates with a cancelled ctx succeeded")
	}
	if _, err := ss.LoadState(ctx, objA); err == nil {
		t.Error("LoadState with a cancelled ctx succeeded")
	}
	x.hasState(t, ss, objA, "before", r.OwnerGen, "a cancelled write")
}
