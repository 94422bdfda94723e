package pgbridge

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

type Job struct {
	Key string
	N   int
}

func TestMessagesEveryFormRunsEachRowOnce(t *testing.T) {
	for _, form := range []Form{RowLock, Lease, Advisory} {
		for _, batch := range []int{1, 16} {
			t.Run(fmt.Sprintf("%s/batch=%d", form, batch), func(t *testing.T) {
				pool, _ := newPool(t)
				tb := Table{Name: "inbox", DeadLetter: "inbox_dead"}
				migrate(t, pool, tb)
				b := newBroker(t, Config{Pool: pool})
				const rows = 300
				for i := 0; i < rows; i++ {
					if err := Send(bg, b, pool, Repository{Broker: b, Table: tb}, fmt.Sprint("k", i%7), Job{N: i}); err != nil {
						t.Fatal(err)
					}
				}
				var mu sync.Mutex
				seen := map[int]int{}
				err := b.Subscribe(&Subscription{Table: tb, Form: form, Workers: 3, Batch: batch, PollInterval: 20 * time.Millisecond},
					Messages(func(ctx context.Context, d *Delivery, m Job) Outcome {
						mu.Lock()
						seen[m.N]++
						mu.Unlock()
						return Ack
					}))
				if err != nil {
					t.Fatal(err)
				}
				if err := b.Start(); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "every row settled", func() bool { return count(t, pool, "inbox") == 0 })
				if err := b.Stop(bg); err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				defer mu.Unlock()
				for i := 0; i < rows; i++ {
					if seen[i] != 1 {
						t.Errorf("row %d ran %d times", i, seen[i])
					}
				}
				if st := b.Stats(); st.Claimed != rows || st.Acked != rows {
					t.Errorf("stats %+v", st)
				}
			})
		}
	}
}
