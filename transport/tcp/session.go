package tcp

import (
	"bytes"

	"github.com/berthrt/berth/internal/fifo"
	"github.com/berthrt/berth/transport"
)

// This file is the session layer: a pure machine per pair of hosts (no
// goroutines, no clock, no I/O), driven by driver.go. Its inputs are
// items to send (send), envelopes received (receive), the handler's
// progress (taken), a broken connection (connDown), ticks (tick) and this
// host's leave and close; its outputs, appended to an output, are the
// envelopes to put on the wire, in order, and what to hand to the handler
// (items, returned items, events), in order.
//
// Numbering: each session numbers the items it sends from 1 (Envelope.seq).
// Every envelope carries two cumulative acknowledgements of the other
// direction: ack (received, in order, through) and taken (the handler took
// through). The sender keeps each item until it is taken: for flow control
// (WaitRoom), and because a peer that closes gracefully hands back, through
// its final taken, the frames it did not take. It resends from ack+1 (go
// back N): when the link comes up again, when the receiver reports a gap,
// and when ack has not moved for resendTicks (the driver sets it out of
// reach: a TCP connection loses nothing while it lasts, and a slow handler
// is back-pressure, not loss). The receiver accepts only the
// next number: it drops duplicates, and drops an item after a gap (reporting
// the gap once).
//
// Acknowledgements are batched: they ride on every envelope, and an
// envelope of their own (a hello) goes out only after ackEvery items
// received or taken, on a tick when they changed, and at once for a bye.
//
// Incarnations: a peer whose envelopes carry a higher incarnation than the
// one known restarted: what it had not taken of the old session is lost (a
// crash), and the handler gets Gone then Up. Envelopes of an older
// incarnation, or meant for an older incarnation of this host, are dropped.
// Once the membership told the peer's run (learnRun: its lease
// generation), only envelopes of that incarnation are taken — another,
// higher or lower, is dropped (a forgery, or a new run the membership has
// yet to report) — and the peer restarted when the membership reports a
// new run, never because the bytes say so.

// Envelope ops.
const (
	opItem   = 1 // a numbered item of the link
	opBye    = 2 // numbered, the sender's last: it closes gracefully; its taken is final
	opHello  = 3 // acknowledgements and flags only (also the heartbeat)
	opCrash  = 4 // the sender closes without grace
	opByeAck = 5 // the answer to a crash: the sender of the crash may stop
	opPart   = 6 // a further part of an item's data (its number: the item's)
)

// Envelope flags.
const (
	flagLeaving = 1 << 0 // the sender is leaving
	flagGap     = 1 << 1 // the sender is missing the receiver's items after ack
	flagMore    = 1 << 2 // of an item or a part: more of its data follows in parts
)

// linkState is what a session knows of its peer.
type linkState uint8

const (
	stNew  linkState = iota // never heard from this incarnation of the peer
	stUp                    // heard lately
	stDown                  // the connection broke, or silence for downTicks
	stGone                  // the peer left, crashed or was removed
)

func (s linkState) String() string {
	return [...]string{"new", "up", "down", "gone"}[s]
}

// sessionConfig is what every session of a host shares. Durations are in
// ticks.
type sessionConfig struct {
	local          string
	inc            uint64 // this host's incarnation
	ackEvery       uint64 // an ack of its own after this many items received or taken
	heartbeatTicks int64  // a hello after this many ticks without sending
	downTicks      int64  // Down after this many ticks without hearing from the peer
	resendTicks    int64  // go back after this many ticks without progress of ack
	highItems      int    // blocked above this many items not taken ...
	highBytes      int    // ... or bytes; open again at half of both
	// maxItems and maxBytes are the link's hard bound on items not taken:
	// past it Send refuses (ErrBacklog), frames and records only past
	// twice it. 0: no bound.
	maxItems, maxBytes int
}

// delivery is one handler call, for the peer's delivery queue.
type delivery struct {
	what  deliveryKind
	epoch uint32 // of an item: the session epoch it was received in
	seq   uint64 // of an item
	item  transport.Item
	// refused: an item past this host's limit, its data never read; it
	// takes its turn in order but goes to no handler.
	refused bool
	event   transport.EventKind
}

type deliveryKind uint8

const (
	dItem     deliveryKind = iota + 1 // Deliver
	dReturned                         // Returned
	dEvent                            // Event
)

// output collects what one input to a session produced. The driver empties
// it after each input and reuses it.
type output struct {
	send    []Envelope
	deliver []delivery
}

