package payload

import (
	"bytes"
	"sync"
	"testing"
)

func TestBufferReleasesExactlyOnceUnderConcurrentRetainRelease(t *testing.T) {
	log := newReleaseLog()
	p := NewPool(PoolOptions{OnRelease: log.observe})
	const buffers, workers, rounds = 200, 8, 50
	for i := 0; i < buffers; i++ {
		b := p.Get(100 + i)
		id := b.ID()
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := 0; w < workers; w++ {
			ref := b.Retain()
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for r := 0; r < rounds; r++ {
					extra := ref.Retain()
					if ref.Len() != 100+i {
						t.Errorf("buffer length changed while shared")
					}
					extra.Release()
				}
				ref.Release()
			}()
		}
		close(start)
		b.Release() // the creator's reference races with the workers'
		wg.Wait()
		if n := log.count(id); n != 1 {
			t.Fatalf("buffer %d released %d times, want exactly 1", id, n)
		}
	}
	if got := log.total.Load(); got != buffers {
		t.Fatalf("observer saw %d releases, want %d", got, buffers)
	}
}

func TestBufferReleaseObserverSeesIDAndLength(t *testing.T) {
	var got []ReleaseEvent
	p := NewPool(PoolOptions{OnRelease: func(ev ReleaseEvent) { got = append(got, ev) }})
	a, b := p.Get(10), p.Get(2000)
	if a.ID() == 0 || a.ID() == b.ID() {
		t.Fatalf("ids not unique and non-zero: %d %d", a.ID(), b.ID())
	}
	ids := []uint64{b.ID(), a.ID()}
	b.Release()
	if len(got) != 1 {
		t.Fatalf("release not observed at once: %v", got)
	}
	a.Release()
	if len(got) != 2 || got[0] != (ReleaseEvent{ID: ids[0], Len: 2000}) || got[1] != (ReleaseEvent{ID: ids[1], Len: 10}) {
		t.Fatalf("events = %+v", got)
	}
}

func TestBufferPoolReusesStorage(t *testing.T) {
	var p Pool
	const cycles = 200
	for i := 0; i < cycles; i++ {
		b := p.Get(700)
		b.Bytes()[0] = byte(i)
		b.Release()
	}
	// Without reuse every Get would allocate. sync.Pool may drop items (it
	// does so at random under the race detector, and at GC), so allow some.
	if a := p.Stats().Allocated; a > cycles/2 {
		t.Fatalf("pool allocated %d times in %d get/release cycles; storage is not reused", a, cycles)
	}
}

func TestBufferSizeClasses(t *testing.T) {
	var p Pool
	for _, n := range []int{0, 1, 63, 64, 65, 1000, 4096, 4097, 1 << 20, MaxPooledSize} {
		b := p.Get(n)
		data := b.Bytes()
		if len(data) != n {
			t.Fatalf("Get(%d) has length %d", n, len(data))
		}
		c := cap(data)
		if c < n || c&(c-1) != 0 || c < 64 {
			t.Fatalf("Get(%d) has capacity %d, want a power of two ≥ max(n, 64)", n, c)
		}
		b.Release()
	}
	big := p.Get(MaxPooledSize + 1)
	if big.Len() != MaxPooledSize+1 {
		t.Fatal("oversized buffer has wrong length")
	}
	big.Release()
	mustPanic(t, "negative Get", func() { p.Get(-1) })
}

func TestBufferSecondReleasePanics(t *testing.T) {
	var p Pool
	b := p.Get(10)
	b.Release()
	mustPanic(t, "second Release of the only reference", func() { b.Release() })
	mustPanic(t, "Bytes after final release", func() { b.Bytes() })
	mustPanic(t, "Retain after final release", func() { b.Retain() })
	mustPanic(t, "Release of the zero Buffer", func() { Buffer{}.Release() })
}

func TestBufferStaleReleasePanicsEvenAfterReuse(t *testing.T) {
	log := newReleaseLog()
	p := NewPool(PoolOptions{OnRelease: log.observe})
	old := p.Get(100)
	old.Release()
	fresh := p.Get(100) // most likely the same storage, reused
	mustPanic(t, "stale Release after reuse", func() { old.Release() })
	// The stale release must not have touched the new owner's reference.
	id := fresh.ID()
	fresh.Release()
	if n := log.count(id); n != 1 {
		t.Fatalf("fresh buffer released %d times", n)
	}
}

func TestBufferOverReleaseAmongSharersIsDetected(t *testing.T) {
	var p Pool
	a := p.Get(10)
	b := a.Retain()
	a.Release()
	a.Release() // the bug: a released twice; b's storage is gone
	mustPanic(t, "release by the last legitimate holder", func() { b.Release() })
}

func TestPoolCopyCountsOneFullCopy(t *testing.T) {
	var p Pool
	src := bytes.Repeat([]byte("x"), 300)
	b := p.Copy(src)
	src[0] = 'y'
	if b.Bytes()[0] != 'x' {
		t.Fatal("Copy aliases its source")
	}
	st := p.Stats()
	if st.FullCopies != 1 || st.FullCopyBytes != 300 {
		t.Fatalf("stats = %+v, want one full copy of 300 bytes", st)
	}
	b.Release()
}

func TestPoolAdoptTransfersOwnershipWithoutCopy(t *testing.T) {
	log := newReleaseLog()
	p := NewPool(PoolOptions{OnRelease: log.observe})
	data := []byte("owned elsewhere")
	var freed [][]byte
	b := p.Adopt(data, func(d []byte) { freed = append(freed, d) })
	if &b.Bytes()[0] != &data[0] {
		t.Fatal("Adopt copied the bytes")
	}
	c := b.Retain()
	b.Release()
	if len(freed) != 0 {
		t.Fatal("free called before the last reference was released")
	}
	id := c.ID()
	c.Release()
	if len(freed) != 1 || &freed[0][0] != &data[0] || log.count(id) != 1 {
		t.Fatalf("free calls %d, releases %d; want 1 and 1", len(freed), log.count(id))
	}
	if st := p.Stats(); st.FullCopies != 0 {
		t.Fatalf("Adopt counted %d full copies", st.FullCopies)
	}
}
