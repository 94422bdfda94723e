package remote

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/transport"
)

//go:generate protoc --go_out=. --go_opt=paths=source_relative envelope.proto

// processName is the name under which each host's inbound process is
// registered with its actor system: peers send to it.
const processName = "berth"

// Defaults of Options.
const (
	DefaultListen          = "127.0.0.1:0"
	DefaultTick            = 20 * time.Millisecond
	DefaultHeartbeat       = 100 * time.Millisecond
	DefaultDownAfter       = 1500 * time.Millisecond
	DefaultResendAfter     = 500 * time.Millisecond
	DefaultAckEvery        = 64
	DefaultHighItems       = 8192
	DefaultHighBytes       = 8 << 20
	DefaultCloseTimeout    = 10 * time.Second
	DefaultWriterQueueSize = 1024
)

// crashWait bounds how long a Close without grace waits for its peers to
// answer the crash notice.
const crashWait = time.Second

// Options configures the transports an Attacher starts. The zero value is
// the default: listen on 127.0.0.1 on a free port, protoactor's logs
// discarded, the timings and marks of the Default constants.
type Options struct {
	// Listen is the host:port the host's gRPC server listens on (port 0:
	// a free port). Default DefaultListen.
	Listen string
	// Advertise is the address peers dial to reach this host (what
	// Transport.Addr returns and what the host publishes as its
	// membership Address). Default: the address the listener bound.
	Advertise string
	// Logger receives protoactor's logs (it logs a broken connection at
	// error level). Nil discards them.
	Logger *slog.Logger
	// Tick is the session layer's clock: acks that changed go out, and
	// heartbeats, resends and silence are counted, once per tick.
	Tick time.Duration
	// Heartbeat: a host that sent a peer nothing for this long sends a
	// hello.
	Heartbeat time.Duration
	// DownAfter: a peer not heard from for this long is Down (a broken
	// connection makes it Down at once).
	DownAfter time.Duration
	// ResendAfter: items the peer has not acknowledged for this long go
	// again.
	ResendAfter time.Duration
	// AckEvery: after this many items received (or taken by the handler)
	// since the last acknowledgement, one goes out without waiting for a
	// tick.
	AckEvery int
	// HighItems and HighBytes are the high marks of a link: WaitRoom
	// blocks while more items, or more bytes, than these are sent and
	// not yet taken by the peer's handler, until both are at half.
	HighItems, HighBytes int
	// CloseTimeout bounds how long a graceful Close waits for its peers
	// to receive what it sent.
	CloseTimeout time.Duration
	// WriterQueueSize is protoactor's initial endpoint writer queue, per
	// peer (remote.WithEndpointWriterQueueSize; it grows as needed).
	// protoactor's default, 1,000,000, preallocates about 16 MB per peer.
	WriterQueueSize int
}

// normalize returns o with defaults, or an error naming a bad field.
func (o Options) normalize() (Options, error) {
	bad := func(field string) (Options, error) {
		return o, payload.NewError(payload.InvalidOperation, "remote.Options", "Options."+field+" is negative")
	}
	durs := []struct {
		name string
		d    *time.Duration
		def  time.Duration
	}{{"Tick", &o.Tick, DefaultTick}, {"Heartbeat", &o.Heartbeat, DefaultHeartbeat}, {"DownAfter", &o.DownAfter, DefaultDownAfter},
		{"ResendAfter", &o.ResendAfter, DefaultResendAfter}, {"CloseTimeout", &o.CloseTimeout, DefaultCloseTimeout}}
	for _, d := range durs {
		if *d.d < 0 {
			return bad(d.name)
		}
		if *d.d == 0 {
			*d.d = d.def
		}
	}
	ints := []struct {
		name string
		n    *int
		def  int
	}{{"AckEvery", &o.AckEvery, DefaultAckEvery}, {"HighItems", &o.HighItems, DefaultHighItems},
		{"HighBytes", &o.HighBytes, DefaultHighBytes}, {"WriterQueueSize", &o.WriterQueueSize, DefaultWriterQueueSize}}
	for _, n := range ints {
		if *n.n < 0 {
			return bad(n.name)
		}
		if *n.n == 0 {
			*n.n = n.def
		}
	}
	if o.Listen == "" {
		o.Listen = DefaultListen
	}
	return o, nil
}

