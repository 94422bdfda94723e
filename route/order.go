package route

import (
	"cmp"
	"slices"
)

// Stamp is a message's place in its sender's stream to one object. The
// zero Stamp means "not stamped": such a message is not ordered.
type Stamp struct {
	Epoch uint64
	Seq   uint64
}

// IsZero reports whether s is the zero Stamp.
func (s Stamp) IsZero() bool { return s.Seq == 0 }

// Verdict is what an Order says about an arriving message.
type Verdict uint8

// Verdicts.
const (
	// Release: the message's turn has come. The caller hands it on, then
	// calls Released, then takes what became ready with Next.
	Release Verdict = iota + 1
	// Hold: the message is ahead of its turn; the caller gives it to Hold.
	Hold
	// Late: the message is behind its turn: its gap was given up on
	// earlier, or its epoch is older than its sender's current one. The
	// caller hands it on at once (nothing is dropped) and calls Released,
	// which counts it.
	Late
)

// String returns the verdict's name.
func (v Verdict) String() string {
	switch v {
	case Release:
		return "release"
	case Hold:
		return "hold"
	case Late:
		return "late"
	}
	return "none"
}

// DefaultMaxHeld is the number of messages an Order holds for one sender
// past which it reports the sender as over its bound (Hold's result): the
// driver then pushes back on that sender. The bound never releases
// anything out of order and never drops anything.
const DefaultMaxHeld = 10_000

// Fact is a failure fact: at At, the membership reported a host gone (its
// lease expired, or it left without handing on its work), or this host
// took an object over from a crashed owner. A fact covers the gaps that
// were open at At or opened within Window after it: the message missing
// in such a gap may have died with that host. A covered gap closes Wait
// after the later of At and its opening — the time left for what is still
// on live links. Nothing else closes a gap but a skip notice: while no
// host fails, a gap waits however long a move or a follow path takes.
type Fact struct {
	At     int64
	Window int64
	Wait   int64
}

// closesAt returns when a gap opened at open may close by f, if f covers it.
func (f Fact) closesAt(open int64) (int64, bool) {
	if open > f.At+f.Window {
		return 0, false
	}
	return max(f.At, open) + f.Wait, true
}

// Order is one object's receive order (see the package doc): per sending
// host the epoch and the next expected sequence number, and the messages
// (of any type T, e.g. queue items) that arrived ahead of their turn. The
// zero value is an empty order with DefaultMaxHeld. Not safe for
// concurrent use.
type Order[T any] struct {
	senders []*senderOrder[T]
	ready   []T // released from the buffer; taken with Next
	readyAt int
	held    int
	counts  Counts
	// MaxHeld is the number of messages held for one sender past which
	// Hold reports it over its bound; 0 means DefaultMaxHeld.
	MaxHeld int
}

// Counts are an Order's events since the last TakeCounts.
type Counts struct {
	// GapsClosed: sequence numbers given up on (a failure fact covered
	// the gap and its wait passed, or the sender moved to a newer epoch
	// with messages of the older one still waiting).
	GapsClosed uint64
	// Late: messages released after their turn (see Late).
	Late uint64
	// Skipped: skip notices taken in at or ahead of their turn.
	Skipped uint64
	// Repeats: messages sent again (Inbox.Offer's again) that this order
	// had released already, dropped (see Repeat).
	Repeats uint64
}

// Add adds d to c.
func (c *Counts) Add(d Counts) {
	c.GapsClosed += d.GapsClosed
	c.Late += d.Late
	c.Skipped += d.Skipped
	c.Repeats += d.Repeats
}

type senderOrder[T any] struct {
	name  string
	epoch uint64
	next  uint64
	last  int64 // now of the last message seen
	held  []heldItem[T]
	// unsure: below it, in this epoch, a sequence number may have been
	// given up on (a gap closed past it) rather than released, so a
	// message sent again there may be new (Repeat). It travels in the
	// snapshot (SenderState.Unsure).
	unsure uint64
}

type heldItem[T any] struct {
	seq  uint64
	at   int64 // now when it was held
	item T
}

// waitingSince returns when the longest-waiting held message of s was
// held.
func (s *senderOrder[T]) waitingSince() int64 {
	since := s.held[0].at
	for _, h := range s.held[1:] {
		since = min(since, h.at)
	}
	return since
}

