package tcp

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/internal/ratelog"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/transport"
)

// Defaults of Options.
const (
	DefaultListen           = "127.0.0.1:0"
	DefaultTick             = 20 * time.Millisecond
	DefaultHeartbeat        = 100 * time.Millisecond
	DefaultDownAfter        = 1500 * time.Millisecond
	DefaultAckEvery         = 64
	DefaultHighItems        = 8192
	DefaultHighBytes        = 8 << 20
	DefaultMaxPendingItems  = 8 * DefaultHighItems
	DefaultMaxPendingBytes  = 2 * DefaultMaxItem
	DefaultInboundItems     = 4096
	DefaultInboundBytes     = 8 << 20
	DefaultMaxItem          = 64<<20 + 1<<20
	DefaultCloseTimeout     = 10 * time.Second
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultMaxHandshakes    = 64
)

// crashWait bounds how long a Close without grace waits for its peers to
// answer the crash notice.
const crashWait = time.Second

// The dial backoff after a failed connection attempt: from minBackoff,
// doubling, to maxBackoff.
const (
	minBackoff = 10 * time.Millisecond
	maxBackoff = time.Second
)

// Options configures a Transport. TLS or Insecure is required.
type Options struct {
	// Listen is the host:port to listen on (port 0: a free port).
	// Default DefaultListen.
	Listen string
	// Advertise is the address peers dial to reach this host (what Addr
	// returns, published as the host's membership Address). Default:
	// the address the listener bound.
	Advertise string
	// TLS is the host's certificate and the CA its peers' certificates
	// chain to: every connection is mutually authenticated TLS 1.3, and
	// every item it carries is attributed to the member its certificate
	// names.
	TLS *TLS
	// Insecure runs without TLS: plaintext, and a peer is whoever says
	// it is in its connection preamble. For a loopback or a network
	// nobody else reaches. Exactly one of TLS and Insecure is set.
	Insecure bool
	// Run is this host's incarnation on the wire: the lease generation it
	// joins the membership with (Attacher.AttachRun sets it), which peers
	// check against their membership (AddPeerRun). 0: the time Listen
	// was called.
	Run uint64
	// Tick is the session layer's clock: acks that changed go out, and
	// heartbeats and silence are counted, once per tick.
	Tick time.Duration
	// Heartbeat: a host that sent a peer nothing for this long sends a
	// hello.
	Heartbeat time.Duration
	// DownAfter: a peer not heard from for this long is Down (a broken
	// connection makes it Down at once). Down is not Gone: what is sent
	// waits for the link to come back, or for the membership to remove
	// the peer.
	DownAfter time.Duration
	// AckEvery: after this many items received (or taken by the handler)
	// since the last acknowledgement, one goes out without waiting for a
	// tick.
	AckEvery int
	// HighItems and HighBytes are the high marks of the sending side of a
	// link: WaitRoom blocks while more items, or more bytes, than these
	// are sent and not yet taken by the peer's handler, until both are
	// at half.
	HighItems, HighBytes int
	// MaxPendingItems and MaxPendingBytes are the hard bound of the
	// sending side of a link, on what the peer has not taken: past
	// either, Send refuses with transport.ErrBacklog (counted in
	// Stats.Backlog) — frames and records only past twice the bound
	// (see transport.Backlogger). It bounds what a peer that stops
	// reading, or is cut off, makes this host keep for it. At least
	// HighItems and the larger of HighBytes and MaxItem. Default
	// DefaultMaxPendingItems and DefaultMaxPendingBytes.
	MaxPendingItems, MaxPendingBytes int
	// InboundItems and InboundBytes bound what is received from one peer
	// and not yet handed to the handler: past either, this host stops
	// reading the peer's connection until the handler caught up.
	InboundItems, InboundBytes int
	// MaxItem is the largest item's data, in bytes, sent or received (a
	// larger Send fails with payload.CapacityExceeded; a larger frame
	// received closes its connection). Default DefaultMaxItem: berth's
	// largest message and its overhead.
	MaxItem int
	// CloseTimeout bounds how long a graceful Close waits for its peers
	// to receive what it sent.
	CloseTimeout time.Duration
	// HandshakeTimeout bounds a new connection's TLS handshake and
	// preamble (both ways).
	HandshakeTimeout time.Duration
	// MaxHandshakes is how many accepted connections may be in their
	// handshake at once. A connection accepted when they are full takes
	// the slot of one of them, which is closed (counted in
	// Stats.Refused): one of the address holding the most slots, one that
	// has sent nothing before one that has, the oldest first.
	MaxHandshakes int
	// Logger receives the transport's log lines (refused connections,
	// malformed frames; rate-limited per kind). Nil discards them.
	Logger *slog.Logger
}