// ticks converts d to ticks of tick, at least 1.
func ticks(d, tick time.Duration) int64 { return max(int64((d+tick-1)/tick), 1) }

// Attacher starts a Transport for each host that attaches (usually one per
// process), with the same Options. It is a transport.Attacher. Safe for
// concurrent use.
type Attacher struct {
	opts Options

	mu       sync.Mutex
	attached map[string]*Transport // live transports by host name; guarded by mu
}

var (
	_ transport.Attacher  = (*Attacher)(nil)
	_ transport.Directory = (*Transport)(nil)
)

// New returns an Attacher that starts transports with opts.
func New(opts Options) *Attacher {
	return &Attacher{opts: opts, attached: map[string]*Transport{}}
}

// Attach starts the transport of the host named name, listening at once,
// with h receiving what arrives for it (see Listen). It fails with
// payload.AlreadyExists if a live transport of that name was attached here.
func (a *Attacher) Attach(name string, h transport.Handler) (transport.Transport, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t := a.attached[name]; t != nil && !t.isClosing() {
		return nil, payload.NewError(payload.AlreadyExists, "remote.Attacher.Attach", "a transport named "+name+" is attached")
	}
	t, err := Listen(name, h, a.opts)
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

// Transport is one host's end of the links to its peers over protoactor
// remote; see the package doc. Safe for concurrent use.
type Transport struct {
	name string
	h    transport.Handler
	opts Options
	cfg  sessionConfig

	system *actor.ActorSystem
	rem    *remote.Remote
	self   *actor.PID
	addr   string
	sub    *eventstream.Subscription

	mu      sync.RWMutex
	peers   map[string]*peer // guarded by mu
	byAddr  map[string]*peer // guarded by mu
	closing bool             // guarded by mu
	leaving bool             // guarded by mu
	removed sessionStats     // of removed peers; guarded by mu

	wireMu sync.RWMutex
	shut   bool // no more protoactor sends; guarded by wireMu

	unknown  atomic.Uint64 // envelopes from hosts that are not peers
	kick     chan struct{} // one slot: a closing session changed
	stopTick chan struct{}
	wg       sync.WaitGroup // the ticker and the delivery goroutines
	done     chan struct{}  // closed when Close has finished
}

var _ transport.Transport = (*Transport)(nil)

// peer is one peer: its session, its delivery queue and its wire address.
type peer struct {
	name string
	q    *inbox

	blocked atomic.Bool   // the session is over its high mark (WaitRoom's fast path)
	state   atomic.Uint32 // the session's linkState, for Peers
	cut     atomic.Bool   // a test fault: envelopes to and from the peer are lost

	mu   sync.Mutex
	addr string        // guarded by mu
	pid  *actor.PID    // guarded by mu
	s    *session      // guarded by mu
	o    output        // scratch for the session's outputs; guarded by mu
	room chan struct{} // closed when the session is no longer blocked; guarded by mu
}

// Listen starts the transport of the host named name: an actor system of
// its own with protoactor remote listening at opts.Listen, with h
// receiving what arrives. The host has no peers until AddPeer. Errors:
// payload.InvalidOperation (empty name, nil h, a bad option),
// payload.Unavailable (the address cannot be listened on).
func Listen(name string, h transport.Handler, opts Options) (*Transport, error) {
	const op = "remote.Listen"
	if name == "" || h == nil {
		return nil, payload.NewError(payload.InvalidOperation, op, "empty name or nil handler")
	}
	opts, err := opts.normalize()
	if err != nil {
		return nil, err
	}
	host, portStr, err := net.SplitHostPort(opts.Listen)
	port, perr := strconv.Atoi(portStr)
	if err != nil || perr != nil {
		return nil, payload.NewError(payload.InvalidOperation, op, "Options.Listen is not host:port: "+opts.Listen)
	}
	t := &Transport{
		name: name, h: h, opts: opts,
		cfg: sessionConfig{
			local: name, inc: uint64(time.Now().UnixNano()), ackEvery: uint64(opts.AckEvery),
			heartbeatTicks: ticks(opts.Heartbeat, opts.Tick), downTicks: ticks(opts.DownAfter, opts.Tick),
			resendTicks: ticks(opts.ResendAfter, opts.Tick), highItems: opts.HighItems, highBytes: opts.HighBytes,
		},
		peers: map[string]*peer{}, byAddr: map[string]*peer{},
		kick: make(chan struct{}, 1), stopTick: make(chan struct{}), done: make(chan struct{}),
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	t.system = actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return logger }),
		actor.WithMetricProviders(nil),
		actor.WithDeadLetterThrottleInterval(10*time.Millisecond))
	rcfg := remote.Configure(host, port,
		remote.WithEndpointWriterQueueSize(opts.WriterQueueSize),
		remote.WithEndpointManagerQueueSize(opts.WriterQueueSize))
	if opts.Advertise != "" {
		rcfg.AdvertisedHost = opts.Advertise
	}
	rcfg.MaxRetryCount = 1 // a writer that cannot connect gives up after one try; the session retries
	t.rem = remote.NewRemote(t.system, rcfg)
	if err := startRemote(t.rem); err != nil {
		return nil, payload.NewError(payload.Unavailable, op, err.Error())
	}
	t.addr = t.system.Address()
	pid, ok := t.system.ProcessRegistry.Add(inbound{t}, processName)
	if !ok {
		t.rem.Shutdown(false)
		return nil, payload.NewError(payload.InternalFailure, op, "the inbound process name is taken")
	}
	t.self = pid
	t.sub = t.system.EventStream.Subscribe(t.onEvent)
	t.wg.Add(1)
	go t.ticker()
	return t, nil
}

