package relocation

import (
	"context"
	"slices"
	"strings"

	"github.com/berthrt/berth/payload"
)

// StateStore keeps each object's durable state: one state row per object,
// written only by the object's owner. It lives beside the Location Store,
// in the same place (the same MemoryStore, the same database), because
// every write is fenced by the Location Store row, in the same atomic step
// as the write:
//
//   - A write lands only while the object's location row is Active and
//     names exactly the writer's Host, LeaseGen and OwnerGen. Otherwise it
//     writes nothing and is reported fenced. A former owner — paused,
//     partitioned, or slow — can therefore never overwrite the state of a
//     newer one.
//   - Once a Reserve that takes the object over, a NewOwner or a Preserve
//     has returned, no write of the ownership it ended can land any more;
//     and a LoadState after it returns the last write that did land.
//   - Ownership changes never touch the state row: a move, a takeover and
//     a passivation keep it for the next owner to load.
//
// A batch (WriteStates) is one atomic step: either every write in it was
// judged — each landed or was fenced — or, on an error, none landed.
type StateStore interface {
	// LoadState returns the object's last written state, or ErrNoState
	// when no owner ever wrote one.
	LoadState(ctx context.Context, obj Object) (StoredState, error)
	// WriteStates writes a batch of states, each fenced by its Owner, and
	// returns the indexes (ascending) of the writes that were fenced. A
	// batch may hold at most one write per object (InvalidOperation
	// otherwise, and nothing is written). On an error nothing was written;
	// one of kind Unavailable may be retried with the same batch.
	WriteStates(ctx context.Context, writes []StateWrite) (fenced []int, err error)
}

// StateWrite is one write of an object's state: the bytes, and the
// ownership the writer holds (its Host, LeaseGen and OwnerGen are what the
// fence compares; ObjectGen and Version are not compared).
type StateWrite struct {
	Object Object
	Owner  Ownership
	Data   []byte
}

// StoredState is an object's state as last written: the bytes and the
// owner generation of the owner that wrote them.
type StoredState struct {
	Data     []byte
	OwnerGen uint64
}

// State store errors.
var (
	// ErrNoState: the object has no state row (no owner ever wrote one).
	// Kind NotFound.
	ErrNoState = payload.NewError(payload.NotFound, "relocation.StateStore", "no state for the object")
	// ErrFenced: a state write was refused because its writer no longer
	// owns the object (another owner generation, another lease, or no
	// active row). Kind Rejected.
	ErrFenced = payload.NewError(payload.Rejected, "relocation.StateStore", "the writer no longer owns the object")
	// ErrDuplicateWrite: a batch held two writes of one object. Kind
	// InvalidOperation.
	ErrDuplicateWrite = payload.NewError(payload.InvalidOperation, "relocation.StateStore", "two writes of one object in a batch")
)

// fences reports whether r, a Location Store row, lets a write of owner
// land: an active row naming the same host, lease and owner generation.
func fences(r Row, ok bool, owner Ownership) bool {
	return !ok || r.State != Active || r.Host != owner.Host || r.LeaseGen != owner.LeaseGen || r.OwnerGen != owner.OwnerGen
}

// LoadState implements StateStore.
func (s *MemoryStore) LoadState(ctx context.Context, obj Object) (StoredState, error) {
	if err := s.begin(ctx, "LoadState"); err != nil {
		return StoredState{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.states[obj]
	if !ok {
		return StoredState{}, ErrNoState
	}
	st.Data = append([]byte(nil), st.Data...)
	return st, nil
}

// WriteStates implements StateStore: the batch is judged and written
// under the store's lock, with the location rows it is fenced by.
func (s *MemoryStore) WriteStates(ctx context.Context, writes []StateWrite) ([]int, error) {
	if err := s.begin(ctx, "WriteStates"); err != nil {
		return nil, err
	}
	if err := CheckWrites(writes); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writeFault != nil {
		if err := s.writeFault(writes); err != nil {
			return nil, err
		}
	}
	var fenced []int
	for i, w := range writes {
		r, ok := s.rows[w.Object]
		if fences(r, ok, w.Owner) {
			fenced = append(fenced, i)
			continue
		}
		s.states[w.Object] = StoredState{Data: append([]byte(nil), w.Data...), OwnerGen: w.Owner.OwnerGen}
	}
	return fenced, nil
}

// FailStateWrites makes every later WriteStates call f first, under the
// store's lock: a non-nil error fails the whole batch (nothing written) as
// if the store were unreachable. Nil ends the fault. For tests of a state
// store outage.
func (s *MemoryStore) FailStateWrites(f func(writes []StateWrite) error) {
	s.mu.Lock()
	s.writeFault = f
	s.mu.Unlock()
}

// CheckWrites returns ErrDuplicateWrite if two writes of the batch name
// one object, else nil: the check every StateStore makes before it writes
// anything. A small batch compares every pair; a large one sorts the
// batch's indexes (less memory than a set of the objects).
func CheckWrites(writes []StateWrite) error {
	if len(writes) <= 16 {
		for i := range writes {
			for j := i + 1; j < len(writes); j++ {
				if writes[i].Object == writes[j].Object {
					return ErrDuplicateWrite
				}
			}
		}
		return nil
	}
	idx := make([]int, len(writes))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		x, y := writes[a].Object, writes[b].Object
		if c := strings.Compare(x.Kind, y.Kind); c != 0 {
			return c
		}
		return strings.Compare(x.ID, y.ID)
	})
	for i := 1; i < len(idx); i++ {
		if writes[idx[i-1]].Object == writes[idx[i]].Object {
			return ErrDuplicateWrite
		}
	}
	return nil
}

var _ StateStore = (*MemoryStore)(nil)
