// Package transport is the seam between berth hosts (docs/architecture.md, "Packages", "Order, routing and transports"): the
// only way one host reaches another. A host hands a Transport items for a
// peer — message and reply frames, relocation records, route hints,
// control items — as bytes; the transport delivers them, in order, to the
// peer's Handler, on a goroutine of the transport, and reports what
// happens to the links as events. Nothing crosses as a Go pointer, so the
// same host code runs over the in-process transport (transport/inproc) and
// over a network (transport/tcp).
//
// Invariants every implementation keeps (checked by transport/transporttest):
//
//   - Order: items one host sends to another are delivered in the order
//     they were sent, each at most once, one at a time per sending peer.
//   - Ownership: Send does not keep the caller's Data unless the item is
//     Owned: the caller may reuse it as soon as Send returns (a transport
//     that sends later copies it first), and a refused Send leaves it
//     untouched. The Data a Handler is given (Deliver, Returned) is lent
//     for the call unless the item is Owned: the transport may reuse it
//     once the call returns, so a handler that keeps the bytes copies
//     them (a host copies a frame into its payload pool, which costs no
//     allocation in the steady state).
//   - No silent loss while both hosts run: a link that breaks delivers
//     what was queued on it, and what was sent while it was down, once it
//     is up again; a peer that leaves
//     gracefully first receives everything sent to it before it left
//     (frames it did not take are handed back to their sender through
//     Handler.Returned), and delivers everything it sent before leaving.
//     Only a crash (Close without grace) loses what was on the wire, and
//     the peers get a Gone event.
//   - Delivery never blocks on the sender: Send and Deliver run on
//     different goroutines, and Deliver must not block on a lock or a
//     store call held elsewhere (a host hands such work off).
package transport

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"strings"

	"github.com/berthrt/berth/payload"
)

// Kind says what an item is. The transport treats the kinds alike except
// where Send says otherwise.
type Kind uint8

// The item kinds.
const (
	// Frame is a message or reply frame (package payload's encoding).
	Frame Kind = iota + 1
	// Bounce is a frame going back to the host that first sent it, to be
	// routed afresh there.
	Bounce
	// Record is a relocation record (relocation.AppendRecord).
	Record
	// Hint tells a host where an object runs now.
	Hint
	// Control is a host-to-host request or answer (a relocation asked
	// from another host, and its answer or cancellation, a load report).
	Control
	// Reply is a reply frame to an Ask. Unlike a Frame, a peer that is
	// leaving still takes it: its handlers may still wait for answers.
	Reply
)

