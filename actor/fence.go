package actor

import (
	"encoding/binary"
	"sync"
	"sync/atomic"

	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/relocation"
)

// Order across a route switch (beyond the reference spec, which leaves it
// unordered).
//
// A host that sends messages for an object to host Y and then switches to
// another place Z (a hint or a store lookup said the object moved) could
// have its newer messages, sent straight to Z, overtake older ones still
// travelling Y → Z by Message Follow. So on a switch away from Y the
// sending host first sends a fence along the old route, and marks the
// messages it sends on the new route with the fence's number for a while
// (FollowDuration). The new owner holds a sender's marked messages until
// that sender's fence has arrived through Message Follow — after every
// older message of the sender — or until a host on the old route crashed or
// the hold outlives FollowDuration. Holds are bounded (maxFenceHold per
// sender and object) and counted (Stats.HeldForFence).
//
// What keeps this true:
//   - A sending host is many goroutines: a message is noted (noteSend) and
//     put on its link in one step under the sent table's lock, so a fence
//     that another goroutine sends on a later switch never passes it.
//   - A fence is recorded as arrived only where the object runs; on its way
//     through other hosts it follows the object without being recorded,
//     since older messages may come back there by a longer way round.
//   - Messages released from a hold are delivered in order (fenceTable.out);
//     anything newer of the same sender (or off the same link) that this
//     host would send on meanwhile queues behind them (queueBehind).
//   - A host that leaves gracefully first has every peer fence the objects
//     it last sent there (fenceRoutesTo) and passes those fences on before
//     it goes; a peer that can no longer send it a fence opens none.

// maxFenceHold bounds the messages held for one sender's fence; past it
// they are released (and the event logged).
const maxFenceHold = 10_000

// fenceMsg travels along the old route: "every message sender sent for the
// object before fence seq is ahead of me".
type fenceMsg struct {
	sender string
	seq    uint64
}

// sentEntry is where this host last sent an object's messages.
type sentEntry struct {
	dest  string // a host name; this host's own name for a local owner
	seq   uint64 // the last fence number used for the object
	via   string // the old route of that fence
	until int64  // nanotime until which messages carry the fence
	last  int64  // nanotime of the last send
}

type sentTable struct {
	mu sync.Mutex
	m  map[relocation.Object]sentEntry
}

// noteSend records that this host sends a message for obj to dest and
// returns the fence the message must carry (0: none) and its old route.
// On a switch away from another host it sends that host a fence first. If
// that host takes no fence any more (it left, or is about to), no new
// fence is opened: it passed on, before it sealed, a fence for everything
// this host sent it (fenceRoutesTo), or it crashed and what it held is
// lost; the message carries the last fence while that lasts.
func (h *Host) noteSend(obj relocation.Object, dest string) (uint64, string) {
	if h.net == nil {
		return 0, ""
	}
	h.sent.mu.Lock()
	defer h.sent.mu.Unlock()
	return h.noteSendLocked(obj, dest)
}

// noteSendLocked is noteSend with h.sent.mu held. A message sent to another
// host goes on the link before the lock is let go: a fence that another
// goroutine of this host sends on a later switch must not pass it.
func (h *Host) noteSendLocked(obj relocation.Object, dest string) (uint64, string) {
	now := nanotime()
	if h.sent.m == nil {
		h.sent.m = map[relocation.Object]sentEntry{}
	}
	e := h.sent.m[obj]
	if e.dest != dest && e.dest != "" && e.dest != h.name {
		// Under the lock, so no message of ours for obj overtakes it.
		if h.sendFence(e.dest, obj, fenceMsg{sender: h.name, seq: e.seq + 1}) {
			e.seq++
			e.via = e.dest
			e.until = now + int64(h.cfg.FollowDuration)
		}
	}
	e.dest, e.last = dest, now
	h.sent.m[obj] = e
	if now < e.until {
		return e.seq, e.via
	}
	return 0, ""
}

// sendFence puts fence f for obj on the link to host; false if that link
// does not take it.
func (h *Host) sendFence(host string, obj relocation.Object, f fenceMsg) bool {
	l := h.net.linkTo(h, host)
	return l != nil && l.send(linkItem{obj: obj, fence: &f}) == nil
}

