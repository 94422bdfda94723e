package relocation

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berthrt/berth/payload"
)

// Lease timing (docs/architecture.md, "Relocation"): by default hosts
// renew every half second and a lease lasts 3.5 s. A crashed host's
// objects serve again elsewhere LeaseTTL − LeaseRenew to LeaseTTL after
// the crash (and the time to take them over). A host whose renewals fail
// or stall past its lease is in jeopardy: it pauses, it does not stop
// (docs/operations.md, "Jeopardy"). A host may ask for another length
// (RenewLease's ttl, actor.Config.LeaseTTL).
const (
	LeaseRenew = 500 * time.Millisecond
	LeaseTTL   = 3500 * time.Millisecond
)

// RowState is the state of an object's Location Store row.
type RowState uint8

// Row states.
const (
	// Reserved: a host reserved the object to activate it, not yet committed.
	Reserved RowState = iota + 1
	// Active: the owner host runs the object.
	Active
	// Preserved: no host owns the object; its generations are kept.
	Preserved
)

// String returns the state's name.
func (s RowState) String() string {
	switch s {
	case Reserved:
		return "reserved"
	case Active:
		return "active"
	case Preserved:
		return "preserved"
	}
	return "none"
}

// Ownership is who owns an object, as read from the store: the owner host
// and its lease generation, the object and owner generations, and the row's
// store version. A move's CAS expects exactly these values.
type Ownership struct {
	Host      string
	LeaseGen  uint64
	ObjectGen uint64 // stable across moves
	OwnerGen  uint64 // +1 on every owner change
	Version   uint64 // store version: +1 on every write of the row
}

// After reports whether o is a later owner of the same object than p: the
// same object generation and a higher owner generation. A move whose
// Prepare names p can then never commit — its commit expects p.
func (o Ownership) After(p Ownership) bool {
	return o.ObjectGen == p.ObjectGen && o.OwnerGen > p.OwnerGen
}

// Row is an object's Location Store row.
type Row struct {
	Object Object
	Ownership
	State RowState
	// Order is the object's receive-order state as its last owner left it
	// when it deactivated (opaque here: package route's Snapshot). Only
	// Preserve writes it; the next activation takes it in.
	Order []byte
}

// Lease is a host's lease: its generation (one per process run) and the
// time it runs out. Past it, the host starts no turn.
type Lease struct {
	Host     string
	Gen      uint64
	Deadline time.Time // by the store's clock
	// Remaining is how long the lease had left, by the store's clock, when
	// the store answered (zero or less: it has run out). A host that asks
	// whether another host's lease is live compares this duration, never
	// Deadline with its own clock: clocks of different machines differ.
	Remaining time.Duration
	// TTL is the lease's length: how long after each renewal (by the
	// store's clock) it runs out.
	TTL time.Duration
	// Lapsed is set by RenewLease when this run's lease had run out by the
	// store's clock before the renewal (and no silence of the store kept
	// it, see Store): another host may have taken rows of this run over
	// meanwhile. The renewal holds again from now; the host asks Owned
	// which of its objects are still its own before it runs any of them.
	Lapsed bool
}

// live reports whether the lease is live at now, or would be were it not
// for a silence: a store that heard from no host for longer than half the
// lease since lastContact judges no lease run out (see Store).
func (l Lease) liveAt(now, lastContact time.Time) bool {
	if now.Before(l.Deadline) {
		return true
	}
	return silent(now, lastContact, l.TTL)
}

// silent reports whether a store last heard a renewal at lastContact is
// silent at now for a lease of length ttl: longer than ttl/2 passed.
func silent(now, lastContact time.Time, ttl time.Duration) bool {
	return !lastContact.IsZero() && now.Sub(lastContact) > ttl/2
}