// startRemote starts r, turning its panic (it panics when it cannot
// listen) into an error.
func startRemote(r *remote.Remote) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	r.Start()
	return nil
}

// shutdownRemote stops protoactor's remote r of actor system sys without
// its graceful Shutdown, which races with its own endpoints (two ways seen
// here, both ending the process or the caller: endpointManager.stop sends
// on a reader's channel that the reader, just ended, has closed; and it
// sets its connection map to nil while a writer whose stream just died is
// still removing itself from it). Our session layer has already made sure
// that every reachable peer received everything, so nothing is lost by
// stopping instead: first the endpoint writers and watchers (their
// supervisor) and the activator, while the endpoint manager's state is
// whole, then the gRPC server at once.
func shutdownRemote(sys *actor.ActorSystem, r *remote.Remote) {
	for _, name := range []string{"EndpointSupervisor", "activator"} {
		_ = sys.Root.StopFuture(actor.NewPID(sys.Address(), name)).Wait()
	}
	r.Shutdown(false)
}

// Local returns this host's name.
func (t *Transport) Local() string { return t.name }

// Addr returns the address peers reach this host at: Options.Advertise,
// or the address the listener bound. The host publishes it as its
// membership Address.
func (t *Transport) Addr() string { return t.addr }

func (t *Transport) isClosing() bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.closing
}

// AddPeer tells the transport that the host named name is a peer, reached
// at addr (its membership Address). The transport says hello at once; the
// handler gets Event{Up} when the peer is first heard from. Adding a known
// peer with a new address changes where it is reached. Errors:
// payload.InvalidOperation (empty name or address, or this host's name),
// transport.ErrClosed.
func (t *Transport) AddPeer(name, addr string) error {
	const op = "remote.Transport.AddPeer"
	if name == "" || addr == "" || name == t.name {
		return payload.NewError(payload.InvalidOperation, op, "empty name or address, or the host's own name")
	}
	t.mu.Lock()
	if t.closing {
		t.mu.Unlock()
		return transport.ErrClosed
	}
	if p := t.peers[name]; p != nil {
		p.mu.Lock()
		if p.addr != addr {
			delete(t.byAddr, p.addr)
			p.addr, p.pid = addr, actor.NewPID(addr, processName)
			t.byAddr[addr] = p
		}
		p.mu.Unlock()
		t.mu.Unlock()
		return nil
	}
	p := &peer{name: name, q: newInbox(), addr: addr, pid: actor.NewPID(addr, processName), s: newSession(&t.cfg)}
	p.s.leaving = t.leaving
	t.peers[name] = p
	t.byAddr[addr] = p
	t.wg.Add(1)
	go t.deliverLoop(p)
	p.mu.Lock() // before t.mu is released: no input reaches the session before its hello
	t.mu.Unlock()
	p.s.hello(&p.o)
	t.flushLocked(p)
	p.mu.Unlock()
	return nil
}

