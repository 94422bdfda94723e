package pgbridge

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// fill inserts rows for keys in a seeded random interleaving; within a key
// the sequence numbers rise with the row id.
func fill(t testing.TB, b *Broker, tb Table, keys, perKey int, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed))
	next := make([]int, keys)
	left := keys * perKey
	pub := Repository{Broker: b, Table: tb}
	for left > 0 {
		k := rng.IntN(keys)
		if next[k] == perKey {
			continue
		}
		if err := Send(bg, b, b.pool, pub, fmt.Sprint("key", k), Job{Key: fmt.Sprint("key", k), N: next[k]}); err != nil {
			t.Fatal(err)
		}
		next[k]++
		left--
	}
}

// TestPerKeyOrderEveryOrderedForm: many keys, many rows per key, several
// workers claiming one row or a batch at a time: every key's rows ran in id
// order, each exactly once — in every form that promises it (Advisory
// always, RowLock and Lease with Ordered).
func TestPerKeyOrderEveryOrderedForm(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for _, form := range []Form{RowLock, Lease, Advisory} {
		for _, batch := range []int{1, 8} {
			t.Run(fmt.Sprintf("%s/batch=%d", form, batch), func(t *testing.T) {
				pool, _ := newPool(t)
				tb := Table{Name: "inbox"}
				migrate(t, pool, tb)
				b := newBroker(t, Config{Pool: pool})
				const keys, perKey = 20, 40
				fill(t, b, tb, keys, perKey, seed)
				var mu sync.Mutex
				last := map[string]int{}
				var bad []string
				var runs int
				h := Messages(func(ctx context.Context, d *Delivery, m Job) Outcome {
					mu.Lock()
					prev, ok := last[m.Key]
					if !ok {
						prev = -1
					}
					if m.N != prev+1 {
						bad = append(bad, fmt.Sprintf("%s: %d after %d", m.Key, m.N, prev))
					}
					last[m.Key] = m.N
					runs++
					mu.Unlock()
					return Ack
				})
				subscribe(t, b, &Subscription{Table: tb, Form: form, Ordered: true, Workers: 4, Batch: batch, PollInterval: 10 * time.Millisecond}, h)
				waitFor(t, "every row settled", func() bool { return count(t, pool, "inbox") == 0 })
				if err := b.Stop(bg); err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				defer mu.Unlock()
				if len(bad) > 0 {
					t.Fatalf("seed %d: %d rows out of order, e.g. %v", seed, len(bad), bad[:min(5, len(bad))])
				}
				if runs != keys*perKey {
					t.Fatalf("seed %d: %d runs for %d rows", seed, runs, keys*perKey)
				}
			})
		}
	}
}

// TestUnorderedRowLockRunsKeysConcurrently shows why Ordered exists: without
// it, two workers run rows of one key at once.
func TestUnorderedRowLockRunsKeysConcurrently(t *testing.T) {
	pool, _ := newPool(t)
	tb := Table{Name: "inbox"}
	migrate(t, pool, tb)
	b := newBroker(t, Config{Pool: pool})
	for i := 0; i < 2; i++ {
		if err := Send(bg, b, pool, Repository{Broker: b, Table: tb}, "one", Job{N: i}); err != nil {
			t.Fatal(err)
		}
	}
	both := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	inWork := 0
	h := Messages(func(ctx context.Context, d *Delivery, m Job) Outcome {
		mu.Lock()
		inWork++
		if inWork == 2 {
			once.Do(func() { close(both) })
		}
		mu.Unlock()
		select {
		case <-both:
		case <-time.After(30 * time.Second):
		}
		return Ack
	})
	subscribe(t, b, &Subscription{Table: tb, Workers: 2, PollInterval: 10 * time.Millisecond}, h)
	select {
	case <-both:
	case <-time.After(30 * time.Second):
		t.Fatal("the two rows of one key never ran at once without Ordered")
	}
}