// fenceRoutesTo: host is leaving and refuses frames from now on. Every
// object whose messages this host last sent there switches away from it
// now, with a fence sent while host still takes fences: a message for it
// sent later, to wherever it runs then, waits for that fence, which
// follows (through host) the messages host already has.
func (h *Host) fenceRoutesTo(host string) {
	if h.net == nil {
		return
	}
	now := nanotime()
	h.sent.mu.Lock()
	defer h.sent.mu.Unlock()
	for obj, e := range h.sent.m {
		if e.dest != host {
			continue
		}
		if h.sendFence(host, obj, fenceMsg{sender: h.name, seq: e.seq + 1}) {
			e.seq++
			e.via = host
			e.until = now + int64(h.cfg.FollowDuration)
		}
		e.dest = ""
		h.sent.m[obj] = e
	}
}

// pruneSent forgets where this host sent objects it has not sent to for
// twice FollowDuration: nothing of its can still be on the way there, so
// no fence is needed on its next switch (the table would otherwise grow
// with every object this host ever sent to).
func (h *Host) pruneSent() {
	limit := nanotime() - 2*int64(h.cfg.FollowDuration)
	h.sent.mu.Lock()
	for obj, e := range h.sent.m {
		if e.last < limit {
			delete(h.sent.m, obj)
		}
	}
	h.sent.mu.Unlock()
}

type fenceKey struct {
	obj    relocation.Object
	sender string
}

// heldForFence is a message held until its sender's fence arrives: off a
// link (ps, queued into the link's permit source when released) or sent
// here (e with its permit, admitted when released).
type heldForFence struct {
	o   *owner // the owner it is for, when it was held
	seq uint64
	via string
	l   *link
	ps  *pendingSend
	t   target
	e   *mailbox.Envelope
	// queued: not held for a fence but queued behind released messages of
	// its sender (queueBehind); when its turn comes it is sent afresh.
	queued bool
	// inOrder: it is being delivered in its turn: released messages still
	// being delivered do not hold it (they are newer).
	inOrder bool
}

type fenceWait struct {
	pending int    // released messages not yet delivered (in fenceTable.out)
	arrived uint64 // the highest fence number that arrived
	via     string // the old route the held messages' fence travels
	since   int64  // nanotime of the oldest held message
	touched int64  // nanotime of the last hold or arrival
	held    []heldForFence
}

type fenceTable struct {
	mu       sync.Mutex
	m        map[fenceKey]*fenceWait
	done     map[string]bool // hosts gone without leaving gracefully: fences through them may be lost
	departed map[string]bool // hosts that left gracefully

	// Released messages are delivered outside the lock (delivery can reach
	// a fence marker, which comes back here), in release order, by one
	// goroutine at a time (delivering); a sender's newer message queues
	// behind its released ones still in out — also one sent on to another
	// host (queueBehind), as are newer messages off the same link.
	out         []releasedItem
	delivering  bool
	linkPending map[*link]int // per link: messages off it in out
	outCount    atomic.Int64  // messages in out or being delivered from it
}

type releasedItem struct {
	w  *fenceWait
	it heldForFence
	// Or a fence to send on to host fwdTo, in order after the messages
	// released before it (they may follow the object to the same place).
	fwdTo  string
	fwdObj relocation.Object
	fwd    fenceMsg
}

// Results of holdForFence.
const (
	fencePass    = iota // deliver it now
	fenceHeld           // held (or queued behind released messages): done
	fenceReroute        // its owner left this host meanwhile: resolve again
)

// holdForFence holds it if its fence has not arrived yet and reports
// what the caller does next.
func (h *Host) holdForFence(k fenceKey, via string, it heldForFence) int {
	if h.net == nil {
		return fencePass
	}
	var permit *mailbox.Permits
	h.fences.mu.Lock()
	defer func() { h.unlockFences(permit) }()
	if it.o != nil && it.o.left.Load() {
		// The owner passed relay-ready and its held messages went after it
		// (takeHeld): this one goes after them, routed again.
		return fenceReroute
	}
	w := h.waitLocked(k)
	// Its fence came (it is older than anything held), or the old route is
	// gone and all it sent here is handled: nothing can be ahead of it on
	// that route. (With messages held, a new one queues among them even
	// then: they are released in order.)
	passes := it.seq <= w.arrived || (len(w.held) == 0 && h.fences.done[via])
	if passes && (w.pending == 0 || it.inOrder) {
		return fencePass
	}
	permit = it.takePermit()
	if passes {
		// Released messages of this sender are still being delivered: it
		// goes behind them.
		h.appendOutLocked(w, it)
		return fenceHeld
	}
	if len(w.held) == 0 {
		w.since = nanotime()
	}
	w.via = via
	it.via = via
	// Held in fence order: a message of an older switch that arrives late
	// goes before those of newer switches.
	i := len(w.held)
	for i > 0 && w.held[i-1].seq > it.seq {
		i--
	}
	w.held = append(w.held, heldForFence{})
	copy(w.held[i+1:], w.held[i:])
	w.held[i] = it
	h.heldForFence.Add(1)
	if len(w.held) > maxFenceHold {
		h.log.Warn("fence hold bound reached; releasing", "object", k.obj.String(), "sender", k.sender)
		h.releaseLocked(k, w, true)
	}
	return fenceHeld
}

