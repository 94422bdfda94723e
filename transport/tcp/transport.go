package tcp

import (
	"cmp"
	"context"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/internal/ratelog"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/transport"
)

// The transport part (Transport, Attacher): a host's end of its links,
// its peers and what is asked of them.
//
// Owns: the Transport and Attacher types and their start (Listen, New,
// Attach, AttachRun); the peer map and the leaving flag (AddPeer,
// AddPeerRun, RemovePeer, Leave, Cut); the queries WaitRoom, Backlogged,
// Peers, Pending, Role and PeerRole. Listen starts the ticker (driver.go)
// and the accept loop (accept.go); AddPeerRun starts a peer's delivery
// goroutine (driver.go) and its writer (link.go). Its one clock read:
// Listen's default incarnation (time.Now).
// Lock: Attacher.mu, before any lock of a transport it started; then
// Transport.mu, then peer.mu (AddPeerRun, RemovePeer), then the peer's
// inbox lock (through flushLocked, and endWhenEmpty). No lock is held
// during a network read or write.
// May call: options.go (normalize), tls.go (identity, newTLSState),
// listenDeferred (rtt_*.go), the session (under peer.mu), the inbox,
// driver.go (flushLocked, poke, closeConnsLocked).
// Invariants: no peer is added, removed or told to leave once Close began;
// a new peer's session says hello before any input reaches it (peer.mu is
// taken before Transport.mu is released); a removed peer leaves the map,
// its connections close, its writer ends and its delivery goroutine ends
// once what is queued for the handler was taken.

// Attacher starts a Transport for each host that attaches (usually one per
// process), with the same Options. It is a transport.Attacher. Safe for
// concurrent use.
type Attacher struct {
	opts Options

	mu       sync.Mutex
	attached map[string]*Transport // live transports by host name; guarded by mu
}

var (
	_ transport.Attacher   = (*Attacher)(nil)
	_ transport.Directory  = (*Transport)(nil)
	_ transport.Transport  = (*Transport)(nil)
	_ transport.Backlogger = (*Transport)(nil)
)

// New returns an Attacher that starts transports with opts.
func New(opts Options) *Attacher {
	return &Attacher{opts: opts, attached: map[string]*Transport{}}
}

// Attach starts the transport of the host named name, listening at once,
// with h receiving what arrives for it (see Listen). It fails with
// payload.AlreadyExists if a live transport of that name was attached here.
func (a *Attacher) Attach(name string, h transport.Handler) (transport.Transport, error) {
	return a.AttachRun(name, 0, h)
}

// AttachRun implements transport.RunAttacher: Attach with run (the host's
// lease generation) as its incarnation on the wire (0: its start time).
func (a *Attacher) AttachRun(name string, run uint64, h transport.Handler) (transport.Transport, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t := a.attached[name]; t != nil && !t.isClosing() {
		return nil, payload.NewError(payload.AlreadyExists, "tcp.Attacher.Attach", "a transport named "+name+" is attached")
	}
	opts := a.opts
	opts.Run = run
	t, err := Listen(name, h, opts)
	if err != nil {
		return nil, err
	}
	a.attached[name] = t
	return t, nil
}

// Transport returns the transport attached as name, or nil: the caller
// that follows the membership tells it the peers (AddPeer, RemovePeer).
func (a *Attacher) Transport(name string) *Transport {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.attached[name]
}

// Transport is one host's end of the links to its peers over TCP; see the
// package doc. Safe for concurrent use.
type Transport struct {
	name string
	role transport.Role // this host's, as its certificate names it
	h    transport.Handler
	opts Options
	cfg  sessionConfig
	log  *slog.Logger

	ln     net.Listener
	addr   string
	tlsNow atomic.Pointer[tlsState] // nil without TLS; SetTLS swaps it

	mu         sync.RWMutex
	peers      map[string]*peer   // guarded by mu
	handshakes map[net.Conn]*slot // accepted, not yet attributed to a peer; guarded by mu
	accepted   uint64             // connections accepted so far (slot order); guarded by mu
	closing    bool               // Close began; guarded by mu
	shut       bool               // Close ends the links: no connection is taken; guarded by mu
	leaving    bool               // guarded by mu
	removed    sessionStats       // of removed peers; guarded by mu

	unknown   atomic.Uint64 // connections from members that are not peers (yet)
	refused   atomic.Uint64 // connections refused: handshake, certificate, preamble, too many
	malformed atomic.Uint64 // connections closed for a malformed or oversized frame
	logs      logs

	kick     chan struct{} // one slot: a closing session changed
	stop     chan struct{} // closed when the links end: writers and dialers stop
	stopTick chan struct{}
	dialCtx  context.Context
	dialStop context.CancelFunc
	wg       sync.WaitGroup // every goroutine of the transport
	done     chan struct{}  // closed when Close has finished
}

