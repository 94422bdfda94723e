package pgbridge

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Row lock: a handler statement the server refuses aborts the claim's
// transaction, which rolls back. That failure is the row's retry, counted
// outside the rolled-back transaction: the subscription's retry delay and
// MaxAttempts end the loop, and the row is dead-lettered after
// MaxAttempts runs — it is not claimed again at once, as it was, for ever.
func TestRowLockAStatementRefusedInTheClaimsTransactionIsACountedRetry(t *testing.T) {
	pool, _ := newPool(t)
	tb := Table{Name: "inbox", DeadLetter: "inbox_dead"}
	migrate(t, pool, tb)
	b := newBroker(t, Config{Pool: pool})
	sendJobs(t, b, tb, 1)
	var mu sync.Mutex
	var attempts []int
	subscribe(t, b, &Subscription{Table: tb, MaxAttempts: 3, PollInterval: 10 * time.Millisecond,
		RetryDelay: func(int) time.Duration { return 0 }},
		Messages(func(ctx context.Context, d *Delivery, m Job) Outcome {
			mu.Lock()
			attempts = append(attempts, d.Attempt)
			mu.Unlock()
			if _, err := d.Tx().Exec(ctx, "SELECT 1/0"); err == nil {
				t.Error("1/0 did not fail")
			}
			return Ack // the statement's failure rolls the claim back all the same
		}))
	waitFor(t, "the row dead-lettered", func() bool { return count(t, pool, "inbox_dead") == 1 })
	b.Close()
	mu.Lock()
	defer mu.Unlock()
	if count(t, pool, "inbox") != 0 || !slices.Equal(attempts, []int{1, 2, 3}) {
		t.Fatalf("rows left %d; the handler ran with attempts %v, want [1 2 3]", count(t, pool, "inbox"), attempts)
	}
	if st := b.Stats(); st.Rollbacks != 3 || st.DeadLettered != 1 {
		t.Fatalf("stats %+v: want 3 rollbacks, 1 dead-lettered", st)
	}
}

// Row lock: a batch whose settlement a statement fails for one of its rows
// (a trigger refuses row 5's delete) rolls back whole, as the spec says.
// Its rows are then claimed again one at a time, so the other rows settle
// and the one that fails is a counted retry on its own: one bad row never
// stops the subscription.
func TestRowLockABatchThatRolledBackRunsItsRowsOneAtATime(t *testing.T) {
	pool, _ := newPool(t)
	tb := Table{Name: "inbox", DeadLetter: "inbox_dead"}
	migrate(t, pool, tb)
	b := newBroker(t, Config{Pool: pool})
	sendJobs(t, b, tb, 20)
	if _, err := pool.Exec(bg, `CREATE FUNCTION refuse5() RETURNS trigger AS $$
		BEGIN IF OLD.id = 5 THEN RAISE EXCEPTION 'refused'; END IF; RETURN OLD; END $$ LANGUAGE plpgsql;
		CREATE TRIGGER refuse BEFORE DELETE ON inbox FOR EACH ROW EXECUTE FUNCTION refuse5();`); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	subscribe(t, b, &Subscription{Table: tb, Batch: 10, PollInterval: 10 * time.Millisecond,
		RetryDelay: func(int) time.Duration { return time.Hour }},
		Messages(func(ctx context.Context, d *Delivery, m Job) Outcome { runs.Add(1); return Ack }))
	waitFor(t, "every row but 5 settled", func() bool { return count(t, pool, "inbox") == 1 })
	var id, attempt int
	if err := pool.QueryRow(bg, "SELECT id, attempt FROM inbox").Scan(&id, &attempt); err != nil {
		t.Fatal(err)
	}
	b.Close()
	// 20 rows in two batches; the one with row 5 ran again row by row.
	if id != 5 || attempt != 1 || runs.Load() != 30 {
		t.Fatalf("left: row %d at attempt %d (want 5 at 1); %d handler runs, want 30", id, attempt, runs.Load())
	}
}