// RemovePeer tells the transport that the host named name left the
// membership (it left, or its lease expired): what it had not taken is
// lost, the handler gets Event{Gone} after what is queued from it, and
// sends to it fail with ErrUnknownPeer. Removing an unknown peer does
// nothing.
func (t *Transport) RemovePeer(name string) {
	t.mu.Lock()
	p := t.peers[name]
	if p == nil || t.closing {
		t.mu.Unlock()
		return
	}
	delete(t.peers, name)
	p.mu.Lock()
	if t.byAddr[p.addr] == p {
		delete(t.byAddr, p.addr)
	}
	p.s.remove(&p.o)
	t.removed.add(p.s.stats)
	t.mu.Unlock()
	t.flushLocked(p)
	p.q.endWhenEmpty()
	p.mu.Unlock()
}

func (t *Transport) peer(name string) (*peer, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.peers[name], t.closing
}

// Send queues it for the peer named to; see transport.Transport.Send. It
// never blocks on the link (WaitRoom is the flow control); Data is copied
// unless it.Owned.
func (t *Transport) Send(to string, it transport.Item) error {
	p, closing := t.peer(to)
	switch {
	case closing:
		return transport.ErrClosed
	case p == nil:
		return transport.ErrUnknownPeer
	}
	p.mu.Lock()
	err := p.s.send(it, &p.o)
	t.flushLocked(p)
	p.mu.Unlock()
	return err
}

// flushLocked carries out the session's outputs: envelopes to the wire, in
// order, and handler calls to the delivery queue (p.mu held).
func (t *Transport) flushLocked(p *peer) {
	t.flush(p, false)
}

// flushLockedTake is flushLocked, except that when the handler has
// nothing to do the first item to deliver is taken (inbox.take) for the
// caller to deliver once it released p.mu.
func (t *Transport) flushLockedTake(p *peer) (d delivery, took bool) {
	return t.flush(p, true)
}

func (t *Transport) flush(p *peer, take bool) (d delivery, took bool) {
	o := &p.o
	if len(o.send) > 0 && !p.cut.Load() {
		t.wireMu.RLock()
		if !t.shut {
			for _, e := range o.send {
				t.system.Root.Send(p.pid, e)
			}
		}
		t.wireMu.RUnlock()
	}
	if len(o.deliver) > 0 {
		if take {
			d, took = p.q.take(o.deliver)
		} else {
			p.q.push(o.deliver)
		}
	}
	p.blocked.Store(p.s.blocked)
	p.state.Store(uint32(p.s.state))
	if !p.s.blocked && p.room != nil {
		close(p.room)
		p.room = nil
	}
	if p.s.closing {
		select {
		case t.kick <- struct{}{}:
		default:
		}
	}
	o.reset()
	return d, took
}

