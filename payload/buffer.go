package payload

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// Size classes of pooled storage: powers of two from 64 B to 16 MiB. A
// request larger than the largest class gets storage of its own that is not
// pooled.
const (
	minClassShift = 6
	maxClassShift = 24
	numClasses    = maxClassShift - minClassShift + 1

	// MaxPooledSize is the largest buffer length served from pooled storage.
	MaxPooledSize = 1 << maxClassShift
)

// ReleaseEvent describes the final release of a Buffer, as reported to a
// Pool's OnRelease observer.
type ReleaseEvent struct {
	ID  uint64 // the buffer's identity within its Pool (see Buffer.ID)
	Len int    // the buffer's length in bytes at release
}

// PoolOptions configure a Pool. The zero value is a pool without an observer.
type PoolOptions struct {
	// OnRelease, if set, is called exactly once per buffer, on the goroutine
	// that drops the last reference, after the reference count reaches zero
	// and before the storage can be reused. It must be fast and must not
	// block; it must not use the buffer.
	OnRelease func(ReleaseEvent)
}

// Pool hands out Buffers backed by reusable storage in power-of-two size
// classes, and keeps the copy accounting (Stats) for the buffers and messages
// built on them.
//
// The zero Pool is ready to use and has no release observer. A Pool is safe
// for concurrent use. It must not be copied after first use.
type Pool struct {
	onRelease func(ReleaseEvent)
	ids       atomic.Uint64
	stats     poolStats
	classes   [numClasses]sync.Pool // *storage with cap(data) in the class
	bare      sync.Pool             // *storage without data
}

// NewPool returns a Pool with the given options.
func NewPool(opts PoolOptions) *Pool {
	return &Pool{onRelease: opts.OnRelease}
}

// storage is the shared, reference-counted part of a Buffer.
type storage struct {
	refs    atomic.Int32  // live references; 0 when free
	gen     atomic.Uint32 // incremented at every final release
	adopted bool          // data belongs to the caller of Adopt
	id      uint64        // set by pools with an observer
	data    []byte        // len is the buffer's length
	free    func([]byte)  // Adopt's release function, or nil
	pool    *Pool
}

// Buffer is one reference to reference-counted encoded bytes.
//
// A Buffer is a small value: copying it does not add a reference. Retain adds
// one and returns the new reference; every reference is released exactly
// once with Release. When the last reference is released the pool's observer
// sees it and the storage becomes reusable.
//
// Using a reference after the storage's final release (Bytes, Retain or a
// second Release) panics. A holder that releases its reference twice while
// other references are still live is detected at the latest when the last
// of those is released.
//
// The bytes may be written only while the caller holds the sole reference and
// has not handed the buffer to anyone (Retain, Open); after that they are
// immutable until the final release.
type Buffer struct {
	s   *storage
	gen uint32
}

// ceilClass returns the smallest class whose size is at least n, or -1.
func ceilClass(n int) int {
	if n <= 1<<minClassShift {
		return 0
	}
	k := bits.Len(uint(n-1)) - minClassShift
	if k >= numClasses {
		return -1
	}
	return k
}

// floorClass returns the largest class whose size is at most c, or -1.
func floorClass(c int) int {
	if c < 1<<minClassShift {
		return -1
	}
	k := bits.Len(uint(c)) - 1 - minClassShift
	if k >= numClasses {
		return -1
	}
	return k
}

// Get returns a buffer of length n holding the only reference. Its contents
// are unspecified. Get panics if n is negative.
func (p *Pool) Get(n int) Buffer {
	if n < 0 {
		panic("payload: Pool.Get with negative length")
	}
	s := p.storage(n)
	s.data = s.data[:n]
	return p.hand(s)
}