// normalize returns o with defaults, or an error naming a bad field.
func (o Options) normalize() (Options, error) {
	const op = "tcp.Options"
	bad := func(detail string) (Options, error) {
		return o, payload.NewError(payload.InvalidOperation, op, detail)
	}
	switch {
	case o.TLS == nil && !o.Insecure:
		return bad("neither TLS nor Insecure is set")
	case o.TLS != nil && o.Insecure:
		return bad("both TLS and Insecure are set")
	case o.TLS != nil && (o.TLS.CA == nil || len(o.TLS.Certificate.Certificate) == 0):
		return bad("TLS needs a certificate and a CA pool")
	}
	durs := []struct {
		name string
		d    *time.Duration
		def  time.Duration
	}{{"Tick", &o.Tick, DefaultTick}, {"Heartbeat", &o.Heartbeat, DefaultHeartbeat}, {"DownAfter", &o.DownAfter, DefaultDownAfter},
		{"CloseTimeout", &o.CloseTimeout, DefaultCloseTimeout}, {"HandshakeTimeout", &o.HandshakeTimeout, DefaultHandshakeTimeout}}
	for _, d := range durs {
		if *d.d < 0 {
			return bad("Options." + d.name + " is negative")
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
		{"HighBytes", &o.HighBytes, DefaultHighBytes}, {"InboundItems", &o.InboundItems, DefaultInboundItems},
		{"InboundBytes", &o.InboundBytes, DefaultInboundBytes}, {"MaxItem", &o.MaxItem, DefaultMaxItem},
		{"MaxHandshakes", &o.MaxHandshakes, DefaultMaxHandshakes},
		{"MaxPendingItems", &o.MaxPendingItems, DefaultMaxPendingItems}, {"MaxPendingBytes", &o.MaxPendingBytes, DefaultMaxPendingBytes}}
	for _, n := range ints {
		if *n.n < 0 {
			return bad("Options." + n.name + " is negative")
		}
		if *n.n == 0 {
			*n.n = n.def
		}
	}
	if o.MaxItem > 1<<31-headerLen {
		return bad("Options.MaxItem is past what a frame's length can say")
	}
	if o.MaxPendingItems < o.HighItems || o.MaxPendingBytes < max(o.HighBytes, o.MaxItem) {
		return bad("Options.MaxPendingItems is under HighItems, or MaxPendingBytes under HighBytes or MaxItem")
	}
	if o.Listen == "" {
		o.Listen = DefaultListen
	}
	return o, nil
}

// ticks converts d to ticks of tick, at least 1.
func ticks(d, tick time.Duration) int64 { return max(int64((d+tick-1)/tick), 1) }

// noResend: a TCP connection loses nothing while it lasts, so items go
// again only when a connection ended (the link comes up again) or the
// receiver reports a gap — never because acknowledgements are slow (a
// slow handler is back-pressure, not loss).
const noResend = 1 << 62

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

// peer is one peer: its session, its delivery queue, its connections and
// what waits to be written to it.
type peer struct {
	name string
	q    *inbox
	wake chan struct{} // one slot: the writer has something to do

	blocked atomic.Bool   // the session is over its high mark (WaitRoom's fast path)
	full    atomic.Bool   // the session is at its hard bound (Backlogged)
	maxItem atomic.Int64  // the largest item the peer takes, from its answer to the last connection (0: not known yet)
	state   atomic.Uint32 // the session's linkState, for Peers
	cut     atomic.Bool   // a test fault: no connection to or from the peer
	role    atomic.Uint32 // the transport.Role its certificate names, on its latest connection

	// The link's traffic (Links): items Send accepted for the peer and
	// their bytes; items delivered from it to the handler and theirs.
	sentItems, sentBytes atomic.Uint64
	recvItems, recvBytes atomic.Uint64

	mu          sync.Mutex
	addr        string        // guarded by mu
	s           *session      // guarded by mu
	o           output        // scratch for the session's outputs; guarded by mu
	room        chan struct{} // closed when the session is no longer blocked; guarded by mu
	wq          writeQueue    // encoded envelopes for the writer, in order; guarded by mu
	out         net.Conn      // the connection this host writes on (nil: none); guarded by mu
	in          net.Conn      // the connection the peer writes on (nil: none); guarded by mu
	carried     bool          // numbered envelopes went on out (its loss needs a go-back); guarded by mu
	writing     bool          // a batch is being written (by the writer, or by Send); guarded by mu
	inlineSpare writeQueue    // Send's spare buffer for the writes it makes; guarded by mu
	removed     bool          // the peer was removed: its writer ends; guarded by mu
}

// writeQueue is the bytes waiting for a peer's writer: frames coalesced
// into buffers, an item's data of bigData or more kept where it lies (it
// is the session's, never changed) rather than copied.
type writeQueue struct {
	segs  [][]byte // written in order, then buf
	parts []int    // the segments that begin a part: a hello goes before each
	buf   []byte
	n     int // bytes queued
	items int // numbered envelopes (items, bye) queued: losing them needs a go-back
}

func (w *writeQueue) push(e *Envelope) {
	switch {
	case len(e.Data) < bigData:
		w.buf = appendFrame(w.buf, e)
	case len(e.Data) <= partSize:
		w.segs = append(w.segs, appendHeader(w.buf, e), e.Data)
		w.buf = nil
	default:
		// In parts (see partSize): the item's frame with the first, then
		// a part frame for each further partSize bytes, their headers in
		// one buffer.
		first := *e
		first.Flags |= flagMore
		first.Data = e.Data[:partSize]
		w.segs = append(w.segs, appendHeader(w.buf, &first), first.Data)
		w.buf = nil
		rest := e.Data[partSize:]
		hdrs := make([]byte, 0, (len(rest)+partSize-1)/partSize*headerLen)
		for len(rest) > 0 {
			k := min(len(rest), partSize)
			part := Envelope{Op: opPart, FromInc: e.FromInc, ToInc: e.ToInc, Seq: e.Seq, Data: rest[:k]}
			if k < len(rest) {
				part.Flags = flagMore
			}
			at := len(hdrs)
			hdrs = appendHeader(hdrs, &part)
			w.parts = append(w.parts, len(w.segs))
			w.segs = append(w.segs, hdrs[at:], part.Data)
			w.n += headerLen
			rest = rest[k:]
		}
	}
	w.n += headerLen + len(e.Data)
	if e.Op == opItem || e.Op == opBye {
		w.items++
	}
}

// reset empties w, keeping its buffer.
func (w *writeQueue) reset() {
	clear(w.segs)
	w.segs, w.parts, w.buf, w.n, w.items = w.segs[:0], w.parts[:0], w.buf[:0], 0, 0
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

// closeConnsLocked closes the peer's connections (p.mu held).
func (p *peer) closeConnsLocked() {
	if p.out != nil {
		_ = p.out.Close()
		p.out = nil
	}
	if p.in != nil {
		_ = p.in.Close()
		p.in = nil
	}
	p.wq.reset()
}

// poke wakes the peer's writer.
func (p *peer) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (t *Transport) peer(name string) (*peer, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.peers[name], t.closing
}

// Send queues it for the peer named to; see transport.Transport.Send. It
// never blocks on the link (WaitRoom is the flow control); Data is copied
// unless it.Owned. An item larger than Options.MaxItem fails with
// payload.CapacityExceeded.
func (t *Transport) Send(to string, it transport.Item) error {
	if len(it.Data) > t.opts.MaxItem {
		return tooLarge(len(it.Data), t.opts.MaxItem, "")
	}
	p, closing := t.peer(to)
	switch {
	case closing:
		return transport.ErrClosed
	case p == nil:
		return transport.ErrUnknownPeer
	}
	if m := p.maxItem.Load(); m > 0 && int64(len(it.Data)) > m {
		// The peer would close the connection on it, and the session
		// would send it again on the next: refused here instead.
		return tooLarge(len(it.Data), int(m), " of "+to)
	}
	p.mu.Lock()
	err := p.s.send(it, &p.o)
	if err == nil {
		p.sentItems.Add(1)
		p.sentBytes.Add(uint64(len(it.Data)))
	}
	t.flush(p, false, false)
	if err != nil || p.out == nil || p.writing || p.wq.n == 0 || p.wq.n > inlineWrite || !p.s.caughtUp() {
		queued := p.wq.n > 0
		p.mu.Unlock()
		if queued {
			p.poke() // the writer's turn
		}
		return err
	}
	// The peer has read everything before this item and the writer is
	// idle: write it here, one goroutine switch less on a round trip.
	// So little is unread on the connection that the write cannot block.
	conn, batch := p.out, p.wq
	p.wq, p.inlineSpare = p.inlineSpare, writeQueue{}
	p.carried = p.carried || batch.items > 0
	p.writing = true
	p.mu.Unlock()
	werr := writeBatch(conn, &batch, nil) // small: no parts
	batch.reset()
	p.mu.Lock()
	p.writing, p.inlineSpare = false, batch
	more, closing := p.wq.n > 0, p.s.closing
	p.mu.Unlock()
	if werr != nil {
		t.linkDown(p, conn)
	}
	if more {
		p.poke()
	}
	if closing {
		t.wakeClose() // a Close waits for the queue to drain
	}
	return nil
}

// tooLarge is Send's error for an item of n bytes past the limit max
// (whose is said).
func tooLarge(n, max int, whose string) error {
	return payload.NewError(payload.CapacityExceeded, "tcp.Transport.Send",
		"an item of "+strconv.Itoa(n)+" bytes exceeds the limit"+whose+" of "+strconv.Itoa(max))
}

// inlineWrite is the most Send writes on its caller's goroutine (see
// Send): well under the smallest socket buffers, so that with the peer
// caught up the write never waits for the peer.
const inlineWrite = 2 << 10

// flushLocked carries out the session's outputs: envelopes to the write
// queue, in order, and handler calls to the delivery queue (p.mu held).
func (t *Transport) flushLocked(p *peer) {
	t.flush(p, false, true)
}

// flushLockedTake is flushLocked, except that when the handler has
// nothing to do the first item to deliver is taken (inbox.take) for the
// caller to deliver once it released p.mu.
func (t *Transport) flushLockedTake(p *peer) (d delivery, took bool) {
	return t.flush(p, true, true)
}

// flush is flushLocked (take: flushLockedTake); poke says whether to wake
// the writer for what it queued (Send does not: it may write it itself).
func (t *Transport) flush(p *peer, take, poke bool) (d delivery, took bool) {
	o := &p.o
	if len(o.send) > 0 && !p.removed && !p.cut.Load() {
		for i := range o.send {
			p.wq.push(&o.send[i])
		}
		if poke {
			p.poke()
		}
	}
	// The state first: a handler that got an event sees it in Peers.
	p.blocked.Store(p.s.blocked)
	p.full.Store(p.s.backlogged())
	p.state.Store(uint32(p.s.state))
	if len(o.deliver) > 0 {
		if take {
			d, took = p.q.take(o.deliver)
		} else {
			p.q.push(o.deliver)
		}
	}
	if !p.s.blocked && p.room != nil {
		close(p.room)
		p.room = nil
	}
	if p.s.closing {
		t.wakeClose()
	}
	o.reset()
	return d, took
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

// Close ends this host's links; see transport.Transport.Close. Graceful:
// the handler takes nothing more; each peer gets a bye after what was sent
// to it, which tells it what the handler took (it hands the frames it sent
// and that were not taken back to its own handler, Returned), and Close
// waits until every reachable peer received its bye, at most
// Options.CloseTimeout. Without grace: what was queued is dropped and each
// peer gets a crash notice, waited for at most a second. Then every
// connection closes. Close returns an error of kind payload.DataLost if a
// graceful Close gave up on a peer that had not received everything; it
// returns once no goroutine of the transport runs. A second Close waits
// for the first and returns nil.
func (t *Transport) Close(graceful bool) error {
	return t.close(graceful, nil)
}

// CloseReclaim closes the transport as Close(false) does, and returns what
// each peer's handler had not taken of what this host sent it, in the
// order sent (transport.Reclaimer): the items of the peer's session from
// the last taking the peer reported — so an item the peer took since may
// be among them. A peer that is gone has nothing handed back: what it had
// not taken was lost with it (Stats.Lost). It does not wait for its peers
// to answer its crash notice: a run that reclaims is one they saw fail,
// and they drop what it sends. The items are handed over once no
// goroutine of the transport runs.
func (t *Transport) CloseReclaim() map[string][]transport.Item {
	back := map[string][]transport.Item{}
	_ = t.close(false, back)
	return back
}

// close is Close; a non-nil back (not graceful) gets what CloseReclaim
// hands back.
func (t *Transport) close(graceful bool, back map[string][]transport.Item) error {
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
		if back != nil {
			if items := p.s.reclaim(); len(items) > 0 {
				back[p.name] = items
			}
		}
		p.s.close(graceful, epoch, seq, &p.o)
		t.flushLocked(p)
		p.mu.Unlock()
	}
	wait := t.opts.CloseTimeout
	if !graceful {
		wait = min(wait, crashWait)
	}
	if back != nil {
		// A run that reclaims what it sent is one its peers saw fail:
		// they drop its envelopes (a stale incarnation), so none answers
		// its crash notice. The notice is written (below); nobody waits
		// for an answer that does not come.
		wait = 0
	}
	unfinished := t.await(peers, wait, func(p *peer) bool { return p.s.closed() })
	// What is queued to be written goes before the connections close:
	// the answers to the peers' byes are among it (a peer's graceful
	// Close waits for them). A connection that ends drops its queue.
	t.await(peers, crashWait, func(p *peer) bool { return p.out == nil || p.wq.n == 0 && !p.writing })

	close(t.stopTick)
	close(t.stop)
	t.dialStop()
	_ = t.ln.Close()
	t.mu.Lock()
	t.shut = true
	for c := range t.handshakes {
		_ = c.Close()
	}
	t.mu.Unlock()
	for _, p := range peers {
		p.q.stop()
		p.mu.Lock()
		p.removed = true
		p.closeConnsLocked()
		if p.room != nil {
			close(p.room)
			p.room = nil
		}
		p.mu.Unlock()
		p.poke()
	}
	for _, p := range peers {
		p.q.waitInline()
	}
	t.wg.Wait()
	close(t.done)
	if graceful && len(unfinished) > 0 {
		return payload.NewError(payload.DataLost, "tcp.Transport.Close",
			"gave up after "+t.opts.CloseTimeout.String()+" on peers that had not received everything: "+strings.Join(unfinished, ", "))
	}
	return nil
}

// wakeClose wakes a Close that waits for the peers (await).
func (t *Transport) wakeClose() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// await waits until done holds for every peer (called with its p.mu
// held), at most d; it returns the peers for which it does not.
func (t *Transport) await(peers []*peer, d time.Duration, done func(*peer) bool) []string {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		var open []string
		for _, p := range peers {
			p.mu.Lock()
			if !done(p) {
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
			if !d.refused {
				p.delivered(d.item)
				t.h.Deliver(p.name, d.item)
			}
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

// linkDown reports that conn, one of the peer's connections, ended. The
// one this host writes on: what waited to be written on it is dropped,
// and if numbered envelopes went on it or waited, the link is Down (they
// may be lost) until the peer is heard from again, when the session sends
// them again. The one the peer writes on: the peer's own session sees to
// what was on it.
func (t *Transport) linkDown(p *peer, conn net.Conn) {
	_ = conn.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	switch conn {
	case p.out:
		lost := p.carried || p.wq.items > 0
		p.out, p.carried = nil, false
		p.wq.reset()
		if lost {
			p.s.connDown(&p.o)
			t.flushLocked(p)
		}
	case p.in:
		p.in = nil
	}
}

// writeLoop is the peer's writer: it connects when there is something to
// write and no connection, and writes what is queued, many frames in one
// write.
func (t *Transport) writeLoop(p *peer) {
	defer t.wg.Done()
	var spare writeQueue
	backoff := time.Duration(0)
	between := func(b []byte) []byte {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.removed || p.cut.Load() {
			return b
		}
		e, ok := p.s.between()
		if !ok {
			return b
		}
		return appendFrame(b, &e)
	}
	for {
		select {
		case <-p.wake:
		case <-t.stop:
			return
		}
		for {
			p.mu.Lock()
			if p.removed {
				p.mu.Unlock()
				return
			}
			conn := p.out
			if p.wq.n == 0 || p.cut.Load() || p.writing {
				// (A Send writing pokes again when it is done.)
				if p.cut.Load() {
					p.wq.reset()
				}
				p.mu.Unlock()
				break
			}
			if conn == nil {
				addr := p.addr
				p.mu.Unlock()
				c, peerMax, err := t.dial(p.name, addr)
				p.mu.Lock()
				switch {
				case err == nil && !p.removed && !p.cut.Load() && p.addr == addr:
					p.out, p.carried, backoff = c, false, 0
					p.maxItem.Store(int64(peerMax))
					t.wg.Add(1)
					go t.watchOut(p, c)
					p.mu.Unlock()
					continue
				case err == nil:
					_ = c.Close()
				}
				// What waited is dropped, as on a broken connection: the
				// session sends the items again once the link is up.
				lost := p.wq.items > 0
				p.wq.reset()
				if lost {
					p.s.connDown(&p.o)
					t.flushLocked(p)
				}
				p.mu.Unlock()
				backoff = min(max(2*backoff, minBackoff), maxBackoff)
				select {
				case <-time.After(backoff):
				case <-t.stop:
					return
				}
				continue
			}
			batch := p.wq
			p.wq, spare = spare, writeQueue{}
			p.carried = p.carried || batch.items > 0
			p.writing = true
			p.mu.Unlock()
			err := writeBatch(conn, &batch, between)
			batch.reset()
			spare = batch
			p.mu.Lock()
			p.writing = false
			closing := p.s.closing
			p.mu.Unlock()
			if err != nil {
				t.linkDown(p, conn)
			}
			if closing {
				t.wakeClose() // a Close waits for the queue to drain
			}
		}
	}
}

// writeBatch writes what w holds to conn: its segments in order, then its
// buffer. Before each part of a large item it writes what between
// appends (a hello; nothing when nil).
func writeBatch(conn net.Conn, w *writeQueue, between func([]byte) []byte) error {
	var hello []byte
	parts := w.parts
	for i, s := range w.segs {
		if len(parts) > 0 && parts[0] == i {
			parts = parts[1:]
			if between != nil {
				if hello = between(hello[:0]); len(hello) > 0 {
					if _, err := conn.Write(hello); err != nil {
						return err
					}
				}
			}
		}
		if _, err := conn.Write(s); err != nil {
			return err
		}
	}
	if len(w.buf) > 0 {
		if _, err := conn.Write(w.buf); err != nil {
			return err
		}
	}
	return nil
}

// watchOut reads the connection this host writes on: the peer never
// writes on it, so anything (its end, an error, a byte) ends it.
func (t *Transport) watchOut(p *peer, c net.Conn) {
	defer t.wg.Done()
	var b [1]byte
	_, _ = c.Read(b[:])
	t.linkDown(p, c)
}

// dial connects to the peer named name at addr: TCP, then TLS (the
// listener's certificate must name the peer), then the preamble and the
// listener's answer, within Options.HandshakeTimeout. It returns the
// largest item the peer takes.
func (t *Transport) dial(name, addr string) (net.Conn, int, error) {
	ctx, cancel := context.WithTimeout(t.dialCtx, t.opts.HandshakeTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, 0, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if st := t.tlsNow.Load(); st != nil {
		tc := tls.Client(c, st.clientConfig(name))
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = c.Close()
			t.logs.dial.Warn(t.log, "tcp: connecting to a peer failed its TLS handshake", "peer", name, "err", err)
			return nil, 0, err
		}
		c = tc
		if cs := tc.ConnectionState(); len(cs.PeerCertificates) > 0 {
			role, _ := identity(cs.PeerCertificates[0], name)
			t.mu.RLock()
			if p := t.peers[name]; p != nil {
				p.role.Store(uint32(role))
			}
			t.mu.RUnlock()
		}
	}
	if _, err := c.Write(appendPreamble(nil, t.name, name)); err != nil {
		_ = c.Close()
		return nil, 0, err
	}
	// The listener answers once it took the connection as the peer's (it
	// closes it otherwise: it does not know this host yet, or refused it).
	var ans [acceptLen]byte
	if _, err := io.ReadFull(c, ans[:]); err != nil {
		_ = c.Close()
		return nil, 0, errRefused
	}
	maxItem, err := readAccept(&ans)
	if err != nil {
		_ = c.Close()
		return nil, 0, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, maxItem, nil
}

// SetTLS makes c the transport's identity and trust from now on: new
// handshakes, both ways, present c's certificate and verify peers against
// c's CA and deny list; links on a certificate c denies are closed at
// once (counted in Stats.Refused), and their peer's handshakes refused
// from then on. Links on other certificates go on as they are. c's
// certificate must name this host, in the role the first one did.
// Errors are payload.InvalidOperation, changing nothing.
func (t *Transport) SetTLS(c *TLS) error {
	const op = "tcp.Transport.SetTLS"
	if t.tlsNow.Load() == nil {
		return payload.NewError(payload.InvalidOperation, op, "the transport runs without TLS")
	}
	if c == nil || c.Certificate.Leaf == nil {
		return payload.NewError(payload.InvalidOperation, op, "the TLS certificate has no parsed leaf")
	}
	role, named := identity(c.Certificate.Leaf, t.name)
	switch {
	case !named:
		return payload.NewError(payload.InvalidOperation, op, "the TLS certificate does not name "+t.name)
	case role != t.role:
		return payload.NewError(payload.InvalidOperation, op, "the TLS certificate names "+t.name+" a "+role.String()+", not a "+t.role.String()+" as the first one did")
	}
	st := newTLSState(c)
	t.tlsNow.Store(st)
	t.mu.RLock()
	peers := make([]*peer, 0, len(t.peers))
	for _, p := range t.peers {
		peers = append(peers, p)
	}
	t.mu.RUnlock()
	for _, p := range peers {
		p.mu.Lock()
		conns := [2]net.Conn{p.in, p.out}
		p.mu.Unlock()
		for _, c := range conns {
			if c != nil && st.denied(peerCert(c)) {
				t.refuse("the peer's certificate is on the deny list", c, nil)
				_ = c.Close()
			}
		}
	}
	return nil
}

// peerCert returns the certificate the far end of c presented, if c runs
// over TLS.
func peerCert(c net.Conn) *x509.Certificate {
	for {
		switch v := c.(type) {
		case *tls.Conn:
			if cs := v.ConnectionState(); len(cs.PeerCertificates) > 0 {
				return cs.PeerCertificates[0]
			}
			return nil
		case *bufferedConn:
			c = v.Conn
		case *heardConn:
			c = v.Conn
		default:
			return nil
		}
	}
}

// SetTLS makes c the identity and trust of every transport attached here
// and of those attached later (a host's new run): Transport.SetTLS on
// each. It returns the first error, having tried them all.
func (a *Attacher) SetTLS(c *TLS) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var first error
	for _, t := range a.attached {
		if t.isClosing() {
			continue
		}
		if err := t.SetTLS(c); err != nil && first == nil {
			first = err
		}
	}
	if first == nil {
		a.opts.TLS = c
	}
	return first
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

// errRefused: the listener closed a connection instead of accepting it.
var errRefused = errors.New("tcp: the peer refused the connection")

// acceptLoop takes the connections peers open.
func (t *Transport) acceptLoop() {
	defer t.wg.Done()
	for {
		c, err := t.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-t.stop:
				return
			case <-time.After(minBackoff): // out of descriptors, say: try again
			}
			continue
		}
		s := &slot{conn: c, addr: remoteHost(c)}
		t.mu.Lock()
		if t.shut {
			t.mu.Unlock()
			_ = c.Close()
			continue
		}
		var out *slot
		if len(t.handshakes) >= t.opts.MaxHandshakes {
			out = t.makeRoomLocked(s.addr)
		}
		t.accepted++
		s.seq = t.accepted
		t.handshakes[c] = s
		t.wg.Add(1)
		t.mu.Unlock()
		if out != nil {
			// Its serve sees the connection fail and counts nothing more.
			t.refuse("closed to make room for a new connection (too many in their handshake)", out.conn, nil)
			_ = out.conn.Close()
		}
		go t.serve(s)
	}
}

// makeRoomLocked takes the door's victim (door.go) out of the handshakes
// for a newcomer from addr, marked evicted; the caller closes it after
// the lock. Under t.mu.
func (t *Transport) makeRoomLocked(addr string) *slot {
	all := make([]*slot, 0, len(t.handshakes))
	info := make([]slotInfo, 0, len(t.handshakes))
	for _, s := range t.handshakes {
		all = append(all, s)
		info = append(info, slotInfo{addr: s.addr, seq: s.seq, heard: s.heard.Load()})
	}
	// A slot not marked heard may have bytes waiting that its goroutine
	// has not read yet (a starved host reads late): heard, then.
	i := victim(info, addr)
	for n := 0; n < len(all) && !info[i].heard && bytesWaiting(all[i].conn); n++ {
		all[i].heard.Store(true)
		info[i].heard = true
		i = victim(info, addr)
	}
	out := all[i]
	out.evicted.Store(true)
	delete(t.handshakes, out.conn)
	return out
}

// refuse counts and logs (rate-limited) a refused connection.
func (t *Transport) refuse(why string, c net.Conn, err error) {
	t.refused.Add(1)
	t.logs.refused.Warn(t.log, "tcp: refused a connection: "+why, "remote", c.RemoteAddr().String(), "err", err)
}

// serve runs one accepted connection: its handshake and preamble, within
// Options.HandshakeTimeout, then its frames, attributed to the peer it was
// authenticated as.
func (t *Transport) serve(s *slot) {
	defer t.wg.Done()
	raw := s.conn
	conn, p, ok := t.identify(s)
	t.mu.Lock()
	if t.handshakes[raw] == s {
		delete(t.handshakes, raw)
	}
	t.mu.Unlock()
	if !ok {
		_ = raw.Close()
		return
	}
	t.readLoop(p, conn)
}

// identify runs the handshake and preamble of an accepted connection and
// attaches it to its peer as the connection the peer writes on.
func (t *Transport) identify(s *slot) (net.Conn, *peer, bool) {
	raw := s.conn
	_ = raw.SetDeadline(time.Now().Add(t.opts.HandshakeTimeout))
	refuse := func(why string, err error) {
		if !s.evicted.Load() { // else counted when it was closed
			t.refuse(why, raw, err)
		}
	}
	conn := net.Conn(&heardConn{Conn: raw, s: s})
	var cert *tls.ConnectionState
	if st := t.tlsNow.Load(); st != nil {
		tc := tls.Server(conn, st.server)
		if err := tc.HandshakeContext(t.dialCtx); err != nil {
			refuse("TLS handshake", err)
			return nil, nil, false
		}
		cs := tc.ConnectionState()
		cert, conn = &cs, tc
	}
	br := bufio.NewReaderSize(conn, len(preambleMagic)+2+2*maxName)
	from, to, err := readPreamble(br)
	if err != nil {
		refuse("preamble", err)
		return nil, nil, false
	}
	if to != t.name {
		refuse("meant for "+strconv.Quote(to), nil)
		return nil, nil, false
	}
	role := transport.RoleNode
	if cert != nil {
		named := false
		if len(cert.PeerCertificates) > 0 {
			role, named = identity(cert.PeerCertificates[0], from)
		}
		if !named {
			refuse("the certificate does not name "+strconv.Quote(from), nil)
			return nil, nil, false
		}
	}
	if br.Buffered() > 0 {
		// Frames that came with the preamble: read them first.
		conn = &bufferedConn{Conn: conn, r: br}
	}
	// A closing host still takes connections: its peers' byes and acks
	// come on them. Only once its links end (shut) does it refuse. The
	// connection leaves the door's slots here (unless the door closed it
	// to make room: then it is over).
	t.mu.Lock()
	p, shut := t.peers[from], t.shut
	evicted := s.evicted.Load()
	if !evicted {
		delete(t.handshakes, raw)
	}
	t.mu.Unlock()
	if evicted {
		return nil, nil, false
	}
	if p == nil || shut || p.cut.Load() {
		if p == nil {
			t.unknown.Add(1)
		}
		return nil, nil, false
	}
	// The connection replaces the peer's older one before the peer hears
	// it was accepted: a peer that dials again only after that (as a
	// reconnecting peer does) never has its newer connection closed by an
	// older one whose acceptance was slower.
	t.mu.RLock()
	if t.shut {
		t.mu.RUnlock()
		return nil, nil, false
	}
	p.mu.Lock()
	t.mu.RUnlock()
	if p.removed || p.cut.Load() {
		p.mu.Unlock()
		return nil, nil, false
	}
	old := p.in
	p.in = conn
	p.role.Store(uint32(role)) // before its first item is delivered
	p.mu.Unlock()
	if old != nil {
		_ = old.Close() // the peer connected again: the old connection is over
	}
	if _, err := conn.Write(appendAccept(nil, t.opts.MaxItem)); err != nil {
		p.mu.Lock()
		if p.in == conn {
			p.in = nil
		}
		p.mu.Unlock()
		return nil, nil, false
	}
	_ = raw.SetDeadline(time.Time{})
	return conn, p, true
}

// bufferedConn is a connection whose first bytes were read ahead.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// readLoop reads the peer's frames from conn until it ends, pausing while
// the peer's items wait for the handler past the inbound marks.
func (t *Transport) readLoop(p *peer, conn net.Conn) {
	defer t.linkDown(p, conn)
	br := bufio.NewReaderSize(conn, 64<<10)
	var hdr [headerLen]byte
	asm := assembler{maxData: t.opts.MaxItem}
	for {
		if !p.q.waitRoom(t.opts.InboundItems, t.opts.InboundBytes) {
			return
		}
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return
		}
		e, n, err := decodeHeader(&hdr, t.opts.MaxItem)
		over := errors.Is(err, payload.CapacityExceeded)
		if err == nil || over {
			var ok bool
			e, ok, err = asm.next(br, e, n, over)
			if !ok && err == nil {
				continue // a part of an item still coming
			}
		}
		switch {
		case errors.Is(err, errFrame):
			t.malformed.Add(1)
			t.logs.malformed.Warn(t.log, "tcp: closed a peer's connection for a malformed frame", "peer", p.name, "err", err)
			return
		case err != nil:
			return
		case e.refused:
			// An item past the limit: its bytes were read and not kept,
			// and it takes its turn without reaching the handler, so that
			// the peer does not send it again (Stats.Oversized).
			t.logs.oversized.Warn(t.log, "tcp: refused an item past the limit", "peer", p.name,
				"limit", t.opts.MaxItem, "setting", "tcp.Options.MaxItem")
		}
		if p.cut.Load() {
			return
		}
		t.receive(p, &e)
	}
}

// receive hands an envelope from the peer to its session.
func (t *Transport) receive(p *peer, e *Envelope) {
	p.mu.Lock()
	if p.cut.Load() {
		// Checked under p.mu, as Cut makes the link Down under it: an
		// envelope read before the cut must not bring the link up again
		// while what the session sends is dropped.
		p.mu.Unlock()
		return
	}
	p.s.receive(e, &p.o)
	d, took := t.flushLockedTake(p)
	p.mu.Unlock()
	if !took {
		return
	}
	// The item came in while its handler had nothing to do: deliver it
	// here, on the reader.
	if !d.refused {
		p.delivered(d.item)
		t.h.Deliver(p.name, d.item)
	}
	if p.q.inlineDone() {
		return // closing: the session was told what the handler took
	}
	p.mu.Lock()
	p.s.takenThrough(d.epoch, d.seq, &p.o)
	t.flushLocked(p)
	p.mu.Unlock()
}

// Stats counts what the transport did, for tests and metrics.
type Stats struct {
	// Resent is how many items went on the wire again (after a
	// connection ended, or a gap).
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
	// Unknown is how many authenticated connections came from members
	// that are not peers (yet).
	Unknown uint64
	// Refused is how many connections were refused before they carried
	// anything: a failed TLS handshake (no certificate, another CA's, an
	// expired one), a certificate that does not name the member the
	// connection claims, a bad preamble, one meant for another host, too
	// many handshakes at once.
	Refused uint64
	// Malformed is how many connections were closed for a malformed
	// frame.
	Malformed uint64
	// Oversized is how many items past Options.MaxItem were received
	// (their data read and dropped, never kept; the peer's Send refuses
	// them once it knows this host's limit, from its answer to the
	// connection, so this counts only those sent before).
	Oversized uint64
	// Restarts is how many times a peer's frames carried a new
	// incarnation of it: each ended the session with the old one (what
	// it had not taken is Lost), and the handler got Gone then Up. Only
	// the member a connection is authenticated as can claim one of its
	// own.
	Restarts uint64
	// Backlog is how many items Send refused with transport.ErrBacklog:
	// their link held as much as Options.MaxPendingItems or
	// MaxPendingBytes allow of what its peer had not taken.
	Backlog uint64
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
		Lost: sum.lost, Dropped: sum.dropped, Unknown: t.unknown.Load(), Refused: t.refused.Load(), Malformed: t.malformed.Load(),
		Oversized: sum.oversized, Restarts: sum.restarts, Backlog: sum.backlog}
}

// delivered counts an item handed to the handler.
func (p *peer) delivered(it transport.Item) {
	p.recvItems.Add(1)
	p.recvBytes.Add(uint64(len(it.Data)))
}

// LinkStats are one link's counts (Links): what this host sent its peer
// and received from it, and the session's counts for that peer.
type LinkStats struct {
	Peer string
	// SentItems and SentBytes count the items Send accepted for the peer
	// (each once, however often it went on the wire) and their data.
	SentItems, SentBytes uint64
	// ReceivedItems and ReceivedBytes count the items from the peer
	// handed to the handler, and their data.
	ReceivedItems, ReceivedBytes uint64
	// Resent, Duplicates, Gaps and Backlog are Stats' counts of this
	// link alone (since its current session began: a restart of the
	// peer starts them again).
	Resent, Duplicates, Gaps, Backlog uint64
	// Up reports whether the link is up now.
	Up bool
	// RTT is the smoothed round-trip time the kernel measures on the
	// connection this host writes to the peer on (TCP_INFO, Linux only;
	// 0: unknown — no connection, or another system).
	RTT time.Duration
}

// Links returns each current peer's link counts, by peer name.
func (t *Transport) Links() []LinkStats {
	var out []LinkStats
	for _, p := range t.peerList() {
		l := LinkStats{Peer: p.name, SentItems: p.sentItems.Load(), SentBytes: p.sentBytes.Load(),
			ReceivedItems: p.recvItems.Load(), ReceivedBytes: p.recvBytes.Load(), Up: linkState(p.state.Load()) == stUp}
		p.mu.Lock()
		st, conn := p.s.stats, p.out
		p.mu.Unlock()
		l.Resent, l.Duplicates, l.Gaps, l.Backlog = st.resent, st.duplicates, st.gaps, st.backlog
		if conn != nil {
			l.RTT, _ = connRTT(conn) // a connection closed since: unknown
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b LinkStats) int { return strings.Compare(a.Peer, b.Peer) })
	return out
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