// WaitRoom waits until the link to the peer named to is under its high
// marks; see transport.Transport.WaitRoom. It returns nil at once when
// there is room (even if ctx has ended), and when to is not a peer or the
// transport is closed.
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
// handed to the handler (or being handed); out, sent to peers and not yet
// taken by their handlers.
func (t *Transport) Pending() (in, out int) {
	for _, p := range t.peerList() {
		in += p.q.pending()
		p.mu.Lock()
		out += p.s.pendingOut()
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

// Close ends this host's links; see transport.Transport.Close. Graceful:
// the handler takes nothing more; each peer gets a bye after what was sent
// to it, which tells it what the handler took (it hands the frames it sent
// and that were not taken back to its own handler, Returned), and Close
// waits until every reachable peer received its bye, at most
// Options.CloseTimeout. Without grace: what was queued is dropped and each
// peer gets a crash notice, waited for at most a second. Then protoactor
// remote shuts down. Close returns an error of kind payload.DataLost if a
// graceful Close gave up on a peer that had not received everything; it
// returns once no goroutine of the transport runs. A second Close waits
// for the first and returns nil.
func (t *Transport) Close(graceful bool) error {
	t.mu.Lock()
	if t.closing {
		t.mu.Unlock()
		<-t.done
		return nil
	}
	t.closing = true
	t.mu.Unlock()
	peers := t.peerList()
	for _, p := range peers {
		epoch, seq := p.q.stop()
		p.mu.Lock()
		p.s.close(graceful, epoch, seq, &p.o)
		t.flushLocked(p)
		p.mu.Unlock()
	}
	wait := t.opts.CloseTimeout
	if !graceful {
		wait = min(wait, crashWait)
	}
	unfinished := t.await(peers, wait, (*session).closed)
	for _, p := range peers {
		p.mu.Lock()
		p.s.flush(&p.o)
		t.flushLocked(p)
		p.mu.Unlock()
	}
	t.await(peers, crashWait, (*session).flushed)

	close(t.stopTick)
	t.wireMu.Lock()
	t.shut = true
	t.wireMu.Unlock()
	t.system.EventStream.Unsubscribe(t.sub)
	shutdownRemote(t.system, t.rem)
	t.system.ProcessRegistry.Remove(t.self)
	t.system.Shutdown()
	for _, p := range peers {
		p.q.stop()
		p.q.waitInline()
		p.mu.Lock()
		if p.room != nil {
			close(p.room)
			p.room = nil
		}
		p.mu.Unlock()
	}
	t.wg.Wait()
	close(t.done)
	if graceful && len(unfinished) > 0 {
		return payload.NewError(payload.DataLost, "remote.Transport.Close",
			"gave up after "+t.opts.CloseTimeout.String()+" on peers that had not received everything: "+strings.Join(unfinished, ", "))
	}
	return nil
}

// await waits until done holds for every peer's session, at most d; it
// returns the peers for which it does not.
func (t *Transport) await(peers []*peer, d time.Duration, done func(*session) bool) []string {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		var open []string
		for _, p := range peers {
			p.mu.Lock()
			if !done(p.s) {
				open = append(open, p.name)
			}
			p.mu.Unlock()
		}
		if len(open) == 0 {
			return nil
		}
		select {
		case <-t.kick:
		case <-timer.C:
			slices.Sort(open)
			return open
		}
	}
}

// ticker runs the sessions' clock.
func (t *Transport) ticker() {
	defer t.wg.Done()
	tk := time.NewTicker(t.opts.Tick)
	defer tk.Stop()
	for {
		select {
		case <-t.stopTick:
			return
		case <-tk.C:
		}
		for _, p := range t.peerList() {
			p.mu.Lock()
			p.s.tick(&p.o)
			t.flushLocked(p)
			p.mu.Unlock()
		}
	}
}

// deliverLoop hands the peer's queued calls to the handler, one at a
// time, in order, and reports the handler's progress to the session.
func (t *Transport) deliverLoop(p *peer) {
	defer t.wg.Done()
	unreported := 0
	for {
		d, more, ok := p.q.next()
		if !ok {
			return
		}
		switch d.what {
		case dItem:
			t.h.Deliver(p.name, d.item)
			unreported++
			if !more || unreported >= 16 {
				unreported = 0
				p.mu.Lock()
				p.s.takenThrough(d.epoch, d.seq, &p.o)
				t.flushLocked(p)
				p.mu.Unlock()
			}
		case dReturned:
			t.h.Returned(p.name, d.item)
		case dEvent:
			t.h.Event(transport.Event{Peer: p.name, Kind: d.event})
		}
	}
}

// receive handles an envelope from the wire (on protoactor's stream
// reader goroutine of its sender).
func (t *Transport) receive(e *Envelope) {
	t.mu.RLock()
	p := t.peers[e.From]
	t.mu.RUnlock()
	if p == nil {
		t.unknown.Add(1)
		return
	}
	if p.cut.Load() {
		return
	}
	p.mu.Lock()
	p.s.receive(e, &p.o)
	d, took := t.flushLockedTake(p)
	p.mu.Unlock()
	if !took {
		return
	}
	// The item came in while its handler had nothing to do: deliver it
	// here, on the stream reader, as protoactor delivers to an actor.
	t.h.Deliver(p.name, d.item)
	if p.q.inlineDone() {
		return // closing: the session was told what the handler took
	}
	p.mu.Lock()
	p.s.takenThrough(d.epoch, d.seq, &p.o)
	t.flushLocked(p)
	p.mu.Unlock()
}

// onEvent takes protoactor's event stream: a connection to a peer that
// ended (what was queued on it is lost) makes its link Down.
func (t *Transport) onEvent(ev any) {
	te, ok := ev.(*remote.EndpointTerminatedEvent)
	if !ok {
		return
	}
	t.mu.RLock()
	p := t.byAddr[te.Address]
	t.mu.RUnlock()
	if p == nil {
		return
	}
	p.mu.Lock()
	p.s.connDown(&p.o)
	t.flushLocked(p)
	p.mu.Unlock()
}

// Stats counts what the session layer did, for tests and metrics.
type Stats struct {
	// Resent is how many items went on the wire again (go back N).
	Resent uint64
	// Duplicates is how many items were received again and dropped.
	Duplicates uint64
	// Gaps is how many items arrived after a missing one and were dropped
	// (they come again).
	Gaps uint64
	// Stale is how many envelopes of another incarnation were dropped.
	Stale uint64
	// Lost is how many sent items a peer had not taken when it crashed,
	// restarted or was removed.
	Lost uint64
	// Dropped is how many non-frame items a gracefully closed peer had
	// not taken (frames are Returned).
	Dropped uint64
	// Unknown is how many envelopes came from hosts that are not peers.
	Unknown uint64
}

// Cut cuts (cut true) or restores the link between this host and its peer
// name, as a broken network would: envelopes to and from the peer are
// lost, and the link is Down at once (its connection ended) until the
// peer is heard from again after the cut ends; the session layer then
// resends what was lost. It is fault injection, for tests and drills (cut
// both ends for a network partition); a peer it does not know is ignored.
func (t *Transport) Cut(name string, cut bool) {
	p, _ := t.peer(name)
	if p == nil {
		return
	}
	p.cut.Store(cut)
	if cut {
		p.mu.Lock()
		p.s.connDown(&p.o)
		t.flushLocked(p)
		p.mu.Unlock()
	}
}

// Stats returns the transport's counts so far.
func (t *Transport) Stats() Stats {
	t.mu.RLock()
	sum := t.removed
	t.mu.RUnlock()
	for _, p := range t.peerList() {
		p.mu.Lock()
		sum.add(p.s.stats)
		p.mu.Unlock()
	}
	return Stats{Resent: sum.resent, Duplicates: sum.duplicates, Gaps: sum.gaps, Stale: sum.stale,
		Lost: sum.lost, Dropped: sum.dropped, Unknown: t.unknown.Load()}
}

// inbound is the process peers send to: protoactor's stream reader calls
// it for each envelope, in the order the sender sent them.
type inbound struct{ t *Transport }

// SendUserMessage takes an envelope from a peer; anything else is dropped
// (nothing else is ever sent).
func (in inbound) SendUserMessage(_ *actor.PID, message any) {
	if e, ok := message.(*Envelope); ok {
		in.t.receive(e)
		return
	}
	if env, ok := message.(*actor.MessageEnvelope); ok {
		if e, ok := env.Message.(*Envelope); ok {
			in.t.receive(e)
			return
		}
	}
	in.t.unknown.Add(1)
}

// SendSystemMessage ignores protoactor's system messages.
func (inbound) SendSystemMessage(*actor.PID, any) {}

// Stop does nothing: Close removes the process.
func (inbound) Stop(*actor.PID) {}