// logs are the transport's lines caused by other hosts' input, one rate
// limit each (internal/ratelog).
type logs struct {
	dial, refused, malformed, oversized ratelog.Limiter
}

// Listen starts the transport of the host named name, listening at
// opts.Listen, with h receiving what arrives. The host has no peers until
// AddPeer. Errors: payload.InvalidOperation (an empty or too long name,
// nil h, bad options), payload.Unavailable (the address cannot be
// listened on).
func Listen(name string, h transport.Handler, opts Options) (*Transport, error) {
	const op = "tcp.Listen"
	if name == "" || len(name) > maxName || h == nil {
		return nil, payload.NewError(payload.InvalidOperation, op, "empty or too long name, or nil handler")
	}
	opts, err := opts.normalize()
	if err != nil {
		return nil, err
	}
	role := transport.RoleNode
	if opts.TLS != nil {
		leaf := opts.TLS.Certificate.Leaf
		if leaf == nil {
			return nil, payload.NewError(payload.InvalidOperation, op, "the TLS certificate has no parsed leaf")
		}
		var named bool
		if role, named = identity(leaf, name); !named {
			return nil, payload.NewError(payload.InvalidOperation, op, "the TLS certificate does not name "+name+" (its DNS names: "+strings.Join(leaf.DNSNames, ", ")+"; its URIs: "+uriList(leaf.URIs)+")")
		}
	}
	ln, err := listenDeferred(opts.Listen)
	if err != nil {
		return nil, payload.NewError(payload.Unavailable, op, err.Error())
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	t := &Transport{
		name: name, h: h, opts: opts, log: logger,
		cfg: sessionConfig{
			local: name, inc: cmp.Or(opts.Run, uint64(time.Now().UnixNano())), ackEvery: uint64(opts.AckEvery),
			heartbeatTicks: ticks(opts.Heartbeat, opts.Tick), downTicks: ticks(opts.DownAfter, opts.Tick),
			resendTicks: noResend, highItems: opts.HighItems, highBytes: opts.HighBytes,
			maxItems: opts.MaxPendingItems, maxBytes: opts.MaxPendingBytes,
		},
		ln: ln, addr: ln.Addr().String(),
		peers: map[string]*peer{}, handshakes: map[net.Conn]*slot{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), stopTick: make(chan struct{}), done: make(chan struct{}),
	}
	t.role = role
	if opts.Advertise != "" {
		t.addr = opts.Advertise
	}
	if opts.TLS != nil {
		t.tlsNow.Store(newTLSState(opts.TLS))
	}
	t.dialCtx, t.dialStop = context.WithCancel(context.Background())
	t.wg.Add(2)
	go t.ticker()
	go t.acceptLoop()
	return t, nil
}

// Local returns this host's name.
func (t *Transport) Local() string { return t.name }

// Addr returns the address peers reach this host at: Options.Advertise,
// or the address the listener bound.
func (t *Transport) Addr() string { return t.addr }

func (t *Transport) isClosing() bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.closing
}

// AddPeer tells the transport that the host named name is a peer, reached
// at addr (its membership Address). The transport connects and says hello
// at once; the handler gets Event{Up} when the peer is first heard from.
// Adding a known peer with a new address changes where it is reached.
// Errors: payload.InvalidOperation (empty or too long name, empty
// address, or this host's name), transport.ErrClosed.
func (t *Transport) AddPeer(name, addr string) error { return t.AddPeerRun(name, addr, 0) }

// AddPeerRun implements transport.RunDirectory: AddPeer, and the peer's
// run as the membership reports it (0: not known). From then on only that
// incarnation's frames are taken (another is counted in Stats.Stale); a
// new run of the name ends the old run's session as a crash would
// (Stats.Restarts, Stats.Lost; the handler gets Gone, then Up when the new
// run is heard from). The new run's items dropped until then come again:
// the new run goes back over what it sent when it first hears from this
// host, which happens only now (this host's envelopes name the run they
// are meant for).
func (t *Transport) AddPeerRun(name, addr string, run uint64) error {
	const op = "tcp.Transport.AddPeer"
	if name == "" || len(name) > maxName || addr == "" || name == t.name {
		return payload.NewError(payload.InvalidOperation, op, "empty or too long name, empty address, or the host's own name")
	}
	t.mu.Lock()
	if t.closing {
		t.mu.Unlock()
		return transport.ErrClosed
	}
	if p := t.peers[name]; p != nil {
		p.mu.Lock()
		if p.addr != addr {
			p.addr = addr
			if p.out != nil {
				_ = p.out.Close() // the writer connects to the new address
			}
		}
		if p.s.learnRun(run, &p.o) {
			t.flushLocked(p) // Gone
		}
		p.mu.Unlock()
		t.mu.Unlock()
		return nil
	}
	p := &peer{name: name, q: newInbox(), wake: make(chan struct{}, 1), addr: addr, s: newSession(&t.cfg)}
	p.s.leaving = t.leaving
	p.s.learnRun(run, &p.o) // no session yet: nothing to end
	t.peers[name] = p
	t.wg.Add(2)
	go t.deliverLoop(p)
	go t.writeLoop(p)
	p.mu.Lock() // before t.mu is released: no input reaches the session before its hello
	t.mu.Unlock()
	p.s.hello(&p.o)
	t.flushLocked(p)
	p.mu.Unlock()
	return nil
}

