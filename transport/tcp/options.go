package tcp

import (
	"log/slog"
	"time"

	"github.com/berthrt/berth/payload"
)

// The options part (Options): what a transport is configured with, and
// its defaults.
//
// Owns: Options, its defaults (Default*), normalize, and the conversion
// of durations into the session's ticks (ticks, noResend).
// Lock: none (pure).
// May call: nothing but payload's errors.
// Invariants: normalize returns options with every default filled in, or
// an error of kind payload.InvalidOperation naming the bad field: exactly
// one of TLS and Insecure is set, nothing is negative, MaxItem fits a
// frame's length, and the hard bound is at least the high marks (and
// MaxItem).

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
