package payload

import (
	"sync/atomic"
	"unsafe"
)

// Stats is the copy accounting of a Pool (docs/architecture.md, "The payload contract", rule 5): full buffer copies,
// views, and object constructions by decode are counted separately, because
// they cost different things. All counts are totals since the pool was made.
type Stats struct {
	// FullCopies counts whole-buffer copies made by berth: Pool.Copy at a
	// boundary, Message.CopyPayload, and an encoder outgrowing the storage
	// it was given. FullCopyBytes is the number of bytes they copied.
	FullCopies    uint64
	FullCopyBytes uint64
	// Views counts references handed out to the same bytes without copying
	// (Buffer.Bytes, Message.RawView, Message.Frame). They cost nearly
	// nothing and are not copies.
	Views uint64
	// Decodes counts codec decode callbacks: each constructs the handler's
	// object graph once. It is the "one deserialization" of the payload contract
	// (docs/architecture.md, "The payload contract", rule 5).
	Decodes uint64
	// Allocated counts storage allocations that the pool could not serve
	// from reusable storage.
	Allocated uint64
	// Buffers counts buffers handed out (Get, Copy, Adopt, Encode). Only
	// pools with a release observer number their buffers; for others it is 0.
	// With an observer, buffers 1..Buffers are exactly the IDs it will see.
	Buffers uint64
}

// Stats returns a snapshot of the pool's counters. Counters are read one at a
// time, so a snapshot taken while messages flow is not atomic across fields.
func (p *Pool) Stats() Stats {
	return Stats{
		FullCopies:    p.stats.fullCopies.load(),
		FullCopyBytes: p.stats.fullCopyBytes.load(),
		Views:         p.stats.views.load(),
		Decodes:       p.stats.decodes.load(),
		Allocated:     p.stats.allocated.load(),
		Buffers:       p.ids.Load(),
	}
}

type poolStats struct {
	fullCopies    counter
	fullCopyBytes counter
	views         counter
	decodes       counter
	allocated     counter
}

// counter is a striped counter: adds from different goroutines usually hit
// different cache lines, so accounting can stay on under load. The stripe is
// picked from the address of the adder's stack, which differs per goroutine.
type counter struct {
	stripes [counterStripes]struct {
		n atomic.Uint64
		_ [56]byte
	}
}

const counterStripes = 8

func (c *counter) add(n uint64) {
	var marker byte
	h := uintptr(unsafe.Pointer(&marker))
	c.stripes[(h>>12^h>>16)%counterStripes].n.Add(n)
}

func (c *counter) load() uint64 {
	var sum uint64
	for i := range c.stripes {
		sum += c.stripes[i].n.Load()
	}
	return sum
}
