package transporttest

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthrt/berth/transport"
)

// waitLimit bounds every wait of the suite.
const waitLimit = 10 * time.Second

// op is what a handler call was.
type op uint8

const (
	opDeliver op = iota + 1
	opReturned
	opEvent
)

// entry is one handler call, as the recorder saw it.
type entry struct {
	op    op
	peer  string // from (Deliver), to (Returned) or the event's peer
	item  transport.Item
	event transport.EventKind
}

// recorder is a transport.Handler that logs every call, in the order the
// calls came, and can hold its first Deliver until released.
type recorder struct {
	mu      sync.Mutex
	log     []entry       // guarded by mu
	changed chan struct{} // closed and replaced on every change; guarded by mu

	hold     bool          // the first Deliver waits for release
	held     bool          // guarded by mu
	entered  chan struct{} // closed when the first Deliver is held
	release  chan struct{}
	released sync.Once
}

func newRecorder() *recorder {
	return &recorder{changed: make(chan struct{}), entered: make(chan struct{}), release: make(chan struct{})}
}

// holding returns a recorder whose first Deliver blocks until unhold.
func holding() *recorder {
	r := newRecorder()
	r.hold = true
	return r
}

func (r *recorder) unhold() { r.released.Do(func() { close(r.release) }) }

func (r *recorder) add(e entry) (holdNow bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, e)
	close(r.changed)
	r.changed = make(chan struct{})
	if e.op == opDeliver && r.hold && !r.held {
		r.held = true
		return true
	}
	return false
}

func (r *recorder) Deliver(from string, it transport.Item) {
	it.Data = bytes.Clone(it.Data) // lent for the call only
	if r.add(entry{op: opDeliver, peer: from, item: it}) {
		close(r.entered)
		<-r.release
	}
}

func (r *recorder) Returned(to string, it transport.Item) {
	it.Data = bytes.Clone(it.Data) // lent for the call only
	r.add(entry{op: opReturned, peer: to, item: it})
}

func (r *recorder) Event(e transport.Event) {
	r.add(entry{op: opEvent, peer: e.Peer, event: e.Kind})
}

// snapshot returns a copy of the log.
func (r *recorder) snapshot() []entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]entry(nil), r.log...)
}

// await waits until cond holds for the log, failing t after waitLimit.
func (r *recorder) await(t testing.TB, what string, cond func(log []entry) bool) []entry {
	t.Helper()
	if log, ok := r.within(waitLimit, cond); ok {
		return log
	}
	t.Fatalf("timed out waiting for %s; log:\n%s", what, format(r.snapshot()))
	return nil
}

// within waits up to d until cond holds for the log.
func (r *recorder) within(d time.Duration, cond func(log []entry) bool) ([]entry, bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		r.mu.Lock()
		log, changed := r.log, r.changed
		ok := cond(log)
		if ok {
			log = append([]entry(nil), log...)
		}
		r.mu.Unlock()
		if ok {
			return log, true
		}
		select {
		case <-changed:
		case <-timer.C:
			return nil, false
		}
	}
}

// awaitEvent waits for an event of kind k about peer.
func (r *recorder) awaitEvent(t testing.TB, peer string, k transport.EventKind) {
	t.Helper()
	r.await(t, fmt.Sprintf("event %v of %s", k, peer), func(log []entry) bool {
		return indexEvent(log, peer, k) >= 0
	})
}

// awaitDelivered waits until n items have come from peer and returns them.
func (r *recorder) awaitDelivered(t testing.TB, peer string, n int) []transport.Item {
	t.Helper()
	log := r.await(t, fmt.Sprintf("%d items from %s", n, peer), func(log []entry) bool {
		return len(delivered(log, peer)) >= n
	})
	return delivered(log, peer)
}

func indexEvent(log []entry, peer string, k transport.EventKind) int {
	for i, e := range log {
		if e.op == opEvent && e.peer == peer && e.event == k {
			return i
		}
	}
	return -1
}

func countEvents(log []entry, peer string, k transport.EventKind) int {
	c := 0
	for _, e := range log {
		if e.op == opEvent && e.peer == peer && e.event == k {
			c++
		}
	}
	return c
}

// delivered returns the items delivered from peer, in order.
func delivered(log []entry, peer string) []transport.Item { return itemsOf(log, opDeliver, peer) }

// returned returns the items handed back that were sent to peer, in order.
func returned(log []entry, peer string) []transport.Item { return itemsOf(log, opReturned, peer) }

func itemsOf(log []entry, o op, peer string) []transport.Item {
	var out []transport.Item
	for _, e := range log {
		if e.op == o && e.peer == peer {
			out = append(out, e.item)
		}
	}
	return out
}

func format(log []entry) string {
	var b strings.Builder
	for i, e := range log {
		if i == 200 {
			fmt.Fprintf(&b, "  ... %d more\n", len(log)-i)
			break
		}
		switch e.op {
		case opDeliver:
			fmt.Fprintf(&b, "  deliver from %s: %v %q\n", e.peer, e.item.Kind, e.item.Data)
		case opReturned:
			fmt.Fprintf(&b, "  returned to %s: %v %q\n", e.peer, e.item.Kind, e.item.Data)
		case opEvent:
			fmt.Fprintf(&b, "  event %v of %s\n", e.event, e.peer)
		}
	}
	return b.String()
}

// kinds are the item kinds, for mixing.
var kinds = []transport.Kind{transport.Frame, transport.Bounce, transport.Record, transport.Hint, transport.Control}

// item returns item seq of sender: its Data names both.
func item(k transport.Kind, sender string, seq int) transport.Item {
	return transport.Item{Kind: k, Data: []byte(sender + "#" + strconv.Itoa(seq))}
}

// mixed returns item seq of sender with a kind that varies with seq.
func mixed(sender string, seq int) transport.Item {
	return item(kinds[seq%len(kinds)], sender, seq)
}

// seqOf returns the sequence number in it's Data, failing t if it was not
// made by item for sender.
func seqOf(t testing.TB, sender string, it transport.Item) int {
	t.Helper()
	s, ok := bytes.CutPrefix(it.Data, []byte(sender+"#"))
	if !ok {
		t.Fatalf("item %q is not from %s", it.Data, sender)
	}
	n, err := strconv.Atoi(string(s))
	if err != nil {
		t.Fatalf("item %q: %v", it.Data, err)
	}
	return n
}

// checkSeq fails t unless items are sender's items from..from+len-1 in
// order, each of the kind mixed gives it.
func checkSeq(t testing.TB, sender string, items []transport.Item, from int) {
	t.Helper()
	for i, it := range items {
		want := mixed(sender, from+i)
		if it.Kind != want.Kind || !bytes.Equal(it.Data, want.Data) {
			t.Fatalf("item %d from %s: got %v %q, want %v %q", i, sender, it.Kind, it.Data, want.Kind, want.Data)
		}
	}
}