// storage returns storage with capacity for at least n bytes and len 0.
func (p *Pool) storage(n int) *storage {
	k := ceilClass(n)
	if k >= 0 {
		if v := p.classes[k].Get(); v != nil {
			return v.(*storage)
		}
	}
	size := n
	if k >= 0 {
		size = 1 << (k + minClassShift)
	}
	s := p.bareStorage()
	s.data = make([]byte, 0, size)
	p.stats.allocated.add(1)
	return s
}

func (p *Pool) bareStorage() *storage {
	if v := p.bare.Get(); v != nil {
		return v.(*storage)
	}
	return &storage{pool: p}
}

// hand makes s a live buffer with one reference.
func (p *Pool) hand(s *storage) Buffer {
	if p.onRelease != nil {
		s.id = p.ids.Add(1)
	}
	s.refs.Store(1)
	return Buffer{s: s, gen: s.gen.Load()}
}

// Copy returns a new buffer holding a copy of src: the one copy a boundary
// makes when the bytes it received are lent and would not outlive its
// receive callback. It counts as a full copy in Stats.
func (p *Pool) Copy(src []byte) Buffer {
	b := p.Get(len(src))
	copy(b.s.data, src)
	p.stats.fullCopies.add(1)
	p.stats.fullCopyBytes.add(uint64(len(src)))
	return b
}

// Adopt returns a buffer that takes ownership of data without copying it:
// the caller must not use data afterwards. When the last reference is
// released, free (if not nil) is called with data, after the observer.
func (p *Pool) Adopt(data []byte, free func([]byte)) Buffer {
	s := p.bareStorage()
	s.adopted = true
	s.data = data
	s.free = free
	return p.hand(s)
}

// recycle returns the storage of a finally released buffer to the pool.
func (p *Pool) recycle(s *storage) {
	if s.adopted {
		if s.free != nil {
			s.free(s.data)
		}
		s.adopted, s.free, s.data = false, nil, nil
		p.bare.Put(s)
		return
	}
	k := floorClass(cap(s.data))
	if k < 0 {
		s.data = nil
		p.bare.Put(s)
		return
	}
	s.data = s.data[:0]
	p.classes[k].Put(s)
}

func (b Buffer) live(op string) *storage {
	s := b.s
	if s == nil {
		panic("payload: " + op + " of a zero Buffer")
	}
	if s.gen.Load() != b.gen {
		panic("payload: " + op + " of a Buffer reference after its final release")
	}
	return s
}

// IsZero reports whether b is the zero Buffer (no storage at all).
func (b Buffer) IsZero() bool { return b.s == nil }

// Len returns the buffer's length in bytes.
func (b Buffer) Len() int { return len(b.live("Len").data) }

// Bytes returns the buffer's bytes. They are lent: valid until this
// reference is released, and read-only once the buffer is shared. Bytes
// counts a view in Stats; it never copies.
func (b Buffer) Bytes() []byte {
	s := b.live("Bytes")
	s.pool.stats.views.add(1)
	return s.data
}

// ID returns the buffer's identity within its pool, as reported to the
// pool's OnRelease observer. Pools without an observer do not number their
// buffers, and ID returns 0.
func (b Buffer) ID() uint64 { return b.live("ID").id }

// Retain adds a reference and returns it. Each reference is released once.
func (b Buffer) Retain() Buffer {
	s := b.live("Retain")
	if s.refs.Add(1) <= 1 {
		panic("payload: Retain of a Buffer with no live references")
	}
	return b
}

// Release drops this reference. Releasing the last reference reports the
// release to the pool's observer and makes the storage reusable. Releasing a
// reference twice panics (see Buffer).
func (b Buffer) Release() {
	s := b.live("Release")
	n := s.refs.Add(-1)
	if n > 0 {
		return
	}
	if n < 0 {
		panic("payload: Buffer released more times than it was retained")
	}
	s.gen.Add(1)
	p := s.pool
	if p.onRelease != nil {
		p.onRelease(ReleaseEvent{ID: s.id, Len: len(s.data)})
	}
	p.recycle(s)
}
