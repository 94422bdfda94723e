package storetest_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/relocation/storetest"
)

// clockedStore is a MemoryStore with the fake clock it was made with
// (NewMemoryStore takes the clock as a function).
type clockedStore struct {
	*relocation.MemoryStore
	now *atomic.Int64 // Unix nanoseconds; read under the store's lock, moved by Advance
}

// TestMemoryStore runs the suite over MemoryStore with a fake clock that
// Advance steps, so the lease-expiry checks run too.
func TestMemoryStore(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) relocation.Store {
			now := new(atomic.Int64)
			now.Store(time.Unix(1_000_000, 0).UnixNano())
			return clockedStore{
				MemoryStore: relocation.NewMemoryStore(func() time.Time { return time.Unix(0, now.Load()) }),
				now:         now,
			}
		},
		Advance: func(t *testing.T, s relocation.Store, d time.Duration) {
			s.(clockedStore).now.Add(int64(d))
		},
	})
}

// TestMemoryStoreWallClock runs the suite over MemoryStore on the wall
// clock (NewMemoryStore(nil)), as hosts use it: the checks that need lease
// expiry are skipped, as for any store whose clock cannot be moved.
func TestMemoryStoreWallClock(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) relocation.Store { return relocation.NewMemoryStore(nil) },
	})
}
