// Package membership says who the hosts are: each member's name, address,
// state (serving, draining, gone), the kinds it serves, and the lease that
// keeps it in the list (docs/architecture.md, "Packages", "Relocation"). Hosts learn their peers only from a
// Membership; two hosts never ask each other who else exists.
//
// Membership is the contract; Memory is its in-memory implementation (the
// embedded default) and a Postgres one lives in pgstore. Both pass the one
// conformance suite in membershiptest.
//
// # Leases and generations
//
// A member joins with a lease generation, one per process run of the host
// (the same LeaseGeneration the Location Store knows). The generation is the
// lease's identity: Renew, SetState and Leave name it, and a call that names
// any other generation is refused with a *GenerationError, so an old run
// can neither renew nor remove a newer one. The store judges expiry by its
// own clock alone. The host judges its own lease by its own clock alone,
// with a LocalLease dated from the local time it sent the renewal (see
// LocalLease for the rule and why).
//
// # Silences
//
// A lease that runs out because its host stopped renewing ends its run; a
// lease that runs out because the membership's store was away — restarted,
// failed over, cut off from every host — must not. A membership that
// handled no Join (successful or not) or Renew for longer than half a TTL
// (by its own clock) was silent: it expires nothing until the next Join
// or Renew, which first gives every lease live when the silence began a
// full TTL from then. Where leases differ in length (each process's
// membership grants its own TTL, as pgstore's do), each lease is judged
// by its own length, whichever process judges it. (A crashed lone host's run so lasts one more TTL
// after its replacement first asks to join.) Hosts renew every
// fraction of a TTL (DefaultRenew), so a silence alone never ends a live
// host's run; a run whose host had stopped renewing before the silence
// may get one more TTL. membershiptest checks it
// (ASilenceOfTheStoreExpiresNothing).
//
// # Invariants
//
//   - A name is held by at most one live member at a time. A live member is
//     one whose lease has not expired by the store's clock and that has not
//     left.
//   - Generations of a name only grow. Once a run has joined, its
//     generation and every lower one are refused for that name for good,
//     also after the run expired or left; a restarted host joins with a new,
//     higher generation once the old lease has expired or the old run left.
//   - State moves forward only, one step at a time: Serving → Draining →
//     Gone. Members lists live members that are not Gone.
//   - Every change (join, state change, leave, expiry) is one Event in one
//     total order, with a Rev that grows by change. Every watcher sees the
//     events in that order. A watcher that falls behind never slows the
//     membership down: its backlog is replaced by one Sync event carrying
//     the whole list (see Watch).
//   - A call whose context is already done returns ctx.Err() and changes
//     nothing. A call cancelled while in flight may or may not have taken
//     effect; every call may be retried with the same arguments (joining
//     again with the live generation renews it, SetState to the current
//     state and Leave of a run that is already out succeed and change
//     nothing).
package membership

import (
	"context"
	"strconv"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
)

// Lease timing: the Location Store's host leases (docs/architecture.md, "Relocation"), one
// definition for both.
const (
	// DefaultTTL is how long a lease lasts after a join or a renewal, by
	// the store's clock.
	DefaultTTL = relocation.LeaseTTL
	// DefaultRenew is how often a host renews its lease.
	DefaultRenew = relocation.LeaseRenew
	// DefaultMargin is how much earlier than send time + TTL a host stops
	// trusting its lease (LocalLease.Margin). It absorbs the two clocks
	// running at slightly different rates and a turn that starts just before
	// the deadline.
	DefaultMargin = 1 * time.Second
)

// State is a member's state. The zero State is not a state; Join reads it
// as Serving.
type State uint8

// Member states, in the only order a member goes through them.
const (
	// Serving: the host takes new objects and messages.
	Serving State = iota + 1
	// Draining: the host is moving its objects away; peers place no new
	// objects on it but still route to the objects it has.
	Draining
	// Gone: the host has no objects left and is about to stop. A Gone
	// member is no longer listed; it keeps its name until it leaves or its
	// lease expires.
	Gone
)