func (o *output) reset() {
	clear(o.send)
	o.send = o.send[:0]
	clear(o.deliver)
	o.deliver = o.deliver[:0]
}

func (o *output) event(k transport.EventKind) {
	o.deliver = append(o.deliver, delivery{what: dEvent, event: k})
}

// outItem is an item sent and not yet taken by the peer.
type outItem struct {
	seq  uint64
	op   uint32 // opItem or opBye
	kind transport.Kind
	data []byte
}

// sessionStats counts what a session did that no output shows.
type sessionStats struct {
	resent     uint64 // items put on the wire again
	duplicates uint64 // items received again, dropped
	gaps       uint64 // items received after a gap, dropped
	stale      uint64 // envelopes of another incarnation, dropped
	lost       uint64 // items the peer had not taken when it crashed, restarted or was removed
	dropped    uint64 // non-frame items a gracefully closed peer did not take
	oversized  uint64 // items past this host's limit, received and not delivered
	restarts   uint64 // new incarnations of the peer seen (each ends a session)
	backlog    uint64 // items refused: the link was past its bound (ErrBacklog)
}

// add adds o's counts to s.
func (s *sessionStats) add(o sessionStats) {
	s.resent += o.resent
	s.duplicates += o.duplicates
	s.gaps += o.gaps
	s.stale += o.stale
	s.lost += o.lost
	s.dropped += o.dropped
	s.oversized += o.oversized
	s.restarts += o.restarts
	s.backlog += o.backlog
}

// session is the machine of one pair: this host and peer. Not safe for
// concurrent use (the driver holds the peer's lock).
type session struct {
	cfg   *sessionConfig
	state linkState
	stats sessionStats

	peerInc     uint64 // 0: not known yet
	run         uint64 // the peer's run as the membership reports it (learnRun); 0: not known
	epoch       uint32 // grows when the peer restarts: older deliveries' progress is ignored
	peerLeaving bool
	leaving     bool // this host is leaving
	closing     bool // this host closed: it takes nothing more
	crashAcked  bool // the peer answered this host's crash
	now         int64

	// Outbound.
	nextSeq    uint64    // the next item's number
	out        []outItem // not taken by the peer, in order, from outHead
	outAdvice  int       // items of out[outHead:] that are advice (Hint, Control): pendingMessages leaves them out
	outHead    int
	outBytes   int
	acked      uint64 // the peer received through
	peerTaken  uint64 // the peer took through
	sent       uint64 // the highest number put on the wire since the last go-back
	progressAt int64  // the tick acked last moved (or sending started after idle)
	goBackAt   int64  // the tick of the last go-back
	goBackFrom uint64 // acked at the last go-back
	lastSendAt int64
	blocked    bool   // over the high mark, until under the low mark
	byeSeq     uint64 // this host's bye, once closed gracefully

	// Inbound.
	recvd     uint64 // received, in order, through
	taken     uint64 // the handler took through
	ackedSent uint64 // recvd as last told to the peer
	takenSent uint64 // taken as last told to the peer
	gapSent   bool   // the current gap was reported
	heardAt   int64
}

func newSession(cfg *sessionConfig) *session {
	return &session{cfg: cfg, nextSeq: 1, goBackAt: -1 << 62}
}

// caughtUp reports whether the peer received every item sent before the
// last one.
func (s *session) caughtUp() bool { return s.acked+1 >= s.sent }

// pendingOut returns how many items the peer has not taken (the bye not
// counted).
// isAdvice reports whether it is advice — a hint or a control item — that
// a host need not wait for when it stops: it carries no message and no
// part of a move.
func isAdvice(it outItem) bool {
	return it.op == opItem && (it.kind == transport.Hint || it.kind == transport.Control)
}

// pendingMessages is pendingOut without the advice: the items a stopping
// host waits for (Transport.Pending).
func (s *session) pendingMessages() int { return s.pendingOut() - s.outAdvice }

func (s *session) pendingOut() int {
	n := len(s.out) - s.outHead
	if s.byeSeq != 0 && n > 0 && s.out[len(s.out)-1].op == opBye {
		n--
	}
	return n
}

// envelope adds an envelope to the peer with this host's
// acknowledgements and flags, and records that they were told.
func (s *session) envelope(op uint32, o *output) *Envelope {
	o.send = append(o.send, s.told(op))
	return &o.send[len(o.send)-1] // valid until the next envelope is added
}

// told returns an envelope of op with this host's acknowledgements and
// flags as they are now, and records that they were told.
func (s *session) told(op uint32) Envelope {
	e := Envelope{FromInc: s.cfg.inc, ToInc: s.peerInc, Op: op, Ack: s.recvd, Taken: s.taken}
	if s.leaving {
		e.Flags |= flagLeaving
	}
	s.ackedSent, s.takenSent, s.lastSendAt = s.recvd, s.taken, s.now
	return e
}