func (o *Order[T]) find(sender []byte) *senderOrder[T] {
	for _, s := range o.senders {
		if s.name == string(sender) {
			return s
		}
	}
	return nil
}

// Check says what to do with a message of sender stamped st, without
// changing anything. An unstamped message is always Release.
func (o *Order[T]) Check(sender []byte, st Stamp) Verdict {
	if st.IsZero() {
		return Release
	}
	next := uint64(1)
	if s := o.find(sender); s != nil {
		switch {
		case st.Epoch < s.epoch:
			return Late
		case st.Epoch == s.epoch:
			next = s.next
		case len(s.held) > 0:
			// A newer epoch: what waits in the older one goes first
			// (Hold releases it, then this one).
			return Hold
		}
	}
	switch {
	case st.Seq < next:
		return Late
	case st.Seq == next:
		return Release
	}
	return Hold
}

// enter returns sender's state in epoch (a newer epoch restarts the
// stream at 1, releasing what waited in the older one).
func (o *Order[T]) enter(sender []byte, epoch uint64, now int64) *senderOrder[T] {
	s := o.find(sender)
	if s == nil {
		s = &senderOrder[T]{name: string(sender), epoch: epoch, next: 1}
		o.senders = append(o.senders, s)
	}
	if epoch > s.epoch {
		o.giveUp(s, len(s.held))
		s.epoch, s.next, s.unsure = epoch, 1, 0
	}
	s.last = now
	return s
}

// Repeat reports whether a message of sender stamped st that was sent
// again — its sender's new run sent it after the old run's links closed,
// and the old run's link may have delivered it already — is one this
// order has: it is of the sender's current epoch, and either behind its
// turn with no gap given up at or after it (released), or held. The
// caller drops it (counted, Counts.Repeats, by Dropped) instead of running
// it a second time. A message sent again that is not a repeat by this
// rule is checked as any other: where it may have been given up on, it
// runs late (a message is never dropped on a doubt).
func (o *Order[T]) Repeat(sender []byte, st Stamp) bool {
	if st.IsZero() {
		return false
	}
	s := o.find(sender)
	if s == nil || st.Epoch != s.epoch {
		return false
	}
	if st.Seq < s.next {
		return st.Seq >= s.unsure
	}
	_, held := slices.BinarySearchFunc(s.held, st.Seq, func(h heldItem[T], seq uint64) int { return cmp.Compare(h.seq, seq) })
	return held
}

// Dropped counts a repeat (Repeat) the caller dropped.
func (o *Order[T]) Dropped() { o.counts.Repeats++ }

// Released records that a message checked Release or Late was handed on.
// After a Release, messages held behind it whose turn has come are moved
// to the ready list (Next).
func (o *Order[T]) Released(sender []byte, st Stamp, now int64) {
	if st.IsZero() {
		return
	}
	s := o.find(sender)
	if s != nil && st.Epoch < s.epoch {
		o.counts.Late++
		s.last = now
		return
	}
	if s == nil || st.Epoch > s.epoch {
		s = o.enter(sender, st.Epoch, now)
	} else {
		s.last = now
	}
	if st.Seq < s.next {
		o.counts.Late++
		return
	}
	if st.Seq > s.next { // a skip notice jumps no gap; only Release comes here
		return
	}
	s.next++
	o.promote(s)
}

// Skip records a skip notice for st: that message will never come. If it
// is the next expected one, the messages behind it become ready; if it is
// ahead, the notice is held in its place (as item, which the caller
// recognises when Next returns it, and drops); if it is behind, nothing
// changes.
func (o *Order[T]) Skip(sender []byte, st Stamp, item T, now int64) Verdict {
	v := o.Check(sender, st)
	switch v {
	case Hold:
		o.counts.Skipped++
		o.Hold(sender, st, item, now)
	case Release:
		o.counts.Skipped++
		s := o.enter(sender, st.Epoch, now)
		s.next++
		o.promote(s)
	}
	return v
}

