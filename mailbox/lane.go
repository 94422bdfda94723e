package mailbox

import (
	"sync/atomic"
	"unsafe"
)

// lane is a FIFO of envelopes: a slice with a moving head, compacted when
// the consumed prefix dominates. Not safe for concurrent use; the mailbox
// lock guards it.
type lane struct {
	items []*Envelope
	head  int
	bytes int64 // reserved by items not yet finished (queued or running)
	limit Limits
}

func (l *lane) len() int { return len(l.items) - l.head }

func (l *lane) push(e *Envelope) {
	if l.head > 0 && len(l.items) == cap(l.items) && l.head*2 >= len(l.items) {
		n := copy(l.items, l.items[l.head:])
		clear(l.items[n:])
		l.items = l.items[:n]
		l.head = 0
	}
	l.items = append(l.items, e)
}

func (l *lane) pop() *Envelope {
	e := l.items[l.head]
	l.items[l.head] = nil
	l.head++
	if l.head == len(l.items) {
		l.items = l.items[:0]
		l.head = 0
	}
	return e
}

// takeAll removes and returns every queued item, in order.
func (l *lane) takeAll() []*Envelope {
	if l.len() == 0 {
		return nil
	}
	out := append([]*Envelope(nil), l.items[l.head:]...)
	clear(l.items)
	l.items = l.items[:0]
	l.head = 0
	return out
}

// stripedGauge is a gauge many goroutines add to: adds usually hit
// different cache lines (picked from the adder's stack address).
type stripedGauge struct {
	stripes [8]struct {
		n atomic.Int64
		_ [56]byte
	}
}

func (g *stripedGauge) add(n int64) {
	var marker byte
	h := uintptr(unsafe.Pointer(&marker))
	g.stripes[(h>>12^h>>16)%8].n.Add(n)
}

func (g *stripedGauge) load() int64 {
	var sum int64
	for i := range g.stripes {
		sum += g.stripes[i].n.Load()
	}
	return sum
}