// Store errors. Each has a kind; ConflictError carries the current row.
var (
	// ErrNoRow: the object has no row.
	ErrNoRow = payload.NewError(payload.NotFound, "relocation.Store", "no row for the object")
	// ErrLeaseExpired: the host's lease is missing or past its deadline.
	ErrLeaseExpired = payload.NewError(payload.Unavailable, "relocation.Store", "host lease expired")
)

// ConflictError reports that a conditional operation found the row changed:
// Current is the row as it is. NewerOwner is set when the row already has a
// newer owner generation than the one expected. Kind Rejected.
type ConflictError struct {
	Current    Row
	NewerOwner bool
}

// Error describes the conflict.
func (e *ConflictError) Error() string {
	if e.NewerOwner {
		return "relocation.Store: rejected: object " + e.Current.Object.String() + " has a newer owner"
	}
	return "relocation.Store: rejected: object " + e.Current.Object.String() + " changed"
}

// Is makes errors.Is(err, payload.Rejected) true.
func (e *ConflictError) Is(target error) bool { return target == payload.Rejected }

// Store is the Location Store: one row per object, changed only by
// conditional operations, and host leases. Implementations: MemoryStore
// (the embedded default) and Postgres (pgstore).
//
// Operations that fail with a transient error (kind Unavailable, other than
// ErrLeaseExpired) may be retried with the same arguments.
//
// # Silences: the store's own absence takes nothing over
//
// A lease that runs out because its host stopped renewing lets other hosts
// take its rows over (Reserve). A lease that runs out because the store
// itself was away — restarted, failed over, cut off from every host — must
// not: each holder gets a full lease from the store's return. The store
// knows it was away by its renewals: hosts renew every fraction of a lease,
// so a store that handled no RenewLease of any host for longer than half a
// lease (by its own clock) was silent. Then:
//
//   - the first RenewLease after a silence gives every lease that was live
//     at the last renewal before it, and whose half length the silence
//     exceeded, a fresh length from now (a lease is never shortened);
//   - until that renewal, no row is taken over: Reserve treats the owner of
//     a row whose lease ran out during a silence as live (a
//     *ConflictError).
//
// A host that renews every LeaseTTL/2 or more often never sees its lease
// run out by a silence alone; a lease whose host had stopped renewing
// before the silence may get one more length (its takeover waits that
// much longer). The rule is in relocation/storetest
// (ASilenceOfTheStoreTakesNothingOver).
type Store interface {
	// Get returns the object's row, or ErrNoRow.
	Get(ctx context.Context, obj Object) (Row, error)
	// Reserve claims the object for activation on host (whose lease must be
	// live): it creates the row (object and owner generation 1), or takes
	// over a Preserved row or one whose owner's lease expired (owner
	// generation +1). A row owned by a live host is a ConflictError. A
	// takeover and the owner's RenewLease are ordered: the renewal either
	// sees the row taken over, or the Reserve sees the lease renewed.
	Reserve(ctx context.Context, obj Object, host string) (Row, error)
	// Commit turns the host's reservation into an active row.
	Commit(ctx context.Context, obj Object, expect Ownership) (Row, error)
	// NewOwner moves the object to newHost (whose lease must be live) if the
	// row still has exactly the expected ownership: owner generation +1,
	// object generation kept. Only the target of a move calls it.
	NewOwner(ctx context.Context, obj Object, expect Ownership, newHost string) (Row, error)
	// Preserve ends the owner's ownership, keeping the generations, and
	// stores order (the object's receive-order state; nil clears it).
	Preserve(ctx context.Context, obj Object, expect Ownership, order []byte) (Row, error)
	// Delete removes the row if it still has the expected ownership, and
	// the object's state row if the store is a StateStore too.
	Delete(ctx context.Context, obj Object, expect Ownership) error
	// RenewLease starts or extends host's lease for ttl (zero: LeaseTTL),
	// by the store's clock, after applying a silence (see above). gen is
	// the host's generation for this process run; a new, higher gen
	// replaces the old lease (the host restarted); an older gen is refused
	// (kind Rejected). The answer says whether this run's lease had run
	// out before the renewal (Lease.Lapsed).
	RenewLease(ctx context.Context, host string, gen uint64, ttl time.Duration) (Lease, error)
	// Lease returns host's lease, its Remaining by the store's clock —
	// except a lease that ran out during a silence no renewal has ended:
	// its holder still holds its rows (Reserve takes none of them), and
	// the renewal that ends the silence gives it a full length, so its
	// Remaining is its TTL. Whoever judges a host by its lease judges it
	// as Reserve does.
	Lease(ctx context.Context, host string) (Lease, bool, error)
	// Owned reports, for each of objs, whether its row names host's run
	// gen as its owner (Reserved or Active): the objects a run whose lease
	// lapsed still owns (Lease.Lapsed). The answer has one entry per
	// object, in order.
	Owned(ctx context.Context, host string, gen uint64, objs []Object) ([]bool, error)
}