// String returns the kind's name.
func (k Kind) String() string {
	switch k {
	case Frame:
		return "frame"
	case Bounce:
		return "bounce"
	case Record:
		return "record"
	case Hint:
		return "hint"
	case Control:
		return "control"
	case Reply:
		return "reply"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Item is one thing on a link.
type Item struct {
	Kind Kind
	Data []byte
	// Owned hands Data over with the item. On Send: the caller gives it
	// up (it must not touch Data after a successful Send), so the
	// transport may keep it rather than copy it. On Deliver and Returned:
	// the handler may keep Data (it is not lent).
	Owned bool
}

// Role is what a peer may do, as its credential says (a TLS certificate's
// identity URI, package tcp). The zero Role is a node's.
type Role uint8

// The roles.
const (
	// RoleNode is a full member: it hosts objects, moves them, and sends
	// every kind of item.
	RoleNode Role = iota
	// RoleGateway is a client of the cluster: it sends messages and asks
	// and takes replies, and hosts no object. A node refuses from it
	// every other item (relocation records, route hints, control items
	// but its flow control and load report), and places nothing on it.
	RoleGateway
)

// String returns the role's name as identity URIs spell it.
func (r Role) String() string {
	switch r {
	case RoleNode:
		return "node"
	case RoleGateway:
		return "gateway"
	}
	return "role(" + strconv.Itoa(int(r)) + ")"
}

// IdentityURI returns the URI SAN that names member name with role in a
// TLS certificate: "urn:berth:node:n1", "urn:berth:gateway:c1". A CA that
// issues certificates for berth's hosts puts it in each certificate's
// URIs; a certificate with such URIs names exactly those members (its DNS
// names then name none, so names added for hostname checks confer no
// identity). A certificate with none names each of its DNS names, as a
// node: what certificates of earlier versions did.
func IdentityURI(role Role, name string) *url.URL {
	return &url.URL{Scheme: "urn", Opaque: identityPrefix + role.String() + ":" + name}
}

const identityPrefix = "berth:"

// ParseIdentityURI returns the role and member name u names, if it is an
// identity URI (IdentityURI) of a known role.
func ParseIdentityURI(u *url.URL) (Role, string, bool) {
	if u == nil || u.Scheme != "urn" || !strings.HasPrefix(u.Opaque, identityPrefix) {
		return 0, "", false
	}
	r, name, ok := strings.Cut(strings.TrimPrefix(u.Opaque, identityPrefix), ":")
	if !ok || name == "" {
		return 0, "", false
	}
	switch r {
	case RoleNode.String():
		return RoleNode, name, true
	case RoleGateway.String():
		return RoleGateway, name, true
	}
	return 0, "", false
}

// Roles is implemented by a transport whose peers have authenticated
// roles (package tcp with TLS). A transport without it gives every peer
// RoleNode.
type Roles interface {
	// Role returns this host's own role, as its credential says.
	Role() Role
	// PeerRole returns the role peer authenticated as on its latest
	// connection (RoleNode while none was made). An item Deliver hands
	// over came on a connection whose role PeerRole reports by then.
	PeerRole(peer string) Role
}

// EventKind is what happened to a link or a peer.
type EventKind uint8

// The event kinds.
const (
	// Up: a peer joined, or a link that was down works again (moves with
	// the peer resend what their phase needs).
	Up EventKind = iota + 1
	// Down: the link to a peer broke; what is queued on it waits.
	Down
	// Leaving: the peer is leaving gracefully; frames to it are refused
	// from now on (ErrPeerLeaving), other items still go.
	Leaving
	// Gone: the peer left (gracefully or not); nothing more arrives from
	// it, and sends to it fail with ErrUnknownPeer.
	Gone
)

// String returns the event kind's name.
func (k EventKind) String() string {
	switch k {
	case Up:
		return "up"
	case Down:
		return "down"
	case Leaving:
		return "leaving"
	case Gone:
		return "gone"
	}
	return "event(" + strconv.Itoa(int(k)) + ")"
}

// Event reports a change of a link or peer to the Handler.
type Event struct {
	Peer string
	Kind EventKind
}

// Handler receives what arrives at a host. The transport calls it on its
// own goroutines: Deliver one item at a time per sending peer, in order;
// Returned and Event from any goroutine the transport chooses. Events and
// deliveries are not ordered with each other, except that a peer's Gone
// comes after the last item delivered from it. None of them may block for
// long: a host hands work that waits (a store call, a lock held by another
// host's traffic) to goroutines of its own. A Handler method must not call
// Close on its own transport.
type Handler interface {
	// Deliver hands over an item from peer from. Its Data is lent until
	// Deliver returns, unless it.Owned.
	Deliver(from string, it Item)
	// Returned hands back (lent, as Deliver) a Frame or Bounce, its Kind
	// kept, that this host sent to peer to and that the peer left
	// (gracefully) without receiving: the host routes it again.
	Returned(to string, it Item)
	// Event reports a link or peer change.
	Event(e Event)
}

// Attacher is what hands a host its Transport: the in-process
// inproc.Network, or a network transport. The host passes itself as the
// Handler.
type Attacher interface {
	// Attach joins the host named name, with h receiving what arrives for
	// it, and returns its end of the links.
	Attach(name string, h Handler) (Transport, error)
}

// Directory is implemented by a Transport whose peers must be told where
// to reach each other (a network transport, such as transport/tcp; an
// in-process one needs no addresses). A host publishes Addr as its
// membership Address and, as it learns of members from the membership,
// tells the transport their addresses (AddPeer) and which have left or
// expired (RemovePeer).
type Directory interface {
	// Addr returns the address peers reach this host at.
	Addr() string
	// AddPeer tells the transport that host name is at addr (again, if
	// its address changed).
	AddPeer(name, addr string) error
	// RemovePeer tells the transport that host name is no longer a peer.
	RemovePeer(name string)
}

// RunAttacher is implemented by an Attacher whose links carry each host's
// run — the lease generation it joins the membership with — as its
// incarnation, so that a peer's incarnation can be checked against the
// membership rather than taken from the bytes. A host attaches with
// AttachRun when its Attacher has it.
type RunAttacher interface {
	// AttachRun is Attach for the run run of host name.
	AttachRun(name string, run uint64, h Handler) (Transport, error)
}

// RunDirectory is implemented by a Directory that learns each peer's run
// from the membership (its lease generation): items from any other run
// of the peer's name are dropped, and a new run reported here ends the
// old run's link as a crash would (the handler gets Gone, then Up when the
// new run is heard from). A host tells it with AddPeerRun instead of
// AddPeer.
type RunDirectory interface {
	// AddPeerRun is AddPeer for run run of host name.
	AddPeerRun(name, addr string, run uint64) error
}

// Transport is one host's end of the links to its peers.
type Transport interface {
	// Local returns this host's name.
	Local() string
	// Send queues it for peer to, after everything sent to to before.
	// Errors (the item then stays the caller's): ErrUnknownPeer (no such
	// peer, or it is gone); ErrPeerLeaving for a Frame or Bounce to a peer
	// that is leaving (the caller routes the message again, elsewhere);
	// ErrBacklog (the link is past its bound: the peer does not take
	// what was sent to it); ErrClosed (this transport is closed). A
	// broken link is not an error: the item waits on it.
	Send(to string, it Item) error
	// WaitRoom waits until the link to peer to has room for a send from
	// outside the hosts' handlers (flow control: sends from handlers,
	// forwards, replies and records never wait), or ctx ends (its error).
	// It returns at once when to is not a peer (the Send then fails), and
	// returns nil at once when there is room even if ctx is done — so a
	// caller may first ask with a done context, for free, and build a
	// context with its deadline only when it must wait.
	WaitRoom(ctx context.Context, to string) error
	// Peers returns the names of the peers this host has links to or can
	// reach now.
	Peers() []string
	// Pending returns how many items wait on this host's links: queued to
	// or from it, or being delivered. A transport may leave advice (Hint
	// and Control items) out of out — a peer that died with advice still
	// unacknowledged would otherwise hold up a stopping host, which waits
	// for out to reach 0, until the membership reports the peer gone;
	// messages and moves (Frame, Bounce, Reply, Record) always count.
	Pending() (in, out int)
	// Leave starts a graceful leave: peers get a Leaving event and refuse
	// to send frames here from now on; everything already queued here is
	// still delivered, and this host may still send.
	Leave()
	// Close ends this host's links. With graceful, what this host sent is
	// delivered first and frames sent to it and not delivered go back to
	// their senders (Returned); without, it is a crash: what was queued is
	// lost. Peers get a Gone event. Close is idempotent and returns once
	// no goroutine of this transport runs for this host.
	Close(graceful bool) error
}

// Errors of Send.
var (
	// ErrUnknownPeer: no such peer, or it is gone.
	ErrUnknownPeer = payload.NewError(payload.Unavailable, "transport.Send", "no such peer (or it is gone)")
	// ErrPeerLeaving: the peer is leaving and takes no more frames.
	ErrPeerLeaving = payload.NewError(payload.Unavailable, "transport.Send", "the peer is leaving")
	// ErrBacklog: the link to the peer holds as much as its bound allows
	// of what the peer has not taken (it does not read, or its handler
	// does not keep up); nothing was queued. Not retryable: routing the
	// item again would name the same peer.
	ErrBacklog = payload.NewError(payload.Unavailable, "transport.Send", "the link to the peer is past its bound (the peer does not take what is sent)")
	// ErrClosed: the transport is closed.
	ErrClosed = payload.NewError(payload.ShuttingDown, "transport.Send", "the transport is closed")
)

// Backlogger is a Transport whose links have a hard bound on what a peer
// has not taken (Send then fails with ErrBacklog). A frame that must not
// be refused once committed to (stamped for its order) is sent only when
// Backlogged says false; the bound keeps headroom above that for frames
// and records, so such a frame is not refused in the race between the two.
type Backlogger interface {
	// Backlogged reports whether the link to peer to is at its bound:
	// items other than frames and records are refused, and a sender
	// should not commit to a frame.
	Backlogged(to string) bool
}

// Reclaimer is a Transport that can close as a crash closes it and hand
// back what its links had not seen their peers take. A host whose run
// ended while the process lived — a gateway its peers saw fail because it
// was paused past its lease — sends those items again on its new run's
// links, so that what it accepted does not die with the old run.
type Reclaimer interface {
	// CloseReclaim closes the transport as Close(false) does and returns,
	// per peer, the items its links had not seen the peer's handler take,
	// in the order they were sent. Items the peer took whose taking it had
	// not reported yet are among them: a caller that sends them again marks
	// them, so that the receiver can tell a repeat. The items are the
	// caller's (Owned). A transport closed already returns nothing.
	CloseReclaim() map[string][]Item
}

// IsRetryable reports whether a send failed because of its peer (unknown,
// gone or leaving): the caller routes the item again.
func IsRetryable(err error) bool {
	return errors.Is(err, ErrUnknownPeer) || errors.Is(err, ErrPeerLeaving)
}
