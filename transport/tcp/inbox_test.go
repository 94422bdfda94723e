package tcp

import (
	"testing"
	"time"

	"github.com/berthrt/berth/transport"
)

func item(seq uint64) delivery {
	return delivery{what: dItem, epoch: 1, seq: seq, item: transport.Item{Kind: transport.Frame}}
}

// An item that finds the inbox idle is taken by its receiver; until that
// inline delivery ends the delivery goroutine takes nothing, so the
// handler sees one call at a time, in order.
func TestInboxInlineDeliveryKeepsCallsOneAtATimeInOrder(t *testing.T) {
	q := newInbox()
	d, took := q.take([]delivery{item(1), item(2)})
	if !took || d.seq != 1 {
		t.Fatalf("take on an idle inbox: %v %v, want item 1 taken", d.seq, took)
	}
	if _, took := q.take([]delivery{item(3)}); took {
		t.Fatal("a second take while an inline delivery runs took its item")
	}
	got := make(chan uint64, 3)
	go func() {
		for {
			d, _, ok := q.next()
			if !ok {
				close(got)
				return
			}
			got <- d.seq
		}
	}()
	select {
	case s := <-got:
		t.Fatalf("the delivery goroutine took item %d while item 1 was being delivered inline", s)
	case <-time.After(20 * time.Millisecond): // it must not take anything meanwhile
	}
	if q.pending() != 3 {
		t.Fatalf("pending %d, want 3 (one inline, two queued)", q.pending())
	}
	if q.inlineDone() {
		t.Fatal("inlineDone reports a stop that did not happen")
	}
	for want := uint64(2); want <= 3; want++ {
		if s := <-got; s != want {
			t.Fatalf("got item %d, want %d", s, want)
		}
	}
	// Idle again, but the goroutine is between calls (inFlight): the next
	// item is queued, not taken.
	q.stop()
	if _, ok := <-got; ok {
		t.Fatal("the goroutine went on after stop")
	}
}

// stop counts an inline delivery as taken, and waitInline waits for it.
func TestInboxStopCountsAndWaitsForAnInlineDelivery(t *testing.T) {
	q := newInbox()
	if _, took := q.take([]delivery{item(7)}); !took {
		t.Fatal("not taken")
	}
	if _, seq := q.stop(); seq != 7 {
		t.Fatalf("stop reports item %d as the last taken, want 7", seq)
	}
	waited := make(chan struct{})
	go func() { q.waitInline(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("waitInline returned while the inline delivery runs")
	case <-time.After(20 * time.Millisecond):
	}
	if !q.inlineDone() {
		t.Fatal("inlineDone does not report the stop")
	}
	<-waited
	if _, took := q.take([]delivery{item(8)}); took {
		t.Fatal("a stopped inbox handed out an item")
	}
}
