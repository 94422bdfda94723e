package actor

import (
	"context"
	"errors"
	"fmt"

	"github.com/berthrt/berth/payload"
)

// The error kinds of docs/architecture.md, "Errors", the same values as in package payload, so
// errors.Is(err, actor.Unavailable) and errors.Is(err, payload.Unavailable)
// are the same test.
const (
	NotFound         = payload.NotFound
	AlreadyExists    = payload.AlreadyExists
	TypeMismatch     = payload.TypeMismatch
	NotConfigured    = payload.NotConfigured
	Rejected         = payload.Rejected
	Unavailable      = payload.Unavailable
	CapacityExceeded = payload.CapacityExceeded
	DeadlineExceeded = payload.DeadlineExceeded
	ShuttingDown     = payload.ShuttingDown
	ProtocolError    = payload.ProtocolError
	InvalidOperation = payload.InvalidOperation
	DataLost         = payload.DataLost
	InternalFailure  = payload.InternalFailure
)

// Errors returned by the send calls; each names the calls that return it.
var (
	// ErrShuttingDown: Tell, Ask, Publish, AskChannel on a host that is not
	// running (not started, stopping or stopped), and requests cut short by
	// Stop or Close.
	ErrShuttingDown = payload.NewError(payload.ShuttingDown, "actor", "host is not running")
	// ErrLeaseLost: Host.Err of a host that closed itself because its run
	// is over: the Location Store says a newer run of its name holds the
	// lease (it was restarted elsewhere), or the membership names another
	// live run of its name when the host joins again. (A host whose run
	// the membership expired — its peers saw it fail, after the process
	// was paused or cut off for longer than the lease — drops that run's
	// objects and joins again as a new run: Stats.Rejoins.) A slow or
	// unreachable store, or a starved process, never
	// ends a run: the host pauses in jeopardy and resumes (Config.LeaseTTL).
	// Other hosts may own its objects by now; a program that wants the host
	// back starts a new one (a new run).
	ErrLeaseLost = payload.NewError(payload.Unavailable, "actor.Host", "the host's run is over (a newer run holds its lease, or the membership ended this run); the host closed itself")
	// ErrTooManyRequests: Ask and AskChannel when MaxRequestsInFlight
	// requests are already waiting for replies.
	ErrTooManyRequests = payload.NewError(payload.CapacityExceeded, "actor.Ask", "too many requests in flight")
	// ErrReentrant: Ask from a handler to its own owner, which could never
	// be answered (the owner runs one turn at a time).
	ErrReentrant = payload.NewError(payload.InvalidOperation, "actor.Ask", "a handler asked its own owner")
	// ErrSendTimeout: Tell, Ask and Publish waited SendTimeout for room in
	// the owner's lane. It matches context.DeadlineExceeded too.
	ErrSendTimeout error = &payload.Error{Kind: payload.DeadlineExceeded, Op: "actor",
		Detail: "timed out waiting for room in the owner's queue or on the link to its host", Err: context.DeadlineExceeded}
	// ErrNotHandedOn: Tell, Ask and Publish waited SendTimeout for the
	// object's host, which is leaving (a drain or Stop) or unreachable, to
	// hand the object on, in vain. Nothing was sent: the message will not
	// run, and sending it again is safe. It is of kind Unavailable.
	ErrNotHandedOn = payload.NewError(payload.Unavailable, "actor",
		"the object's host is leaving or unreachable and did not hand it on within SendTimeout: nothing was sent, send again")
	// ErrPushedBack: Tell, Ask and Publish from outside the handlers waited
	// SendTimeout while the object's reorder buffer pushed back on this
	// host (Config.ReorderBound: it holds that many of this host's newer
	// messages for an older one still on its way). Nothing was stamped or
	// sent: the message will not run, and sending it again is safe. It
	// matches context.DeadlineExceeded too.
	ErrPushedBack error = &payload.Error{Kind: payload.DeadlineExceeded, Op: "actor",
		Detail: "the object's reorder buffer pushed back on this host's sends: nothing was sent, send again", Err: context.DeadlineExceeded}
	// ErrPaused: Tell, Ask and Publish from outside the handlers on a host
	// in jeopardy (its lease passed its deadline before a renewal was
	// answered: the Location Store away or slow, the process starved)
	// found every job permit held — by messages its paused objects cannot
	// run yet — and waited SendTimeout for one (from when the wait began,
	// or, for a wait that began while the host was live, from when its
	// lease passed the deadline). Nothing was sent: send
	// again once the host resumes (Stats.Jeopardy). Of kind Unavailable.
	ErrPaused = payload.NewError(payload.Unavailable, "actor",
		"the host is paused (jeopardy: its lease is not renewed yet) and every job permit is held: nothing was sent")
	// ErrRejoined: Ask from a host owning no object (a gateway) whose run
	// the membership ended (it was paused past its lease, and its peers saw
	// it fail), and whose request it had handed to another host: the host joined again as a
	// new run, and the reply would have gone to the old one. (An Ask whose
	// message the old run's link still held is sent again and answered;
	// its owner answers ErrRejoined if it had taken it from the old run.)
	// The request may have run. Of kind Unavailable.
	ErrRejoined = payload.NewError(payload.Unavailable, "actor",
		"this gateway's run ended (it was paused past its lease) and it joined again as a new run: the request had been handed on, and may have run")
	// ErrPeerFailed: Ask whose request this host had handed to another
	// host (the object ran there, or was on its way there) when that
	// host was declared failed: the membership reported its lease
	// expired, its leave without handing its work on, or a new run of
	// its name, or the Location Store showed the lease of a peer whose
	// link broke run out (docs/architecture.md, "Submit and
	// completion"). The Ask ends as soon as this host knows that fact,
	// not at its deadline. The request may have run — on that host, or
	// on a host it forwarded it to — and what it did may stand: asking
	// again may run it twice. Tell and Ask from outside the handlers that
	// were waiting for credit or room on the link to that host get an
	// error that wraps it (errors.Is matches) and says that nothing was
	// sent. Of kind Unavailable; Stats.RequestsFailedWithPeer counts the
	// requests.
	ErrPeerFailed = payload.NewError(payload.Unavailable, "actor", "the object's host failed")
	// ErrRequestTimeout: Ask and AskChannel got no reply by the deadline
	// (ctx's, the handled message's for an Ask from a handler, or
	// RequestTimeout). It matches context.DeadlineExceeded too.
	ErrRequestTimeout error = &payload.Error{Kind: payload.DeadlineExceeded, Op: "actor.Ask",
		Detail: "no reply before the deadline", Err: context.DeadlineExceeded}
)