// RemovePeer tells the transport that the host named name left the
// membership (it left, or its lease expired): what it had not taken is
// lost, its connections close, the handler gets Event{Gone} after what is
// queued from it, and sends to it fail with ErrUnknownPeer. Removing an
// unknown peer does nothing.
func (t *Transport) RemovePeer(name string) {
	t.mu.Lock()
	p := t.peers[name]
	if p == nil || t.closing {
		t.mu.Unlock()
		return
	}
	delete(t.peers, name)
	p.mu.Lock()
	p.s.remove(&p.o)
	t.removed.add(p.s.stats)
	t.mu.Unlock()
	t.flushLocked(p)
	p.removed = true
	p.closeConnsLocked()
	p.q.endWhenEmpty()
	p.mu.Unlock()
	p.poke()
}

func (t *Transport) peer(name string) (*peer, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.peers[name], t.closing
}

// WaitRoom waits until the link to the peer named to is under its high
// marks; see transport.Transport.WaitRoom.
func (t *Transport) WaitRoom(ctx context.Context, to string) error {
	p, closing := t.peer(to)
	if p == nil || closing {
		return nil
	}
	for {
		if !p.blocked.Load() {
			return nil
		}
		p.mu.Lock()
		if !p.s.blocked {
			p.mu.Unlock()
			return nil
		}
		if p.room == nil {
			p.room = make(chan struct{})
		}
		room := p.room
		p.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Backlogged reports whether the link to the peer named to is at its hard
// bound (Options.MaxPendingItems, MaxPendingBytes); see
// transport.Backlogger.
func (t *Transport) Backlogged(to string) bool {
	p, _ := t.peer(to)
	return p != nil && p.full.Load()
}

// Peers returns the names of the peers whose link is up, sorted.
func (t *Transport) Peers() []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.closing {
		return nil
	}
	var out []string
	for name, p := range t.peers {
		if linkState(p.state.Load()) == stUp {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Pending returns how many items wait: in, received from peers and not yet
// handed to the handler (or being handed); out, messages and moves sent to
// peers and not yet taken by their handlers — advice (Hint, Control) is
// left out, so that a peer that died with some unacknowledged does not
// hold up a stopping host until the membership reports it gone.
func (t *Transport) Pending() (in, out int) {
	for _, p := range t.peerList() {
		in += p.q.pending()
		p.mu.Lock()
		out += p.s.pendingMessages()
		p.mu.Unlock()
	}
	return in, out
}

func (t *Transport) peerList() []*peer {
	t.mu.RLock()
	defer t.mu.RUnlock()
	ps := make([]*peer, 0, len(t.peers))
	for _, p := range t.peers {
		ps = append(ps, p)
	}
	return ps
}

// Leave starts a graceful leave; see transport.Transport.Leave. Every
// envelope to a peer carries the leaving flag from now on; the first goes
// at once.
func (t *Transport) Leave() {
	t.mu.Lock()
	if t.closing || t.leaving {
		t.mu.Unlock()
		return
	}
	t.leaving = true
	t.mu.Unlock()
	for _, p := range t.peerList() {
		p.mu.Lock()
		p.s.leave(&p.o)
		t.flushLocked(p)
		p.mu.Unlock()
	}
}

// Role implements transport.Roles: the role this host's certificate
// names it as (RoleNode without TLS).
func (t *Transport) Role() transport.Role { return t.role }

// PeerRole implements transport.Roles: the role peer's certificate named
// on its latest connection, accepted or dialled (RoleNode without TLS, or
// before any).
func (t *Transport) PeerRole(peer string) transport.Role {
	t.mu.RLock()
	p := t.peers[peer]
	t.mu.RUnlock()
	if p == nil {
		return transport.RoleNode
	}
	return transport.Role(p.role.Load())
}

// Cut cuts (cut true) or restores the link between this host and its peer
// name, as a broken network would: its connections close, none is made or
// taken while the cut lasts, and the link is Down until the peer is heard
// from again after the cut ends; the session layer then sends again what
// was lost. It is fault injection, for tests and drills (cut both ends for
// a network partition); a peer it does not know is ignored.
func (t *Transport) Cut(name string, cut bool) {
	p, _ := t.peer(name)
	if p == nil {
		return
	}
	p.mu.Lock()
	p.cut.Store(cut)
	if cut {
		p.closeConnsLocked()
		p.s.connDown(&p.o)
		t.flushLocked(p)
	}
	p.mu.Unlock()
	p.poke()
}
