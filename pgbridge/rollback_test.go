package pgbridge

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Row lock: a handler statement the server refuses aborts the claim's
// transaction, which rolls back. That failure is the row's retry, counted
// outside the rolled-back transaction: the subscription's retry delay and
// MaxAttempts end the loop, and the row is dead-lettered after
// MaxAttempts runs — it is not claimed again at once, as it was, for ever.
func TestRowLockAStatementRefusedInTheClaimsTransactionIsACountedRetry(t *testing.T) {
	pool, tb, b := deadLetterInbox(t)
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
	// The dead-lettering commits before the broker counts it: wait for the
	// count too, or Close may cut the settlement's answer first.
	waitFor(t, "the row dead-lettered and counted", func() bool {
		return count(t, pool, "inbox_dead") == 1 && b.Stats().DeadLettered == 1
	})
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
	pool, tb, b := deadLetterInbox(t)
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

// A subscription on a table that does not exist, or naming a column its
// table does not have, fails Start (or Subscribe, once started) with
// NotFound, and nothing starts — it used to start and fail every claim,
// reported only to a logger that discards by default.
func TestStartFailsOnAMissingTableOrColumn(t *testing.T) {
	pool, _ := newPool(t)
	migrate(t, pool, Table{Name: "inbox"})
	h := Messages(func(ctx context.Context, d *Delivery, m Job) Outcome { return Ack })
	for _, sub := range []*Subscription{
		{Table: Table{Name: "nope"}},
		{Table: Table{Name: "inbox", Columns: Columns{LastError: "why"}}},
		{Table: Table{Name: "inbox", DeadLetter: "nope_dead"}, MaxAttempts: 3},
	} {
		b := newBroker(t, Config{Pool: pool})
		if err := b.Subscribe(sub, h); err != nil {
			t.Fatal(err)
		}
		if err := b.Start(); !errors.Is(err, payload.NotFound) {
			t.Fatalf("Start with table %+v: %v, want NotFound", sub.Table, err)
		}
		if st := b.Stats(); st.Claimed != 0 || st.ClaimErrors != 0 {
			t.Fatalf("something ran: %+v", st)
		}
	}
	b := newBroker(t, Config{Pool: pool})
	subscribe(t, b, &Subscription{Table: Table{Name: "inbox"}}, h)
	if err := b.Subscribe(&Subscription{Table: Table{Name: "nope"}}, h); !errors.Is(err, payload.NotFound) {
		t.Fatalf("Subscribe on a started broker, a missing table: %v, want NotFound", err)
	}
}

// A claim that fails (here: the table was dropped under a running
// subscription) is counted and reported to the observer, not only logged.
func TestAFailedClaimIsCountedAndObserved(t *testing.T) {
	pool, _ := newPool(t)
	tb := Table{Name: "inbox"}
	migrate(t, pool, tb)
	obs := &claimFailures{}
	b := newBroker(t, Config{Pool: pool, Observer: obs})
	subscribe(t, b, &Subscription{Table: tb, PollInterval: 10 * time.Millisecond},
		Messages(func(ctx context.Context, d *Delivery, m Job) Outcome { return Ack }))
	if _, err := pool.Exec(bg, "DROP TABLE inbox"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "failed claims counted", func() bool { return b.Stats().ClaimErrors >= 2 })
	b.Close()
	if n := obs.n.Load(); n < 2 || uint64(n) != b.Stats().ClaimErrors {
		t.Fatalf("the observer heard of %d failed claims, Stats counted %d", n, b.Stats().ClaimErrors)
	}
}

// claimFailures is an Observer that counts ClaimFailed.
type claimFailures struct {
	nopObserver
	n atomic.Int64
}

func (o *claimFailures) ClaimFailed(string, error) { o.n.Add(1) }

// Retry (no delay of the handler's choosing) waits the subscription's
// RetryDelay, and with a dead-letter table a row that always asks for a
// retry is dead-lettered after DefaultMaxAttempts runs: Retry used to make
// the row ready at once, for ever (thousands of runs a second).
func TestRetryWaitsTheRetryDelayAndEndsAtTheDefaultMaxAttempts(t *testing.T) {
	for _, delay := range []time.Duration{time.Hour, 0} {
		t.Run("delay="+delay.String(), func(t *testing.T) {
			pool, tb, b := deadLetterInbox(t)
			sendJobs(t, b, tb, 1)
			var runs atomic.Int32
			subscribe(t, b, &Subscription{Table: tb, PollInterval: 10 * time.Millisecond,
				RetryDelay: func(int) time.Duration { return delay }},
				Messages(func(ctx context.Context, d *Delivery, m Job) Outcome { runs.Add(1); return Retry }))
			if delay == 0 {
				waitFor(t, "the row dead-lettered", func() bool { return count(t, pool, "inbox_dead") == 1 })
				b.Close()
				if runs.Load() != DefaultMaxAttempts {
					t.Fatalf("the row ran %d times, want %d", runs.Load(), DefaultMaxAttempts)
				}
				return
			}
			waitFor(t, "the retry settled", func() bool { return b.Stats().Retried == 1 })
			var attempt int
			var later bool
			if err := pool.QueryRow(bg, "SELECT attempt, run_at > now() + interval '50 minutes' FROM inbox").Scan(&attempt, &later); err != nil {
				t.Fatal(err)
			}
			b.Close()
			if attempt != 1 || !later || runs.Load() != 1 {
				t.Fatalf("attempt %d, an hour away %v, %d runs; want 1, true, 1", attempt, later, runs.Load())
			}
		})
	}
}

// Backoff is attempt⁴ seconds within ±10 %, capped at a day; attempt 0 (or
// less) counts as the first.
func TestBackoffIsAttemptToTheFourthWithJitterAndACap(t *testing.T) {
	for a := -1; a <= 40; a++ {
		f := float64(max(a, 1))
		want := min(time.Duration(f*f*f*f*float64(time.Second)), 24*time.Hour)
		for range 20 {
			if d := Backoff(a); d < want*9/10 || d > want*11/10 {
				t.Fatalf("Backoff(%d) = %v, want %v ± 10 %%", a, d, want)
			}
		}
	}
}

// deadLetterInbox makes the table inbox, with the dead-letter table
// inbox_dead, on a fresh database, and a broker on it.
func deadLetterInbox(t *testing.T) (*pgxpool.Pool, Table, *Broker) {
	t.Helper()
	pool, _ := newPool(t)
	tb := Table{Name: "inbox", DeadLetter: "inbox_dead"}
	migrate(t, pool, tb)
	return pool, tb, newBroker(t, Config{Pool: pool})
}

// Lease and advisory forms: each row of a batch settles on its own. A
// settlement statement the server refuses for one row (a trigger refuses
// row 2's delete) used to leave the whole batch unsettled, claimed again
// and refused again; now the other rows settle and the refused one is a
// counted retry.
func TestLeaseAndAdvisoryBatchesSettleEachRowOnItsOwn(t *testing.T) {
	for _, form := range []Form{Lease, Advisory} {
		t.Run(form.String(), func(t *testing.T) {
			pool, tb, b := deadLetterInbox(t)
			sendJobs(t, b, tb, 4) // keys k0 … k3
			if _, err := pool.Exec(bg, `CREATE FUNCTION refuse2() RETURNS trigger AS $$
				BEGIN IF OLD.id = 2 THEN RAISE EXCEPTION 'refused'; END IF; RETURN OLD; END $$ LANGUAGE plpgsql;
				CREATE TRIGGER refuse BEFORE DELETE ON inbox FOR EACH ROW EXECUTE FUNCTION refuse2();`); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var errs []error
			subscribe(t, b, &Subscription{Table: tb, Form: form, Batch: 4, PollInterval: 10 * time.Millisecond,
				RetryDelay: func(int) time.Duration { return time.Hour },
				OnSettled:  func(d *Delivery, o Outcome, err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }},
				Messages(func(ctx context.Context, d *Delivery, m Job) Outcome { return Ack }))
			waitFor(t, "every row but 2 settled", func() bool { st := b.Stats(); return st.Acked == 3 && st.Retried == 1 })
			b.Close()
			var id, attempt int
			var why string
			var later bool
			if err := pool.QueryRow(bg, "SELECT id, attempt, last_error, run_at > now() + interval '50 minutes' FROM inbox").Scan(&id, &attempt, &why, &later); err != nil {
				t.Fatal(err)
			}
			if id != 2 || attempt != 1 || !later || !strings.Contains(why, "refused") {
				t.Fatalf("left: row %d at attempt %d, an hour away %v, last_error %q; want row 2 retried at attempt 1", id, attempt, later, why)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(errs) != 4 || errors.Join(errs...) != nil {
				t.Fatalf("OnSettled errors %v, want 4 settlements without one", errs)
			}
		})
	}
}
