package actor

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"runtime"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/route"
	"github.com/berthrt/berth/transport"
)

// Defaults for Config fields left zero (docs/architecture.md, "Job queue, lanes and back-pressure", "Submit and completion").
const (
	DefaultMaxRequestsInFlight = 4096
	DefaultSendTimeout         = time.Second
	DefaultRequestTimeout      = 30 * time.Second
	DefaultThroughput          = 300
	DefaultStoreTimeout        = 5 * time.Second
)

// DefaultPeerInbound is the default of Config.PeerInbound: a window of
// half of it (16,384 messages, 32 MiB) keeps a peer's outside senders
// busy across a round trip, and the other half takes the sends that do
// not wait for credit (handlers', forwards).
var DefaultPeerInbound = mailbox.Limits{Items: 32768, Bytes: 64 << 20}

// DefaultMaxQueuedApplicationJobs returns the default number of host-wide
// job permits: GOMAXPROCS × 128.
func DefaultMaxQueuedApplicationJobs() int { return runtime.GOMAXPROCS(0) * 128 }

// CodecRegistration adds a codec to a host's registry: Select picks the
// declared types it sends (nil: receive only). Later registrations win.
type CodecRegistration struct {
	Codec  payload.Codec
	Select payload.Selector
}

// Config configures a Host. The zero value works: every zero field takes
// its default.
type Config struct {
	// Name identifies the host in reply routes and metrics; default
	// "host-" and 8 random hex digits.
	Name string
	// MaxQueuedApplicationJobs is the number of host-wide job permits:
	// queued application messages. Default GOMAXPROCS × 128; 1..2^31-1.
	MaxQueuedApplicationJobs int
	// MaxRequestsInFlight bounds requests waiting for replies; beyond it
	// Ask fails with CapacityExceeded. Default 4,096.
	MaxRequestsInFlight int
	// SendTimeout bounds the wait for room in a full owner lane; then the
	// send fails with DeadlineExceeded. Default 1 s.
	SendTimeout time.Duration
	// RequestTimeout bounds every Ask: its deadline is the sooner of
	// RequestTimeout from the call and its context's (and, from a
	// handler, the deadline of the message the handler runs). Default
	// 30 s.
	RequestTimeout time.Duration
	// IdleTimeout passivates an object that has had no message for this
	// long (its deactivate hook runs, and its next message activates it
	// again). Zero, the default, keeps objects active until the host stops.
	IdleTimeout time.Duration
	// ApplicationLimits and LifecycleLimits bound each owner's lanes;
	// defaults 1,024 items / 64 MiB and 128 items / 4 MiB.
	ApplicationLimits, LifecycleLimits mailbox.Limits
	// Throughput is how many turns a drain runs before yielding; default 300.
	Throughput int
	// InlineAsk lets an Ask from outside a handler run the request's turn
	// on the calling goroutine when the object is idle, instead of handing
	// it to a dispatcher goroutine: a fraction of the round-trip latency.
	// The price: such an Ask cannot return before its handler finishes. Its
	// result is still the terminal that came first — a deadline or
	// cancellation that passed while the handler ran wins over the reply —
	// but it is delivered when the handler ends. Off by default.
	InlineAsk bool
	// Codecs are registered after JSON (the default) and protobuf (for
	// proto.Message types), in order.
	Codecs []CodecRegistration
	// Observer receives the host's events (see package metrics). Nil: none.
	Observer Observer
	// MetricsAddr, if set and Observer is a MetricsServer (as
	// metrics.Metrics is), serves it at /metrics on this address while the
	// host runs.
	MetricsAddr string
	// OnPayloadRelease, if set, observes every final release of a payload
	// buffer of this host (tests and diagnostics).
	OnPayloadRelease func(payload.ReleaseEvent)
	// Logger receives the host's log records; default slog.Default().
	Logger *slog.Logger
	// TracerProvider, if set, traces the host's messages with
	// OpenTelemetry: each turn is a span (named "berth.turn" and the
	// kind's or channel's name; attributes AttrKind, AttrID,
	// AttrMessageType, AttrHost), a child of the span that sent its
	// message, whose W3C trace context travels in the message's header
	// metadata — across links, moves and forwards. A handler's Context
	// carries its turn's span. Nil, the default: no tracing, and no cost.
	TracerProvider trace.TracerProvider

	// Transport joins the host to other hosts: transport/inproc's Network
	// for hosts in one process, a network transport for hosts in other
	// processes. Hosts reach each other only through it and Membership.
	// Without one, the host stands alone with a private in-memory store.
	// With one, Store and Membership are required too.
	Transport transport.Attacher
	// Store is the Location Store the host shares with the other hosts of
	// its Transport (relocation.NewMemoryStore for hosts in one process).
	Store relocation.Store
	// Membership is how the host announces itself and learns the other
	// hosts, their states and kinds (membership.NewMemory for hosts in one
	// process).
	Membership membership.Membership
	// AppVersion is the application version the host runs, announced in
	// the membership (membership.Member.Version). While the hosts serving
	// a kind run several — a rolling upgrade — new objects are placed and
	// drains move objects onto hosts of the newest version only (a kind
	// placed PlaceLocal too), so that each object moves once per rollout;
	// and a move to a host of an older version than its source is
	// refused (its code may not read the newer state). Versions compare
	// part by part, numbers as numbers ("v1.10.0" is newer than
	// "v1.9.2"); "" is older than any other.
	AppVersion string
	// FollowDuration is how long a host forwards messages for an object
	// that moved away (Message Follow); default 30 s.
	FollowDuration time.Duration
	// RouteCacheTTL bounds how long a host remembers where another host's
	// object runs; default 15 s, and always shorter than FollowDuration.
	RouteCacheTTL time.Duration
	// CutoverWait is how long a move's target waits for the cutover after
	// relay-ready before it commits anyway; default 1 s.
	CutoverWait time.Duration
	// MaxMoveRecord is the largest move record (an object's captured
	// state, its queued messages and its order state) this host sends or
	// takes in a move: a larger move is refused at its source with
	// CapacityExceeded, and a peer's Prepare declaring more fails that
	// move before anything is kept for it. Default 1 GiB; at most 4 GiB.
	MaxMoveRecord int64
	// MaxIncomingMoveBytes bounds the bytes of move records this host
	// assembles at once (the records of moves to it not yet opened, by
	// their declared sizes): a Prepare that would pass it fails that move
	// at once, before anything is kept for it, and the source's Relocate
	// returns the reason. One source may take at most half of it, or
	// MaxMoveRecord if that is more (so that one move of the largest
	// record fits). Default 2 × MaxMoveRecord.
	MaxIncomingMoveBytes int64
	// GapTimeout is how long, after the membership reports a host gone
	// without handing its work on (its lease expired, or it left without
	// draining), an object still waits for the messages missing in its
	// gaps — the ones on live links arrive meanwhile — before it gives up
	// on them and runs what waited behind them (Stats.GapsClosed; what
	// arrives later runs late, Stats.Late). A gap that opens within
	// FollowDuration + GapTimeout after such a report counts as caused by
	// it too (the failed host's messages are missed only when the sender's
	// next one arrives, and routes to it live that long).
	// No timer closes a gap while every host is up: a message ahead of
	// an older one waits as long as the older one's move or follow path
	// takes (Stats.OldestGap shows the longest wait). Default 5 s.
	GapTimeout time.Duration
	// TakeoverGapTimeout replaces GapTimeout as the wait of the gaps of
	// an object this host took over from a crashed owner (its row named a
	// host whose lease ran out), open or opening within FollowDuration +
	// GapTimeout of the takeover — and, whenever it opens, of the gap
	// before a sending host's first message to it: the messages that died
	// with that host will never come, and those still on their way over
	// live links arrive within milliseconds. Each sending host's first
	// message to a taken-over object waits this long. Default 250 ms; at
	// most GapTimeout.
	TakeoverGapTimeout time.Duration
	// ReorderBound is how many messages an object holds for one sender
	// ahead of an older one it waits for, before it pushes back on that
	// sender: the sender's sends from outside the handlers to the object
	// wait (up to SendTimeout, then ErrPushedBack) until the older
	// message has arrived. Nothing is released out of order or dropped
	// because of the bound (Stats.OverBound, Stats.PressureWaits).
	// Default 10,000.
	ReorderBound int
	// PeerInbound bounds what this host keeps of one peer's messages
	// after its transport handed them over: those waiting for a job
	// permit behind the peer's earlier ones, or on the peer's slow lane
	// for a look-up or for room on the link they are forwarded on. The
	// peer's sends from outside the handlers wait for this host's credit
	// while what they sent and this host has not let go of fills half of
	// it (up to SendTimeout, then ErrSendTimeout: nothing was sent); past
	// all of it, a message from the peer is refused — an Ask gets
	// ErrPeerBacklog, a one-way message leaves a skip notice, and the
	// refusal is counted (Stats.PeerRefused). One message always fits,
	// whatever its size. Defaults 32,768 messages / 64 MiB.
	PeerInbound mailbox.Limits
	// StateStore keeps the durable state of persistent kinds
	// (Kind.PersistState). Default: Store, if it is a
	// relocation.StateStore (relocation.MemoryStore and pgstore.Store
	// are), the private in-memory store of a host without a Transport.
	// It must live beside Store: its writes are fenced by Store's rows.
	StateStore relocation.StateStore
	// StoreTimeout bounds each Location Store call; default 5 s. A lease
	// renewal may take longer — up to three spacings of its lease (its
	// length less its margin) — since on a slow store it is worth its
	// landing there, however late it is answered.
	StoreTimeout time.Duration
	// LeaseTTL is the length of the host's lease in the Location Store
	// (relocation.Store.RenewLease), and so how soon after a crash its
	// objects answer elsewhere: between LeaseTTL − LeaseRenew and
	// LeaseTTL, plus the takeovers. A host that cannot renew for about
	// LeaseTTL − LeaseRenew − 1 s (a stalled store, a starved process) goes
	// into jeopardy: its objects pause, keeping their state and what
	// arrives for them, until the store answers; it is not a crash
	// (docs/operations.md, "Jeopardy"). Longer leases pause less often and
	// fail over more slowly. Default relocation.LeaseTTL (3.5 s). Give the
	// membership the same TTL (membership.Options.TTL,
	// pgstore.MembershipOptions.TTL): Start refuses a membership whose
	// lease is shorter (InvalidOperation), which would end the host's run
	// after the shorter stall all the same.
	LeaseTTL time.Duration
	// LeaseRenew is how often the host renews its lease; default
	// relocation.LeaseRenew (500 ms). It must be under LeaseTTL/2: a store
	// that hears no renewal for half a lease takes itself for away
	// (relocation.Store, "Silences").
	LeaseRenew time.Duration
	// Gateway makes the host a client of the cluster: it sends to objects
	// of the kinds it registers (it needs them for their message types)
	// but never hosts one. Its membership entry offers no kinds, so no
	// host places objects on it, and it places each new object on a host
	// that serves the kind — by the kind's placement, PlaceHashed for
	// PlaceLocal; with none serving it, the send fails with Unavailable.
	// It needs a Transport. Like any host, it never closes itself for a
	// lease: when the membership ends its run (it was paused past its
	// lease), it joins again as a new run and serves on (Stats.Rejoins;
	// what its old run's links held goes again, what cannot is lost with
	// it, and the Asks it had handed on end with ErrRejoined).
	Gateway bool
	// StopDeactivates makes Stop deactivate the host's objects (their
	// deactivate hooks run; they activate afresh on their next message)
	// even when other hosts of the network could take them. By default Stop
	// moves objects of kinds that relocate to those hosts first (Drain).
	StopDeactivates bool

	// clock, set by this package's tests only, is the host's clock (nil:
	// the process's). It drives the host's services (the tick, the
	// janitor, the lease's and the membership's schedules) and every
	// time the host's rules compare (hostEnv.nanotime): idle objects,
	// gaps and failure facts, routes and streams, moves' machines. The
	// lease's deadline, renewals in flight and requests' deadlines keep
	// the process's clock.
	clock clock
}

