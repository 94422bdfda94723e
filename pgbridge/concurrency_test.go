package pgbridge

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The rows of one claim run side by side (Subscription.Concurrency,
// by default up to the batch) — the rows of one key one after another, in
// id order. In the row-lock form they share the claim's transaction, one
// statement at a time: every row's write commits with the claim. With
// Concurrency 1 they run one after another. (A batch's rows used to run
// one after another: with a handler that waits 1 ms, a batch of 1,000 took
// a second.)
func TestABatchsRowsRunSideBySideAndEachKeysInIDOrder(t *testing.T) {
	for _, c := range []struct {
		form Form
		conc int
		want int // the most rows running at once
	}{{RowLock, 0, 4}, {Lease, 0, 4}, {RowLock, 1, 1}, {Lease, 3, 3}} {
		t.Run(fmt.Sprintf("%v/concurrency=%d", c.form, c.conc), func(t *testing.T) {
			pool, _ := newPool(t)
			tb := Table{Name: "inbox"}
			migrate(t, pool, tb)
			if _, err := pool.Exec(bg, "CREATE TABLE side (key text, n int)"); err != nil {
				t.Fatal(err)
			}
			b := newBroker(t, Config{Pool: pool})
			const keys, per = 4, 5
			for i := range keys * per {
				if err := Send(bg, b, pool, Repository{Broker: b, Table: tb}, fmt.Sprint("k", i%keys), Job{N: i}); err != nil {
					t.Fatal(err)
				}
			}
			var mu sync.Mutex
			seen := map[string][]int{}
			busy := map[string]bool{}
			var running, most atomic.Int32
			subscribe(t, b, &Subscription{Table: tb, Form: c.form, Batch: keys * per, Concurrency: c.conc, PollInterval: 10 * time.Millisecond},
				Messages(func(ctx context.Context, d *Delivery, m Job) Outcome {
					mu.Lock()
					if busy[d.Key] {
						t.Errorf("two rows of key %s at once", d.Key)
					}
					busy[d.Key] = true
					seen[d.Key] = append(seen[d.Key], m.N)
					mu.Unlock()
					n := running.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					if tx := d.Tx(); tx != nil {
						var echo int
						if err := tx.QueryRow(ctx, "SELECT $1::int FROM pg_sleep(0.01)", m.N).Scan(&echo); err != nil || echo != m.N {
							t.Errorf("in the claim's transaction: %v, %d", err, echo)
						}
						if _, err := tx.Exec(ctx, "INSERT INTO side VALUES ($1, $2)", d.Key, m.N); err != nil {
							t.Error(err)
						}
					} else {
						time.Sleep(10 * time.Millisecond)
					}
					time.Sleep(20 * time.Millisecond)
					running.Add(-1)
					mu.Lock()
					busy[d.Key] = false
					mu.Unlock()
					return Ack
				}))
			waitFor(t, "every row acked", func() bool { return b.Stats().Acked == keys*per })
			b.Close()
			if got := int(most.Load()); got != c.want {
				t.Errorf("at most %d rows ran at once, want %d", got, c.want)
			}
			mu.Lock()
			defer mu.Unlock()
			for k, ns := range seen {
				if !slices.IsSorted(ns) || len(ns) != per {
					t.Errorf("key %s ran %v: want %d rows in id order", k, ns, per)
				}
			}
			if n := count(t, pool, "side"); c.form == RowLock && n != keys*per {
				t.Errorf("%d writes of the handlers committed, want %d", n, keys*per)
			}
		})
	}
}