// markerReached: a fence's marker reached the head of the job queue of
// the link it came on. If the object still runs here, the fence arrived;
// if it moved meanwhile, the fence follows it.
func (h *Host) markerReached(m *fenceMark) {
	if m.left != "" {
		h.releaseFences(m.left)
		return
	}
	f := fenceMsg{sender: m.key.sender, seq: m.seq}
	if to := h.fenceNext(m.key.obj, f); to != "" {
		// Behind the messages released here before it.
		h.queueFences(to, m.key.obj, f)
	}
}

// fenceNext: fence f for obj got here, after every older message of its
// sender on its way. If the object runs here, the fence has arrived (held
// messages waiting for it are released) and fenceNext returns "".
// Otherwise it returns the host the fence follows the object to; it is
// not recorded here, where older messages of its sender may still come
// back to (by a longer way round) if the object returns. "" too if the
// object cannot be found (logged).
func (h *Host) fenceNext(obj relocation.Object, f fenceMsg) string {
	kr := h.kinds[obj.Kind]
	for try := 0; try < 4 && kr != nil; try++ {
		p, err := kr.locate(obj.ID, true)
		switch {
		case err != nil:
			h.log.Info("fence cannot follow its object", "object", obj.String(), "sender", f.sender, "err", err)
			return ""
		case p.o == nil:
			return p.host
		case h.arrivedAt(p.o, fenceKey{obj: obj, sender: f.sender}, f.seq):
			return ""
		}
		// The owner left meanwhile: look again.
	}
	return ""
}

// passFence sends fence f for obj on to host to; if that host takes no
// fence any more (it left, or is about to, and refused what it was sent
// since), the fence follows the object from here, as those messages did.
func (h *Host) passFence(obj relocation.Object, to string, f fenceMsg) {
	for try := 0; try < 4 && to != ""; try++ {
		if h.sendFence(to, obj, f) {
			return
		}
		to = h.fenceNext(obj, f)
	}
}

// arrivedAt records that fence seq of k arrived at owner o, unless o has
// left (takeHeld; it reports false then): under the table lock, so a fence
// recorded here is one that takeHeld passes on after the object.
func (h *Host) arrivedAt(o *owner, k fenceKey, seq uint64) bool {
	h.fences.mu.Lock()
	defer h.unlockFences(nil)
	if o.left.Load() {
		return false
	}
	h.arrivedLocked(k, seq)
	return true
}

// queueFences sends fences on to host to, after every message released
// here before them has been delivered (or sent on).
func (h *Host) queueFences(to string, obj relocation.Object, fs ...fenceMsg) {
	h.fences.mu.Lock()
	for _, f := range fs {
		h.fences.out = append(h.fences.out, releasedItem{fwdTo: to, fwdObj: obj, fwd: f})
	}
	h.fences.mu.Unlock()
	h.flushFences()
}

// waitLocked returns the wait of k, made if new, and marks it touched.
func (h *Host) waitLocked(k fenceKey) *fenceWait {
	if h.fences.m == nil {
		h.fences.m = map[fenceKey]*fenceWait{}
	}
	w := h.fences.m[k]
	if w == nil {
		w = &fenceWait{}
		h.fences.m[k] = w
	}
	w.touched = nanotime()
	return w
}

// arrivedLocked records that fence seq of k arrived and releases what
// waited for it.
func (h *Host) arrivedLocked(k fenceKey, seq uint64) {
	w := h.waitLocked(k)
	if seq > w.arrived {
		w.arrived = seq
	}
	h.releaseLocked(k, w, false)
}