// withDefaults validates c and fills in defaults. Errors name the field.
func (c Config) withDefaults() (Config, error) {
	var errs []error
	bad := func(field, why string) {
		errs = append(errs, payload.NewError(payload.InvalidOperation, "actor.NewHost", "Config."+field+": "+why))
	}
	if c.Name == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.Name = "host-" + hex.EncodeToString(b[:])
	}
	if len(c.Name) > 255 {
		bad("Name", "longer than 255 bytes")
	}
	orDefault(&c.MaxQueuedApplicationJobs, DefaultMaxQueuedApplicationJobs(), "MaxQueuedApplicationJobs", bad)
	orDefault(&c.MaxRequestsInFlight, DefaultMaxRequestsInFlight, "MaxRequestsInFlight", bad)
	orDefault(&c.SendTimeout, DefaultSendTimeout, "SendTimeout", bad)
	orDefault(&c.RequestTimeout, DefaultRequestTimeout, "RequestTimeout", bad)
	if c.IdleTimeout < 0 {
		bad("IdleTimeout", "negative")
	}
	orDefault(&c.Throughput, DefaultThroughput, "Throughput", bad)
	if c.ApplicationLimits == (mailbox.Limits{}) {
		c.ApplicationLimits = mailbox.DefaultApplicationLimits
	}
	if c.LifecycleLimits == (mailbox.Limits{}) {
		c.LifecycleLimits = mailbox.DefaultLifecycleLimits
	}
	switch {
	case c.PeerInbound == (mailbox.Limits{}):
		c.PeerInbound = DefaultPeerInbound
	case c.PeerInbound.Items < 1 || c.PeerInbound.Bytes < 1:
		bad("PeerInbound", "Items and Bytes must both be positive")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.FollowDuration == 0 {
		c.FollowDuration = DefaultFollowDuration
	}
	if c.RouteCacheTTL == 0 {
		c.RouteCacheTTL = DefaultRouteCacheTTL
	}
	if c.RouteCacheTTL >= c.FollowDuration {
		bad("RouteCacheTTL", "must be shorter than FollowDuration")
	}
	switch {
	case c.MaxMoveRecord == 0:
		c.MaxMoveRecord = relocation.DefaultMaxRecord
	case c.MaxMoveRecord < 0:
		bad("MaxMoveRecord", "negative")
	case c.MaxMoveRecord > relocation.MaxMoveRecord:
		bad("MaxMoveRecord", "more than a move carries (4 GiB)")
	}
	switch {
	case c.MaxIncomingMoveBytes == 0:
		c.MaxIncomingMoveBytes = 2 * c.MaxMoveRecord
	case c.MaxIncomingMoveBytes < 0:
		bad("MaxIncomingMoveBytes", "negative")
	}
	if c.CutoverWait < 0 {
		bad("CutoverWait", "negative")
	}
	orDefault(&c.GapTimeout, DefaultGapTimeout, "GapTimeout", bad)
	orDefault(&c.ReorderBound, route.DefaultMaxHeld, "ReorderBound", bad)
	orDefault(&c.TakeoverGapTimeout, min(DefaultTakeoverGapTimeout, c.GapTimeout), "TakeoverGapTimeout", bad)
	if c.TakeoverGapTimeout > c.GapTimeout {
		bad("TakeoverGapTimeout", "must be at most GapTimeout")
	}
	orDefault(&c.StoreTimeout, DefaultStoreTimeout, "StoreTimeout", bad)
	orDefault(&c.LeaseTTL, relocation.LeaseTTL, "LeaseTTL", bad)
	orDefault(&c.LeaseRenew, relocation.LeaseRenew, "LeaseRenew", bad)
	if c.LeaseRenew >= c.LeaseTTL/2 && c.LeaseTTL > 0 {
		bad("LeaseRenew", "must be under half of LeaseTTL ("+(c.LeaseTTL/2).String()+")")
	}
	switch {
	case c.Transport != nil && (c.Store == nil || c.Membership == nil):
		bad("Transport", "needs Store and Membership too (the hosts of a transport share them)")
	case c.Gateway && c.Transport == nil:
		bad("Gateway", "needs a Transport (a gateway sends to objects on other hosts)")
	case c.Transport == nil && c.Membership != nil:
		bad("Membership", "needs a Transport (a host without one stands alone)")
	}
	return c, errors.Join(errs...)
}

// orDefault gives a zero *v the default def; a negative one is a mistake
// reported through bad, naming field.
func orDefault[T int | time.Duration](v *T, def T, field string, bad func(field, why string)) {
	switch {
	case *v == 0:
		*v = def
	case *v < 0:
		bad(field, "negative")
	}
}

// Defaults for routing.
const (
	DefaultFollowDuration = 30 * time.Second
	DefaultRouteCacheTTL  = 15 * time.Second
	// MaxHops is Message Follow's loop guard: a message forwarded this
	// often goes back to its origin to be routed afresh.
	MaxHops = route.MaxHops
)

// DefaultGapTimeout is how long, after the membership reports a host gone,
// an owner still waits for the messages missing in its gaps (they may be
// on live links) before it gives up on them (Config.GapTimeout). No gap
// closes while every host is up.
const DefaultGapTimeout = 5 * time.Second

// DefaultTakeoverGapTimeout is the wait of the gaps of an object taken
// over from a crashed owner, open or opening soon after its activation
// (Config.TakeoverGapTimeout): their messages died with that owner.
const DefaultTakeoverGapTimeout = 250 * time.Millisecond