// MemoryStore is the in-memory Location Store, the embedded default for
// hosts in one process. Its clock can be replaced for tests. A call whose
// context is done fails with the context's error and changes nothing (as
// a networked store's would). Safe for concurrent use.
type MemoryStore struct {
	mu     sync.Mutex
	rows   map[Object]Row
	leases map[string]Lease
	now    func() time.Time
	// lastContact is the store's time of the last RenewLease (or Expire):
	// the start of a silence, if the next comes more than half a lease
	// later.
	lastContact time.Time

	states     map[Object]StoredState          // StateStore (state.go)
	writeFault func(writes []StateWrite) error // FailStateWrites

	faultMu sync.Mutex
	fault   func(ctx context.Context, op string) error // Fault; guarded by faultMu

}

// NewMemoryStore returns an empty store; now is its clock (nil: time.Now).
func NewMemoryStore(now func() time.Time) *MemoryStore {
	if now == nil {
		now = time.Now
	}
	return &MemoryStore{rows: map[Object]Row{}, leases: map[string]Lease{}, now: now, states: map[Object]StoredState{}}
}

// Fault makes every later call run f first (nil: none), outside the
// store's lock: op is the method's name ("RenewLease", "Reserve", …). A
// non-nil error fails the call with it, changing nothing — the store is
// away, or the call did not reach it; f may also block (honouring ctx) to
// make the store slow. A call f fails is no contact: a store whose every
// call fails is silent (Store, "Silences"). Tests of outages use it.
func (s *MemoryStore) Fault(f func(ctx context.Context, op string) error) {
	s.faultMu.Lock()
	s.fault = f
	s.faultMu.Unlock()
}