// releaseLocked releases, in order, the held messages whose fence arrived
// (all of them with force) to fenceTable.out; the caller delivers them
// after unlocking (flushFences). A message arriving meanwhile for the same
// sender and object queues behind them, so none overtakes another.
func (h *Host) releaseLocked(k fenceKey, w *fenceWait, force bool) {
	n := 0
	for _, it := range w.held {
		if !force && it.seq > w.arrived {
			break
		}
		if it.seq > w.arrived {
			w.arrived = it.seq // forced: this switch's later messages pass
		}
		n++
		h.appendOutLocked(w, it)
		h.heldForFence.Add(-1) // counted again by appendOutLocked
	}
	clear(w.held[:n])
	w.held = append(w.held[:0], w.held[n:]...)
	if len(w.held) == 0 {
		w.since = 0
	}
}

// takePermit takes the job permit of an own message that is held or
// queued: holds must never starve the permits that the fence it waits for
// needs to arrive. It enters its owner's queue without one when released.
func (it heldForFence) takePermit() *mailbox.Permits {
	if it.e == nil {
		return nil
	}
	return it.e.TakePermit()
}

// unlockFences lets the fence table go, then returns the permit a held or
// queued message gave back (outside the lock: the release may hand it to a
// source whose marker makes a fence arrive here) and delivers what was
// released.
func (h *Host) unlockFences(permit *mailbox.Permits) {
	h.fences.mu.Unlock()
	if permit != nil {
		permit.Release()
	}
	h.flushFences()
}

// appendOutLocked queues it, of w, for delivery in order (flushFences).
func (h *Host) appendOutLocked(w *fenceWait, it heldForFence) {
	w.pending++
	if it.l != nil {
		if h.fences.linkPending == nil {
			h.fences.linkPending = map[*link]int{}
		}
		h.fences.linkPending[it.l]++
	}
	h.fences.out = append(h.fences.out, releasedItem{w: w, it: it})
	h.fences.outCount.Add(1)
	h.heldForFence.Add(1)
}

// queueBehind queues a message that this host sends on to another host —
// its own (l == nil) or one off link l — behind released messages of the
// same sender (of the same link) still being delivered, so that it does not
// overtake them; false if none are (the caller sends it now). A queued own
// message gives its job permit back.
func (h *Host) queueBehind(k fenceKey, l *link, it heldForFence) bool {
	if h.net == nil || h.fences.outCount.Load() == 0 {
		return false
	}
	var permit *mailbox.Permits
	h.fences.mu.Lock()
	defer func() { h.unlockFences(permit) }()
	if l != nil {
		if h.fences.linkPending[l] == 0 {
			return false
		}
	} else if w := h.fences.m[k]; w == nil || w.pending == 0 {
		return false
	}
	permit = it.takePermit()
	it.queued = l == nil
	h.appendOutLocked(h.waitLocked(k), it)
	return true
}

// flushFences delivers the released messages, in order, outside the table
// lock; one goroutine at a time does it (a nested call, from a delivery
// that reached a fence marker, leaves its additions to the running one).
func (h *Host) flushFences() {
	h.fences.mu.Lock()
	if h.fences.delivering {
		h.fences.mu.Unlock()
		return
	}
	h.fences.delivering = true
	for len(h.fences.out) > 0 {
		batch := h.fences.out
		h.fences.out = nil
		h.fences.mu.Unlock()
		for _, r := range batch {
			if r.fwdTo != "" {
				h.passFence(r.fwdObj, r.fwdTo, r.fwd)
				continue
			}
			h.heldForFence.Add(-1)
			switch {
			case r.it.l != nil:
				r.it.ps.fencePassed = true
				r.it.l.in.enqueue(r.it.ps)
			case r.it.queued:
				h.admitGranted(r.it.t, r.it.e, ownInTurn)
			default:
				h.admitGranted(r.it.t, r.it.e, ownReleased)
			}
		}
		h.fences.mu.Lock()
		for _, r := range batch {
			if r.w != nil {
				r.w.pending--
				h.fences.outCount.Add(-1)
			}
			if l := r.it.l; l != nil {
				if h.fences.linkPending[l]--; h.fences.linkPending[l] <= 0 {
					delete(h.fences.linkPending, l)
				}
			}
		}
	}
	h.fences.delivering = false
	h.fences.mu.Unlock()
}

// fencesIdle reports whether no released message or fence waits to be
// delivered or passed on.
func (h *Host) fencesIdle() bool {
	h.fences.mu.Lock()
	defer h.fences.mu.Unlock()
	return len(h.fences.out) == 0 && !h.fences.delivering
}

// fencesArrived lists the fences that have arrived here for obj: per
// sender, the highest number.
func (h *Host) fencesArrived(obj relocation.Object) []fenceMsg {
	h.fences.mu.Lock()
	defer h.fences.mu.Unlock()
	var out []fenceMsg
	for k, w := range h.fences.m {
		if k.obj == obj && w.arrived > 0 {
			out = append(out, fenceMsg{sender: k.sender, seq: w.arrived})
		}
	}
	return out
}