// String returns the state's name: "serving", "draining", "gone", or
// "state(n)" for a value that is not a state.
func (s State) String() string {
	switch s {
	case Serving:
		return "serving"
	case Draining:
		return "draining"
	case Gone:
		return "gone"
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// Valid reports whether s is one of Serving, Draining and Gone.
func (s State) Valid() bool { return s >= Serving && s <= Gone }

// CanBecome reports whether a member in state s may move to state to:
// Serving → Draining and Draining → Gone. Staying in the same state is not a
// transition (SetState accepts it as a no-op).
func (s State) CanBecome(to State) bool {
	return (s == Serving && to == Draining) || (s == Draining && to == Gone)
}

// Member is one host as the membership knows it. Values returned by a
// Membership are copies; the caller may keep and change them.
type Member struct {
	// Name identifies the host; at most one live member has it.
	Name string
	// Address is where peers reach the host over the transport (empty for
	// hosts that need none, such as in-process ones).
	Address string
	// State is Serving, Draining or Gone.
	State State
	// Kinds are the object kinds the host serves.
	Kinds []string
	// LeaseGen is the generation of the host's lease: one per process run.
	LeaseGen uint64
	// MaxMessage is the largest message, in bytes of its frame, the host
	// admits (0: not stated). A peer refuses a larger one to its sender at
	// once rather than send it to be dropped.
	MaxMessage int64
	// Version is the application version the host runs ("" : not
	// stated). While a cluster runs several, hosts place new objects and
	// drain onto those of the newest (actor.Config.AppVersion).
	Version string
}

// clone returns m with its own copy of Kinds.
func (m Member) clone() Member {
	if m.Kinds != nil {
		m.Kinds = append([]string(nil), m.Kinds...)
	}
	return m
}

// Lease is a lease as the membership granted it: whose it is and for how
// long, counted by the store from when it handled the call. It carries no
// time of day on purpose: the store's clock is not the host's, so the host
// dates its lease from its own send time (LocalLease.Renewed).
type Lease struct {
	Name string
	Gen  uint64
	TTL  time.Duration
}

// EventType says what an Event reports.
type EventType uint8

// Event types.
const (
	// Sync carries the whole list (Event.Members). It is the first event of
	// every watch, and it replaces a backlog the watcher was too slow to
	// take (Event.Dropped > 0). A watcher that mirrors the list replaces
	// its copy with Members.
	Sync EventType = iota + 1
	// Joined: Event.Member joined (Serving).
	Joined
	// StateChanged: Event.Member moved from Event.From to Event.Member.State.
	StateChanged
	// Left: Event.Member left (Leave).
	Left
	// Expired: Event.Member's lease expired by the store's clock.
	Expired
)

// String returns the type's name, such as "joined".
func (t EventType) String() string {
	switch t {
	case Sync:
		return "sync"
	case Joined:
		return "joined"
	case StateChanged:
		return "state changed"
	case Left:
		return "left"
	case Expired:
		return "expired"
	}
	return "event(" + strconv.Itoa(int(t)) + ")"
}

// Event is one change of the membership, or a Sync. A watcher that mirrors
// the list applies it so: Sync replaces the list with Members; Joined adds
// Member; StateChanged replaces Member, or removes it when its new state is
// Gone; Left and Expired remove Member.
type Event struct {
	Type EventType
	// Rev is the membership's revision after the change; it grows with
	// every change. A Sync's Rev is the revision its Members reflect;
	// every event after it has a higher Rev.
	Rev uint64
	// Member is the member after the change (Left, Expired: as it was
	// last). Unset for Sync.
	Member Member
	// From is the state before a StateChanged.
	From State
	// Members is every listed member (as Membership.Members returns them),
	// for Sync only.
	Members []Member
	// Dropped is, for a Sync, how many events the watcher did not receive
	// because it fell behind; the Sync stands for them. Zero for the first
	// Sync of a watch unless the watcher fell behind before reading it.
	Dropped int
}

// Membership is the registry of hosts. Implementations are safe for
// concurrent use.
type Membership interface {
	// Join registers m (State zero or Serving) with the lease generation
	// m.LeaseGen, which must be higher than any generation the name had
	// before, and returns the lease as granted. Joining again with the
	// generation of the name's live member, with the same address and
	// kinds, renews that lease and changes nothing else (a retried Join).
	//
	// Errors: ErrInvalidMember (empty name, zero generation, other
	// state); ErrNameTaken (another run of the name is live); a
	// *GenerationError (m.LeaseGen is not higher than the name's latest
	// generation); ErrClosed; ctx.Err().
	Join(ctx context.Context, m Member) (Lease, error)
	// Renew extends the lease of the named member's run gen by the TTL,
	// counted from when the store handles the call.
	//
	// Errors: ErrNotMember (no such name, or that run left); a
	// *GenerationError (gen is not the name's current generation);
	// ErrLeaseExpired (the run's lease has expired: join again with a new
	// generation); ErrClosed; ctx.Err().
	Renew(ctx context.Context, name string, gen uint64) (Lease, error)
	// SetState moves the named member's run gen to state to and returns the
	// member as it is now. Setting the current state changes nothing.
	//
	// Errors: ErrIllegalTransition (to is not the next state); and those
	// of Renew.
	SetState(ctx context.Context, name string, gen uint64, to State) (Member, error)
	// Leave removes the named member's run gen from the membership. Its
	// name is free at once for a higher generation. Leaving again, or
	// leaving after the lease expired, succeeds and changes nothing.
	//
	// Errors: ErrNotMember (the name never joined); a *GenerationError
	// (gen is not the name's current generation: a newer run is never
	// removed); ErrClosed; ctx.Err().
	Leave(ctx context.Context, name string, gen uint64) error
	// Members returns the live members that are not Gone, by name.
	//
	// Errors: ErrClosed; ctx.Err().
	Members(ctx context.Context) ([]Member, error)
	// Watch subscribes to changes until ctx is done. The channel first
	// carries a Sync with the current list, then every change after it, in
	// the membership's order (leases found expired together are reported
	// by deadline, then name). It is closed when ctx is done or the
	// membership is closed; events not yet received then are discarded.
	//
	// Writers never wait for a watcher. Each watcher has a bounded backlog;
	// when a change finds it full, the backlog is discarded and replaced by
	// one Sync with the list as it is after that change and Dropped set to
	// the number of events discarded, followed by later changes as usual.
	// A watcher therefore always either sees every change in order or is
	// told, by a Sync, that it missed some, and is given the list to start
	// again from.
	//
	// Errors: ErrClosed; ctx.Err().
	Watch(ctx context.Context) (<-chan Event, error)
}

// Errors. Each has a payload kind for errors.Is; the calls that return
// each are named.
var (
	// ErrInvalidMember: Join with an empty name, a zero generation, or a
	// state other than Serving. Kind InvalidOperation.
	ErrInvalidMember = payload.NewError(payload.InvalidOperation, "membership", "invalid member")
	// ErrNameTaken: Join found a live member of the same name with another
	// generation (or, with the same generation, another address or kinds).
	// Kind AlreadyExists.
	ErrNameTaken = payload.NewError(payload.AlreadyExists, "membership", "name held by a live member")
	// ErrStaleGeneration: Join, Renew, SetState and Leave, inside a
	// *GenerationError: the generation is not the name's current one. Kind
	// Rejected.
	ErrStaleGeneration = payload.NewError(payload.Rejected, "membership", "generation not current")
	// ErrLeaseExpired: Renew and SetState: the run's lease expired by the
	// store's clock; the host joins again with a new generation. Kind
	// Unavailable.
	ErrLeaseExpired = payload.NewError(payload.Unavailable, "membership", "lease expired")
	// ErrNotMember: Renew, SetState and Leave: no member of that name, or
	// (Renew, SetState) its run left. Kind NotFound.
	ErrNotMember = payload.NewError(payload.NotFound, "membership", "no such member")
	// ErrIllegalTransition: SetState to a state that is not the next one
	// (see State.CanBecome). Kind InvalidOperation.
	ErrIllegalTransition = payload.NewError(payload.InvalidOperation, "membership", "illegal state transition")
	// ErrClosed: every call on a Memory after Close. Kind ShuttingDown.
	ErrClosed = payload.NewError(payload.ShuttingDown, "membership", "membership closed")
)

// GenerationError reports a call that named a generation other than the
// name's current one. errors.Is(err, ErrStaleGeneration) and
// errors.Is(err, payload.Rejected) hold.
type GenerationError struct {
	Op      string // the call, such as "Renew"
	Name    string // the member's name
	Gen     uint64 // the generation the call named
	Current uint64 // the name's current (highest) generation
}

// Error describes the refusal.
func (e *GenerationError) Error() string {
	return "membership." + e.Op + ": rejected: " + e.Name + " generation " +
		strconv.FormatUint(e.Gen, 10) + " is not current (current " + strconv.FormatUint(e.Current, 10) + ")"
}

// Unwrap returns ErrStaleGeneration.
func (e *GenerationError) Unwrap() error { return ErrStaleGeneration }