// Errors of Relocate and Drain.
var (
	// ErrNotLocal: the host asked to move an object has no owner for it
	// (it moved away or deactivated meanwhile). Relocate looks the object
	// up again when it gets this from the owner's host it asked.
	ErrNotLocal = payload.NewError(payload.NotFound, "actor.Host.Relocate", "the object has no owner on this host")
	// ErrNoNetwork: Relocate or Drain on a host without a transport.
	ErrNoNetwork = payload.NewError(payload.NotConfigured, "actor.Host.Relocate", "the host has no transport (Config.Transport)")
	// ErrAlreadyThere: Relocate to the host the object already lives on
	// (an InvalidOperation that wraps it names the object and the host).
	ErrAlreadyThere = errors.New("nothing to move")
	// ErrMoveInProgress: Relocate of an object that is already moving.
	ErrMoveInProgress = payload.NewError(payload.InvalidOperation, "actor.Host.Relocate", "the object is already moving")
)

// ErrNowhereToDrain: Drain found objects of a kind that relocates and no
// other host serving that kind.
var ErrNowhereToDrain = errors.New("nowhere to drain to")

// ErrNotActive: Locate found no live owner — the object was never
// activated, was deactivated, or its owner host is gone. Its next message
// activates it.
var ErrNotActive = payload.NewError(payload.NotFound, "actor.Host.Locate", "the object is not active on any host")

// ErrPeerBacklog: the object's host has too much of this host's traffic
// already. Either it refused an Ask because it kept Config.PeerInbound of
// the messages from this host's link (its objects did not keep up, or its
// look-ups were slow), or this host did not send a message because the
// link to that host holds as much as its bound allows of what the host
// has not taken (it does not read, or is cut off: the transport's hard
// bound, such as tcp.Options.MaxPendingItems). The message did not run;
// sending it again later is safe. Sends from outside the handlers wait
// for credit and room before either bound is reached (then get
// ErrSendTimeout), so a host that sees it is sending from handlers faster
// than the other host takes their messages.
var ErrPeerBacklog = payload.NewError(payload.Unavailable, "actor",
	"the object's host has too many messages from this host already: the message did not run")

// ErrTooManyRelocations: Relocate asked of another host (the object's
// owner) while that host runs 256 relocations asked by this one already.
// The object stays where it is; asking again later is safe.
var ErrTooManyRelocations = payload.NewError(payload.CapacityExceeded, "actor.Host.Relocate",
	"the object's host runs too many relocations asked by this host already")

// peerFailed is the error of the requests handed to host when it was
// declared failed (requestTable.failRun): ErrPeerFailed, with the host's
// name.
func peerFailed(host string) error {
	return fmt.Errorf("host %s failed before it answered (the request may have run): %w", host, ErrPeerFailed)
}

// peerFailedUnsent is the error of a send from outside the handlers that
// was waiting for credit or room on the link to host when host was
// declared failed (peers.waitRoom): nothing was sent.
func peerFailedUnsent(host string) error {
	return fmt.Errorf("host %s failed while the send waited for room on its link (nothing was sent): %w", host, ErrPeerFailed)
}

// ctxErr is the error of a send whose context is done: of kind
// DeadlineExceeded (the sender's time ran out: its deadline passed or it
// gave up), wrapping ctx's error, so that errors.Is matches
// context.DeadlineExceeded or context.Canceled as well — the conventions
// of net/http and pgx.
func ctxErr(ctx context.Context) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	return &payload.Error{Kind: payload.DeadlineExceeded, Op: "actor", Err: err}
}