// fenceSnapshot encodes fencesArrived, to move with the object (in the
// move record's Extra section): its next owner must not wait again for
// fences that already came.
func (h *Host) fenceSnapshot(obj relocation.Object) []byte {
	var out []byte
	for _, f := range h.fencesArrived(obj) {
		if len(f.sender) < 256 {
			out = append(out, byte(len(f.sender)))
			out = append(out, f.sender...)
			out = binary.BigEndian.AppendUint64(out, f.seq)
		}
	}
	return out
}

// decodeFences reads a fenceSnapshot; a malformed tail is ignored (the
// ordering state is best effort: a missing fence only delays).
func decodeFences(b []byte) []fenceMsg {
	var out []fenceMsg
	for len(b) > 0 {
		n := int(b[0])
		if len(b) < 1+n+8 {
			break
		}
		out = append(out, fenceMsg{sender: string(b[1 : 1+n]), seq: binary.BigEndian.Uint64(b[1+n:])})
		b = b[1+n+8:]
	}
	return out
}

// takeFenceHeld takes the messages held here for fences of obj, whose
// owner is leaving (o.left is set): each sender's in order.
func (h *Host) takeFenceHeld(obj relocation.Object) []heldForFence {
	h.fences.mu.Lock()
	defer h.fences.mu.Unlock()
	var out []heldForFence
	for k, w := range h.fences.m {
		if k.obj == obj && len(w.held) > 0 {
			out = append(out, w.held...)
			h.heldForFence.Add(-int64(len(w.held)))
			w.held, w.since = nil, 0
		}
	}
	return out
}

// fenceRestore takes in the fence state of an object that moved here.
func (h *Host) fenceRestore(obj relocation.Object, b []byte) {
	h.fences.mu.Lock()
	defer h.unlockFences(nil)
	for _, f := range decodeFences(b) {
		h.arrivedLocked(fenceKey{obj: obj, sender: f.sender}, f.seq)
	}
}

// releaseFences releases holds whose old route died (via == host: it
// crashed, or closed without leaving gracefully, and fences through it may
// be lost) — and with them holds whose fence went through a host that had
// left gracefully, as it may have been passed on through this one — or
// that are older than FollowDuration (host == "").
func (h *Host) releaseFences(host string) {
	h.fences.mu.Lock()
	defer h.unlockFences(nil)
	if host != "" {
		if h.fences.done == nil {
			h.fences.done = map[string]bool{}
		}
		h.fences.done[host] = true
	}
	now := nanotime()
	limit := now - int64(h.cfg.FollowDuration)
	for k, w := range h.fences.m {
		switch {
		case len(w.held) == 0:
			// Forget a sender's fences once its marked messages are over.
			if host == "" && w.pending == 0 && w.touched < now-2*int64(h.cfg.FollowDuration) {
				delete(h.fences.m, k)
			}
		case host != "" && (w.via == host || h.fences.departed[w.via]):
			h.log.Info("old route gone; releasing messages held for its fence", "object", k.obj.String(), "sender", k.sender)
			h.releaseLocked(k, w, true)
		case host == "" && w.since < limit:
			h.log.Warn("fence did not arrive in time; releasing held messages", "object", k.obj.String(), "sender", k.sender)
			h.releaseLocked(k, w, true)
		}
	}
}

// fenceDeparted: host left gracefully. Messages held for fences through
// it keep waiting: it passed every such fence on before it left.
func (h *Host) fenceDeparted(host string) {
	h.fences.mu.Lock()
	defer h.fences.mu.Unlock()
	if h.fences.departed == nil {
		h.fences.departed = map[string]bool{}
	}
	h.fences.departed[host] = true
}

// onFence handles a fence off link l. It queues behind the messages that
// came before it on the link (some may still wait for job permits): when
// its turn comes, every one of them has been admitted here or sent on, and
// the fence arrives — or follows the object, if it moved (markerReached).
func (h *Host) onFence(l *link, obj relocation.Object, f *fenceMsg) {
	if h.kinds[obj.Kind] == nil {
		return
	}
	ps := &pendingSend{mark: &fenceMark{key: fenceKey{obj: obj, sender: f.sender}, seq: f.seq}}
	ps.targets = ps.one[:] // one slot, so the source's bookkeeping holds
	l.in.enqueue(ps)
}