// Hold keeps item, checked Hold, until its turn. (If it is the first of a
// newer epoch, what waited in the older epoch is released, then it.) It
// reports whether the sender now has more than MaxHeld messages held: the
// caller pushes back on it. The item is held all the same.
func (o *Order[T]) Hold(sender []byte, st Stamp, item T, now int64) (over bool) {
	s := o.enter(sender, st.Epoch, now)
	i, found := slices.BinarySearchFunc(s.held, st.Seq, func(h heldItem[T], seq uint64) int {
		switch {
		case h.seq < seq:
			return -1
		case h.seq > seq:
			return 1
		}
		return 0
	})
	if found {
		// The same stamp twice comes only sent again, which the inbox
		// drops (Repeat); keep both rather than lose one, the later after
		// the earlier.
		i++
	}
	s.held = slices.Insert(s.held, i, heldItem[T]{seq: st.Seq, at: now, item: item})
	o.held++
	o.promote(s)
	return len(s.held) > o.maxHeld()
}

func (o *Order[T]) maxHeld() int {
	if o.MaxHeld <= 0 {
		return DefaultMaxHeld
	}
	return o.MaxHeld
}

// Over reports whether sender has more than MaxHeld messages held.
func (o *Order[T]) Over(sender []byte) bool {
	s := o.find(sender)
	return s != nil && len(s.held) > o.maxHeld()
}

// HeldOf returns how many messages are held for sender.
func (o *Order[T]) HeldOf(sender []byte) int {
	if s := o.find(sender); s != nil {
		return len(s.held)
	}
	return 0
}

// promote moves the held messages of s whose turn has come to the ready
// list.
func (o *Order[T]) promote(s *senderOrder[T]) {
	n := 0
	for n < len(s.held) && s.held[n].seq <= s.next {
		if s.held[n].seq == s.next {
			s.next++
		}
		o.ready = append(o.ready, s.held[n].item)
		n++
	}
	o.drop(s, n)
}

// giveUp releases the first n held messages of s, in order, closing the
// gaps before them (counted).
func (o *Order[T]) giveUp(s *senderOrder[T], n int) {
	for i := 0; i < n; i++ {
		if seq := s.held[i].seq; seq > s.next {
			o.counts.GapsClosed += seq - s.next
			s.next, s.unsure = seq, seq
		}
		if s.held[i].seq == s.next {
			s.next++
		}
		o.ready = append(o.ready, s.held[i].item)
	}
	o.drop(s, n)
	o.promote(s)
}

func (o *Order[T]) drop(s *senderOrder[T], n int) {
	if n == 0 {
		return
	}
	clear(s.held[:n])
	s.held = append(s.held[:0], s.held[n:]...)
	o.held -= n
	if len(s.held) == 0 {
		s.held = nil
	}
}

// Next takes the next ready message, in order.
func (o *Order[T]) Next() (T, bool) {
	var zero T
	if o.readyAt >= len(o.ready) {
		if o.ready != nil {
			o.ready, o.readyAt = o.ready[:0], 0
		}
		return zero, false
	}
	it := o.ready[o.readyAt]
	o.ready[o.readyAt] = zero
	o.readyAt++
	return it, true
}

// CloseGaps gives up on the gaps of every sender whose gap a failure fact
// covers and whose wait has passed (see Fact): its held messages become
// ready, in order, and the closed sequence numbers are counted. A gap's
// opening is when its oldest still-held message was held. It returns how
// many senders it released. With no fact, nothing closes.
func (o *Order[T]) CloseGaps(now int64, facts ...Fact) int {
	if len(facts) == 0 {
		return 0
	}
	n := 0
	for _, s := range o.senders {
		if len(s.held) == 0 {
			continue
		}
		open := s.waitingSince()
		for _, f := range facts {
			if at, ok := f.closesAt(open); ok && now >= at {
				o.giveUp(s, len(s.held))
				n++
				break
			}
		}
	}
	return n
}

// closeFirstGaps gives up the gaps before senders' first messages — those
// of senders none of whose messages (in their current epoch) was
// released yet — that have waited wait. It returns how many senders it
// released.
func (o *Order[T]) closeFirstGaps(now, wait int64) int {
	n := 0
	for _, s := range o.senders {
		if len(s.held) > 0 && s.next == 1 && now >= s.waitingSince()+wait {
			o.giveUp(s, len(s.held))
			n++
		}
	}
	return n
}