// begin checks a call's context and runs the Fault hook.
func (s *MemoryStore) begin(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.faultMu.Lock()
	f := s.fault
	s.faultMu.Unlock()
	if f != nil {
		if err := f(ctx, op); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// liveLocked returns host's lease and whether it is live by the clock
// alone: what a host's own lease needs to act (Reserve, NewOwner).
func (s *MemoryStore) liveLocked(host string) (Lease, bool) {
	l, ok := s.leases[host]
	return l, ok && s.now().Before(l.Deadline)
}

// ownerLiveLocked reports whether the owner a row names (host, run gen)
// still holds its rows: its lease is live, or ran out during a silence
// no renewal has ended yet (Store).
func (s *MemoryStore) ownerLiveLocked(host string, gen uint64) bool {
	l, ok := s.leases[host]
	return ok && l.Gen == gen && l.liveAt(s.now(), s.lastContact)
}

// Get implements Store.
func (s *MemoryStore) Get(ctx context.Context, obj Object) (Row, error) {
	if err := s.begin(ctx, "Get"); err != nil {
		return Row{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.rows[obj]
	if !ok {
		return Row{}, ErrNoRow
	}
	return r, nil
}

// Reserve implements Store.
func (s *MemoryStore) Reserve(ctx context.Context, obj Object, host string) (Row, error) {
	if err := s.begin(ctx, "Reserve"); err != nil {
		return Row{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l, live := s.liveLocked(host)
	if !live {
		return Row{}, ErrLeaseExpired
	}
	r, ok := s.rows[obj]
	switch {
	case !ok:
		r = Row{Object: obj, State: Reserved, Ownership: Ownership{ObjectGen: 1, OwnerGen: 1}}
	case r.State == Preserved:
		r.State, r.OwnerGen = Reserved, r.OwnerGen+1
	case r.Host == host && r.LeaseGen == l.Gen:
		return r, nil // already ours
	default:
		if s.ownerLiveLocked(r.Host, r.LeaseGen) {
			return Row{}, &ConflictError{Current: r}
		}
		r.State, r.OwnerGen = Reserved, r.OwnerGen+1 // the owner is gone
	}
	r.Host, r.LeaseGen = host, l.Gen
	r.Version++
	s.rows[obj] = r
	return r, nil
}

// check compares the row with the expected ownership.
func (s *MemoryStore) checkLocked(obj Object, expect Ownership) (Row, error) {
	r, ok := s.rows[obj]
	if !ok {
		return Row{}, ErrNoRow
	}
	if r.OwnerGen > expect.OwnerGen {
		return Row{}, &ConflictError{Current: r, NewerOwner: true}
	}
	if r.Ownership != expect {
		return Row{}, &ConflictError{Current: r}
	}
	return r, nil
}

// Commit implements Store.
func (s *MemoryStore) Commit(ctx context.Context, obj Object, expect Ownership) (Row, error) {
	if err := s.begin(ctx, "Commit"); err != nil {
		return Row{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.checkLocked(obj, expect)
	if err != nil {
		return Row{}, err
	}
	if r.State != Reserved && r.State != Active {
		return Row{}, &ConflictError{Current: r}
	}
	r.State = Active
	r.Version++
	s.rows[obj] = r
	return r, nil
}

// NewOwner implements Store.
func (s *MemoryStore) NewOwner(ctx context.Context, obj Object, expect Ownership, newHost string) (Row, error) {
	if err := s.begin(ctx, "NewOwner"); err != nil {
		return Row{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l, live := s.liveLocked(newHost)
	if !live {
		return Row{}, ErrLeaseExpired
	}
	r, err := s.checkLocked(obj, expect)
	if err != nil {
		return Row{}, err
	}
	r.Host, r.LeaseGen = newHost, l.Gen
	r.OwnerGen++
	r.State = Active
	r.Version++
	s.rows[obj] = r
	return r, nil
}

// Preserve implements Store.
func (s *MemoryStore) Preserve(ctx context.Context, obj Object, expect Ownership, order []byte) (Row, error) {
	if err := s.begin(ctx, "Preserve"); err != nil {
		return Row{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.checkLocked(obj, expect)
	if err != nil {
		return Row{}, err
	}
	r.Host, r.LeaseGen, r.State = "", 0, Preserved
	r.Order = append([]byte(nil), order...)
	r.Version++
	s.rows[obj] = r
	return r, nil
}

// Delete implements Store.
func (s *MemoryStore) Delete(ctx context.Context, obj Object, expect Ownership) error {
	if err := s.begin(ctx, "Delete"); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.checkLocked(obj, expect); err != nil {
		return err
	}
	delete(s.rows, obj)
	delete(s.states, obj)
	return nil
}

// RenewLease implements Store.
func (s *MemoryStore) RenewLease(ctx context.Context, host string, gen uint64, ttl time.Duration) (Lease, error) {
	if err := s.begin(ctx, "RenewLease"); err != nil {
		return Lease{}, err
	}
	if ttl <= 0 {
		ttl = LeaseTTL
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, had := s.leases[host]; had && old.Gen > gen {
		return Lease{}, payload.NewError(payload.Rejected, "relocation.Store.RenewLease", "a newer run of host "+host+" holds the lease")
	}
	now := s.now()
	s.endSilenceLocked(now) // first: a lease a silence kept has not lapsed
	old, had := s.leases[host]
	l := Lease{Host: host, Gen: gen, Deadline: now.Add(ttl), TTL: ttl}
	if had && old.Gen == gen {
		l.Lapsed = !now.Before(old.Deadline)
		if old.Deadline.After(l.Deadline) {
			l.Deadline = old.Deadline // never shortened
		}
	}
	s.leases[host] = l
	l.Remaining = l.Deadline.Sub(now)
	return l, nil
}

// endSilenceLocked applies a silence that ends at now (Store): every lease
// live at the last contact whose half length the silence exceeded gets a
// fresh length from now. now becomes the last contact.
func (s *MemoryStore) endSilenceLocked(now time.Time) {
	if prev := s.lastContact; !prev.IsZero() {
		for h, l := range s.leases {
			if l.Deadline.After(prev) && silent(now, prev, l.TTL) && l.Deadline.Before(now.Add(l.TTL)) {
				l.Deadline = now.Add(l.TTL)
				s.leases[h] = l
			}
		}
	}
	if now.After(s.lastContact) {
		s.lastContact = now
	}
}

// Owned implements Store.
func (s *MemoryStore) Owned(ctx context.Context, host string, gen uint64, objs []Object) ([]bool, error) {
	if err := s.begin(ctx, "Owned"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]bool, len(objs))
	for i, obj := range objs {
		r, ok := s.rows[obj]
		out[i] = ok && r.State != Preserved && r.Host == host && r.LeaseGen == gen
	}
	return out, nil
}

// Lease implements Store.
func (s *MemoryStore) Lease(ctx context.Context, host string) (Lease, bool, error) {
	if err := s.begin(ctx, "Lease"); err != nil {
		return Lease{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[host]
	if ok {
		now := s.now()
		l.Remaining = l.Deadline.Sub(now)
		if l.Remaining <= 0 && l.liveAt(now, s.lastContact) {
			l.Remaining = l.TTL // kept by a silence (Store.Lease)
		}
		l.Lapsed = false
	}
	return l, ok, nil
}

// Expire ends host's lease now, as if the host stopped renewing it long
// ago: other hosts may take its objects over at once (tests and the
// in-process Network's Kill). It counts as the store hearing from a host:
// the expired lease is not kept by a silence that began before it.
func (s *MemoryStore) Expire(host string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.endSilenceLocked(now)
	if l, ok := s.leases[host]; ok {
		l.Deadline = now.Add(-time.Nanosecond)
		s.leases[host] = l
	}
}

// ObjectCount is how many objects of one kind one host owns, as a
// Location Store's rows record it.
type ObjectCount struct {
	Host    string
	Kind    string
	Objects int
}

// Counter is a Location Store that counts its rows by owner host and kind,
// for operators (it reads every row: not for a hot path). Rows being
// placed or moved (Reserved) count for the host they name; rows of
// deactivated objects (Preserved) count for none. A host that died keeps
// its count until its objects are taken over.
type Counter interface {
	// CountObjects returns the counts, sorted by host, then kind.
	CountObjects(ctx context.Context) ([]ObjectCount, error)
}

// CountObjects implements Counter.
func (s *MemoryStore) CountObjects(ctx context.Context) ([]ObjectCount, error) {
	if err := s.begin(ctx, "CountObjects"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	n := map[[2]string]int{}
	for obj, r := range s.rows {
		if r.State != Preserved && r.Host != "" {
			n[[2]string{r.Host, obj.Kind}]++
		}
	}
	s.mu.Unlock()
	out := make([]ObjectCount, 0, len(n))
	for k, c := range n {
		out = append(out, ObjectCount{Host: k[0], Kind: k[1], Objects: c})
	}
	slices.SortFunc(out, func(a, b ObjectCount) int {
		if c := strings.Compare(a.Host, b.Host); c != 0 {
			return c
		}
		return strings.Compare(a.Kind, b.Kind)
	})
	return out, nil
}