// between returns the hello the writer puts between two parts of a large
// item (ok false: none, the peer is gone): this host's acknowledgements
// and flags as they are now. The peer hears this host and learns what it
// received and took while the item is written, so its own sends are not
// held for the item's length, nor is this host taken to be silent. It
// bypasses the write queue, where hellos wait behind the item; the ones
// there still go, and their older acknowledgements are ignored.
func (s *session) between() (Envelope, bool) {
	if s.state == stGone {
		return Envelope{}, false
	}
	return s.told(opHello), true
}

func (s *session) hello(o *output) *Envelope { return s.envelope(opHello, o) }

func (s *session) emit(it *outItem, o *output) {
	e := s.envelope(it.op, o)
	e.Seq, e.Kind, e.Data = it.seq, uint8(it.kind), it.data
	if s.acked == s.sent {
		s.progressAt = s.now // nothing was outstanding: the resend clock starts now
	}
	s.sent = max(s.sent, it.seq)
}

// send queues it (copying its Data unless Owned) and puts it on the wire if
// the link is up. Errors as transport.Transport.Send's.
func (s *session) send(it transport.Item, o *output) error {
	switch {
	case s.closing:
		return transport.ErrClosed
	case s.state == stGone:
		return transport.ErrUnknownPeer
	case s.peerLeaving && (it.Kind == transport.Frame || it.Kind == transport.Bounce):
		return transport.ErrPeerLeaving
	case s.refuses(it.Kind, len(it.Data)):
		s.stats.backlog++
		return transport.ErrBacklog
	}
	data := it.Data
	if !it.Owned {
		data = bytes.Clone(it.Data)
		if data == nil {
			data = []byte{}
		}
	}
	s.push(outItem{seq: s.nextSeq, op: opItem, kind: it.Kind, data: data}, o)
	return nil
}

// backlogged reports whether the link is at its hard bound: items other
// than frames and records are refused, and a sender should not commit to
// a frame (transport.Backlogger).
func (s *session) backlogged() bool {
	return s.cfg.maxItems > 0 && (s.pendingOut() >= s.cfg.maxItems || s.outBytes >= s.cfg.maxBytes)
}

// refuses reports whether an item of kind k and n bytes is past the hard
// bound. Frames and records have an allowance as large again: a frame a
// sender committed to (stamped for its order) when the link was under
// the bound, a forward, a bounce's way back is not refused in the race
// with other senders, nor is a move's record (bounded by the moves a
// host runs). Anything goes when nothing is pending, however large.
func (s *session) refuses(k transport.Kind, n int) bool {
	p := s.pendingOut()
	if s.cfg.maxItems == 0 || p == 0 {
		return false
	}
	f := 1
	if k == transport.Frame || k == transport.Record {
		f = 2
	}
	return p >= f*s.cfg.maxItems || s.outBytes+n > f*s.cfg.maxBytes
}

func (s *session) push(it outItem, o *output) {
	s.nextSeq++
	s.out = append(s.out, it)
	s.outBytes += len(it.data)
	if isAdvice(it) {
		s.outAdvice++
	}
	s.updateBlocked()
	if s.state == stUp {
		s.emit(&s.out[len(s.out)-1], o)
	}
}

func (s *session) updateBlocked() {
	n := len(s.out) - s.outHead
	switch {
	case s.state == stGone || s.closing:
		s.blocked = false
	case !s.blocked && (n > s.cfg.highItems || s.outBytes > s.cfg.highBytes):
		s.blocked = true
	case s.blocked && n <= s.cfg.highItems/2 && s.outBytes <= s.cfg.highBytes/2:
		s.blocked = false
	}
}

// goBack puts every item the peer has not received on the wire again.
func (s *session) goBack(o *output) {
	s.goBackAt, s.progressAt, s.goBackFrom = s.now, s.now, s.acked
	before := s.sent
	s.sent = s.acked
	for i := s.outHead; i < len(s.out); i++ {
		if it := &s.out[i]; it.seq > s.acked {
			if it.seq <= before {
				s.stats.resent++
			}
			s.emit(it, o)
		}
	}
}

// dropOut forgets every item not taken; lost says they count as lost.
func (s *session) dropOut(lost bool) {
	if lost {
		s.stats.lost += uint64(s.pendingOut())
	}
	clear(s.out)
	s.out, s.outHead, s.outBytes, s.outAdvice = s.out[:0], 0, 0, 0
	s.updateBlocked()
}