// Gap is one sender's gap: the sender, how long its oldest held message
// has waited, how many messages wait behind it, and the first missing
// sequence number.
type Gap struct {
	Sender  string
	Waited  int64
	Held    int
	Missing uint64
}

// oldestOpen returns when the longest-waiting gap opened, if any is open.
func (o *Order[T]) oldestOpen() (int64, bool) {
	var open int64
	found := false
	for _, s := range o.senders {
		if len(s.held) > 0 {
			if w := s.waitingSince(); !found || w < open {
				open, found = w, true
			}
		}
	}
	return open, found
}

// OldestGap returns the longest-waiting gap, if any.
func (o *Order[T]) OldestGap(now int64) (Gap, bool) {
	var g Gap
	found := false
	for _, s := range o.senders {
		if len(s.held) == 0 {
			continue
		}
		if w := now - s.waitingSince(); !found || w > g.Waited {
			g = Gap{Sender: s.name, Waited: w, Held: len(s.held), Missing: s.next}
			found = true
		}
	}
	return g, found
}

// Forget drops the state of senders that hold nothing and were last seen
// at least idle ago (idle must exceed the senders' stream idle time).
func (o *Order[T]) Forget(now, idle int64) {
	o.senders = slices.DeleteFunc(o.senders, func(s *senderOrder[T]) bool {
		return len(s.held) == 0 && now-s.last >= idle
	})
	if len(o.senders) == 0 {
		o.senders = nil
	}
}

// Held returns how many messages the buffer holds.
func (o *Order[T]) Held() int { return o.held }

// Senders returns how many senders the order knows.
func (o *Order[T]) Senders() int { return len(o.senders) }

// SenderNames appends the names of the senders the order knows to dst.
func (o *Order[T]) SenderNames(dst []string) []string {
	for _, s := range o.senders {
		dst = append(dst, s.name)
	}
	return dst
}

// TakeCounts returns the counts since the last call and resets them.
func (o *Order[T]) TakeCounts() Counts {
	c := o.counts
	o.counts = Counts{}
	return c
}

// Expected returns sender's epoch and next expected sequence number (0, 0
// if unknown).
func (o *Order[T]) Expected(sender string) (epoch, next uint64) {
	if s := o.find([]byte(sender)); s != nil {
		return s.epoch, s.next
	}
	return 0, 0
}

// Snapshot returns the order's state, with each held message as frame
// makes it, for the object's move record or store row. The order itself
// is unchanged.
func (o *Order[T]) Snapshot(now int64, frame func(T) []byte) Snapshot {
	var out Snapshot
	for _, s := range o.senders {
		st := SenderState{Sender: s.name, Epoch: s.epoch, Next: s.next, Idle: max(now-s.last, 0), Unsure: s.unsure}
		if len(s.held) > 0 {
			st.Waited = max(now-s.waitingSince(), 0)
		}
		for _, h := range s.held {
			st.Held = append(st.Held, HeldFrame{Seq: h.seq, Frame: frame(h.item)})
		}
		out.Senders = append(out.Senders, st)
	}
	return out
}

// Restore replaces the order's state with snap, turning each held frame
// into an item with item (a frame it rejects is dropped; the caller counts
// it). Held messages keep the time they have waited.
func (o *Order[T]) Restore(snap Snapshot, now int64, item func(seq uint64, frame []byte) (T, bool)) {
	*o = Order[T]{MaxHeld: o.MaxHeld}
	for _, st := range snap.Senders {
		s := &senderOrder[T]{name: st.Sender, epoch: st.Epoch, next: st.Next, last: now - st.Idle, unsure: st.Unsure}
		for _, h := range st.Held {
			if it, ok := item(h.Seq, h.Frame); ok {
				s.held = append(s.held, heldItem[T]{seq: h.Seq, at: now - st.Waited, item: it})
			}
		}
		o.held += len(s.held)
		o.senders = append(o.senders, s)
	}
}

// TakeHeld removes every held message, each sender's in order, and
// returns them; the expected-next table is kept. (A source whose object
// moved away gives up its copies: the move record carries them.)
func (o *Order[T]) TakeHeld() []T {
	var out []T
	for _, s := range o.senders {
		for _, h := range s.held {
			out = append(out, h.item)
		}
		o.drop(s, len(s.held))
	}
	return out
}