// gone ends the session with the peer: the handler gets Gone (after what is
// queued for it).
func (s *session) gone(o *output) {
	if s.state != stGone {
		s.state = stGone
		o.event(transport.Gone)
	}
	s.updateBlocked()
}

// learnRun takes the peer's run as the membership reports it (its lease
// generation): from now on only envelopes of that incarnation are taken.
// A run other than the incarnation the session has is a new run of the
// peer's name: the old session is over, as after a crash (it reports
// true).
func (s *session) learnRun(run uint64, o *output) (restarted bool) {
	if run == 0 || run == s.run {
		return false
	}
	s.run = run
	if s.peerInc == 0 || s.peerInc == run {
		return false
	}
	s.stats.restarts++
	s.dropOut(true)
	s.gone(o)
	s.reset(run)
	return true
}

// reset starts a new session with a new incarnation of the peer.
func (s *session) reset(inc uint64) {
	s.peerInc = inc
	s.epoch++
	s.state = stNew
	s.peerLeaving = false
	s.crashAcked = false
	s.nextSeq, s.acked, s.peerTaken, s.sent = 1, 0, 0, 0
	s.recvd, s.taken, s.ackedSent, s.takenSent, s.gapSent = 0, 0, 0, 0, false
	s.byeSeq = 0
	s.goBackAt = -1 << 62
}

// receive handles an envelope from the peer.
func (s *session) receive(e *Envelope, o *output) {
	if s.run != 0 && e.FromInc != s.run || e.ToInc != 0 && e.ToInc != s.cfg.inc || e.FromInc < s.peerInc {
		// Of another run of the peer than the membership's, meant for an
		// earlier run of this host, or from an earlier run of the peer.
		s.stats.stale++
		return
	}
	switch {
	case s.peerInc == 0:
		s.peerInc = e.FromInc // first contact
	case e.FromInc > s.peerInc:
		// The peer restarted: the old session is over, as after a crash.
		s.stats.restarts++
		s.dropOut(true)
		s.gone(o)
		s.reset(e.FromInc)
	}
	if s.state == stGone {
		s.stats.stale++ // the peer left; this is late
		return
	}
	s.heardAt = s.now
	switch e.Op {
	case opCrash:
		s.dropOut(true)
		s.gone(o)
		s.envelope(opByeAck, o)
		return
	case opByeAck:
		s.crashAcked = true
		return
	}
	s.acks(e, o)
	if s.state != stUp {
		s.state = stUp
		if !s.closing {
			o.event(transport.Up)
		}
		s.goBack(o)
	}
	if e.Flags&flagLeaving != 0 && !s.peerLeaving {
		s.peerLeaving = true
		if !s.closing {
			o.event(transport.Leaving)
		}
	}
	if e.Op != opItem && e.Op != opBye {
		return
	}
	switch {
	case e.Seq <= s.recvd:
		s.stats.duplicates++
		return
	case e.Seq > s.recvd+1:
		s.stats.gaps++
		if !s.gapSent {
			s.gapSent = true
			s.hello(o).Flags |= flagGap
		}
		return
	}
	s.recvd, s.gapSent = e.Seq, false
	if e.Op == opBye {
		// The peer's last item: the items of this host it did not take
		// (after its final taken, which acks has applied) go back, frames
		// to the handler, and the ack goes out at once (the peer's Close
		// waits for it).
		for i := s.outHead; i < len(s.out); i++ {
			it := &s.out[i]
			if it.kind == transport.Frame || it.kind == transport.Bounce {
				if !s.closing {
					o.deliver = append(o.deliver, delivery{what: dReturned, item: transport.Item{Kind: it.kind, Data: it.data, Owned: true}})
				}
			} else if it.op == opItem {
				s.stats.dropped++
			}
		}
		s.dropOut(false)
		s.hello(o)
		s.gone(o)
		return
	}
	if e.refused {
		s.stats.oversized++
	}
	if !s.closing {
		o.deliver = append(o.deliver, delivery{what: dItem, epoch: s.epoch, seq: e.Seq, refused: e.refused,
			item: transport.Item{Kind: transport.Kind(e.Kind), Data: e.Data, Owned: true}})
	}
	if s.recvd-s.ackedSent >= s.cfg.ackEvery {
		s.hello(o)
	}
}

// acks applies the peer's acknowledgements of this host's items.
func (s *session) acks(e *Envelope, o *output) {
	last := s.nextSeq - 1
	if a := min(e.Ack, last); a > s.acked {
		s.acked, s.progressAt = a, s.now
		s.sent = max(s.sent, a)
	}
	if t := min(e.Taken, last); t > s.peerTaken {
		s.peerTaken = t
		for s.outHead < len(s.out) && s.out[s.outHead].seq <= t {
			s.outBytes -= len(s.out[s.outHead].data)
			if isAdvice(s.out[s.outHead]) {
				s.outAdvice--
			}
			s.out[s.outHead] = outItem{}
			s.outHead++
		}
		s.out, s.outHead = fifo.Compact(s.out, s.outHead)
		s.updateBlocked()
	}
	// A gap report goes back at once, unless a go-back from the same point
	// is under way (its items may still be on the wire).
	if e.Flags&flagGap != 0 && s.state == stUp && e.Ack == s.acked && s.acked < s.sent &&
		(s.goBackFrom != s.acked || s.now-s.goBackAt >= s.cfg.resendTicks) {
		s.goBack(o)
	}
}

// takenThrough reports that the handler took the items of epoch through
// seq.
func (s *session) takenThrough(epoch uint32, seq uint64, o *output) {
	if epoch != s.epoch || seq <= s.taken || s.closing {
		return
	}
	s.taken = seq
	if s.state == stUp && s.taken-s.takenSent >= s.cfg.ackEvery {
		s.hello(o)
	}
}

// connDown reports that the connection to the peer broke (what was on it
// may be lost): the link is down until the peer is heard from again, and
// then everything not received goes again.
func (s *session) connDown(o *output) {
	if s.state == stUp {
		s.state = stDown
		if !s.closing {
			o.event(transport.Down)
		}
	}
}

// tick advances the session's clock by one tick: Down after silence,
// resends when ack stalls, acks that changed, heartbeats.
func (s *session) tick(o *output) {
	s.now++
	if s.state == stGone {
		return
	}
	if s.state == stUp && s.now-s.heardAt >= s.cfg.downTicks {
		s.connDown(o)
	}
	if s.state == stUp && s.acked < s.sent && s.now-s.progressAt >= s.cfg.resendTicks && s.now-s.goBackAt >= s.cfg.resendTicks {
		s.goBack(o)
	}
	if s.recvd != s.ackedSent || s.taken != s.takenSent || s.now-s.lastSendAt >= s.cfg.heartbeatTicks {
		s.hello(o)
	}
}

// leave tells the peer that this host is leaving.
func (s *session) leave(o *output) {
	s.leaving = true
	if s.state != stGone {
		s.hello(o)
	}
}

// close closes this host's side: with grace, a bye follows the items sent,
// carrying taken (what the handler took of epoch, through seq) as final;
// without, a crash. From now on nothing goes to the handler.
func (s *session) close(graceful bool, epoch uint32, seq uint64, o *output) {
	if s.closing {
		return
	}
	if epoch == s.epoch && seq > s.taken {
		s.taken = seq
	}
	s.closing = true
	if s.state == stGone {
		return
	}
	if graceful {
		s.byeSeq = s.nextSeq
		s.push(outItem{seq: s.nextSeq, op: opBye}, o)
		return
	}
	s.dropOut(true)
	s.envelope(opCrash, o)
}

// reclaim takes the items the peer has not taken out of the session, in
// order, for a host that closes to send them again on a new run's links
// (Transport.CloseReclaim): they are no longer the session's, nor lost.
// An item the peer took since its last report is among them. Their data
// stay on the wire until the connection ends: the caller hands them on
// only after that.
func (s *session) reclaim() []transport.Item {
	if s.closing || s.state == stGone {
		return nil
	}
	var out []transport.Item
	for _, it := range s.out[s.outHead:] {
		if it.op == opItem {
			out = append(out, transport.Item{Kind: it.kind, Data: it.data, Owned: true})
		}
	}
	s.dropOut(false)
	return out
}

// closed reports whether this host's close is done with the peer: the peer
// received the bye (or answered the crash), or is gone, or is not reached
// and nothing but the bye and advice waits for it (a peer that died with
// advice unacknowledged holds no graceful close up).
func (s *session) closed() bool {
	switch {
	case s.state == stGone:
		return true
	case s.byeSeq != 0:
		return s.acked >= s.byeSeq || (s.state != stUp && s.pendingMessages() == 0)
	default:
		return s.crashAcked || s.state != stUp
	}
}

// remove ends the session because the peer was removed from the
// membership: what it had not taken is lost.
func (s *session) remove(o *output) {
	s.dropOut(true)
	s.gone(o)
}
