package pgbridge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/payload"
)

// tally records runs and successful settlements per job.
type tally struct {
	mu      sync.Mutex
	runs    map[int]int
	settled map[int]int
	errs    []error
}

func newTally() *tally { return &tally{runs: map[int]int{}, settled: map[int]int{}} }

func (ta *tally) ran(n int) {
	ta.mu.Lock()
	ta.runs[n]++
	ta.mu.Unlock()
}

// onSettled is a Subscription.OnSettled that keys settlements by row id.
func (ta *tally) onSettled(d *Delivery, o Outcome, err error) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	if err != nil {
		ta.errs = append(ta.errs, err)
		return
	}
	ta.settled[int(d.ID)]++
}

// check: every job ran at least once, no row was settled twice.
func (ta *tally) check(t *testing.T, jobs int) {
	t.Helper()
	ta.mu.Lock()
	defer ta.mu.Unlock()
	for i := 0; i < jobs; i++ {
		if ta.runs[i] == 0 {
			t.Errorf("job %d never ran", i)
		}
	}
	for id, n := range ta.settled {
		if n > 1 {
			t.Errorf("row %d settled %d times", id, n)
		}
	}
}

// exactlyOnce: jobs 0..jobs-1 each ran exactly once, and nothing else ran.
func (ta *tally) exactlyOnce(t *testing.T, jobs int) {
	t.Helper()
	ta.mu.Lock()
	defer ta.mu.Unlock()
	for i := 0; i < jobs; i++ {
		if ta.runs[i] != 1 {
			t.Errorf("job %d ran %d times", i, ta.runs[i])
		}
	}
	if len(ta.runs) != jobs {
		t.Errorf("%d distinct jobs ran, want %d", len(ta.runs), jobs)
	}
}

func sendJobs(t *testing.T, b *Broker, tb Table, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if err := Send(bg, b, b.pool, Repository{Broker: b, Table: tb}, fmt.Sprint("k", i%10), Job{N: i}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBackendKilledMidBatchRedeliversBatch: the row-lock claim's backend is
// terminated while its handler runs; the settlement fails, the batch is
// redelivered, and every row is settled exactly once.
func TestBackendKilledMidBatchRedeliversBatch(t *testing.T) {
	pool, _ := newPool(t)
	tb := Table{Name: "inbox"}
	migrate(t, pool, tb)
	b := newBroker(t, Config{Pool: pool})
	const jobs = 40
	sendJobs(t, b, tb, jobs)
	ta := newTally()
	inside := make(chan struct{})
	proceed := make(chan struct{})
	var first atomic.Bool
	h := Batches(func(ctx context.Context, items []Item[Job]) {
		if first.CompareAndSwap(false, true) {
			close(inside)
			<-proceed
		}
		for _, it := range items {
			ta.ran(it.Msg.N)
		}
	})
	subscribe(t, b, &Subscription{Table: tb, Batch: 16, PollInterval: 10 * time.Millisecond, OnSettled: ta.onSettled}, h)
	<-inside
	var killed int
	if err := pool.QueryRow(bg, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND state = 'idle in transaction'`).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	if killed != 1 {
		t.Fatalf("killed %d backends, want the claim's one", killed)
	}
	close(proceed)
	waitFor(t, "every row settled", func() bool { return count(t, pool, "inbox") == 0 })
	if err := b.Stop(bg); err != nil {
		t.Fatal(err)
	}
	ta.check(t, jobs)
	st := b.Stats()
	if st.Rollbacks != 1 {
		t.Errorf("rollbacks %d, want 1", st.Rollbacks)
	}
	if len(ta.errs) != 16 || !errors.Is(ta.errs[0], ErrBatchRolledBack) || !errors.Is(ta.errs[0], payload.Unavailable) {
		t.Errorf("settle errors %d (%v), want the 16 rows of the killed batch with ErrBatchRolledBack", len(ta.errs), ta.errs[:min(1, len(ta.errs))])
	}
	if st.Acked != jobs {
		t.Errorf("acked %d, want %d", st.Acked, jobs)
	}
}

// TestPostgresRestartedMidRunSubscriptionsContinue: the server restarts
// (as after a crash) while every form is claiming; the subscriptions
// reconnect and every row is handled, none settled twice.
func TestPostgresRestartedMidRunSubscriptionsContinue(t *testing.T) {
	for _, form := range []Form{RowLock, Lease, Advisory} {
		t.Run(form.String(), func(t *testing.T) {
			pool, db := newPool(t)
			if db.Server == nil {
				t.Skip("skipped: BERTH_TEST_DATABASE_URL names an external server, which this test does not restart")
			}
			tb := Table{Name: "inbox"}
			migrate(t, pool, tb)
			b := newBroker(t, Config{Pool: pool, ListenNotify: true, Logger: testLog(t)})
			const jobs = 400
			sendJobs(t, b, tb, jobs)
			ta := newTally()
			var ran atomic.Int64
			h := Messages(func(ctx context.Context, d *Delivery, m Job) Outcome {
				ta.ran(m.N)
				ran.Add(1)
				time.Sleep(time.Millisecond) // work, so the restart lands mid-run
				return Ack
			})
			subscribe(t, b, &Subscription{Table: tb, Form: form, Workers: 3, Batch: 4, Lease: 2 * time.Second,
				PollInterval: 20 * time.Millisecond, OnSettled: ta.onSettled}, h)
			waitFor(t, "a tenth of the rows ran", func() bool { return ran.Load() >= jobs/10 })
			// The listener listens before the restart: its first connection
			// made after the restart would not be a reconnection (on a slow
			// machine its first one can come late).
			waitFor(t, "the listener to listen", func() bool {
				var n int
				err := pool.QueryRow(bg, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %'").Scan(&n)
				return err == nil && n > 0
			})
			if err := db.Server.Restart(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "every row settled after the restart", func() bool {
				var n int
				if err := pool.QueryRow(bg, "SELECT count(*) FROM inbox").Scan(&n); err != nil {
					return false // the pool reconnects
				}
				return n == 0
			})
			// The listener notices its connection ended at its next wait.
			waitFor(t, "the listener reconnected", func() bool { return b.Stats().Reconnects > 0 })
			if err := b.Stop(bg); err != nil {
				t.Fatal(err)
			}
			ta.check(t, jobs)
		})
	}
}

// TestLeaseStalledWorkerLosesLeaseAndDeletesNothing: a worker stalls past
// its lease (its extensions stop, as if the process were paused); another
// claims the row; the stale settlement gets ErrLeaseLost and deletes
// nothing.
func TestLeaseStalledWorkerLosesLeaseAndDeletesNothing(t *testing.T) {
	pool, _ := newPool(t)
	tb := Table{Name: "inbox"}
	migrate(t, pool, tb)
	b1 := newBroker(t, Config{Pool: pool})
	sendJobs(t, b1, tb, 1)
	stalled := make(chan struct{})
	resume := make(chan struct{})
	var lostSeen atomic.Bool
	var staleErr error
	settled1 := make(chan struct{})
	subscribe(t, b1, &Subscription{Table: tb, Form: Lease, Lease: time.Hour, PollInterval: 10 * time.Millisecond,
		OnSettled: func(d *Delivery, o Outcome, err error) { staleErr = err; close(settled1) }},
		Messages(func(ctx context.Context, d *Delivery, m Job) Outcome {
			close(stalled)
			<-resume
			lostSeen.Store(d.LeaseLost())
			return Ack
		}))
	<-stalled
	// The stalled worker's lease runs out: no extension reached the row.
	if _, err := pool.Exec(bg, "UPDATE inbox SET locked_until = now() - interval '1 second'"); err != nil {
		t.Fatal(err)
	}
	b2 := newBroker(t, Config{Pool: pool})
	claimed2 := make(chan int, 1)
	subscribe(t, b2, &Subscription{Table: tb, Form: Lease, Lease: time.Hour, PollInterval: 10 * time.Millisecond},
		Messages(func(ctx context.Context, d *Delivery, m Job) Outcome {
			claimed2 <- d.Attempt
			return RetryAfter(time.Hour, "kept for the test")
		}))
	if a := <-claimed2; a != 2 {
		t.Errorf("second claim attempt %d, want 2 (counted at claim)", a)
	}
	if err := b2.Stop(bg); err != nil {
		t.Fatal(err)
	}
	close(resume)
	<-settled1
	if !errors.Is(staleErr, ErrLeaseLost) || !errors.Is(staleErr, payload.Rejected) {
		t.Fatalf("stale settlement: %v, want ErrLeaseLost", staleErr)
	}
	if n := count(t, pool, "inbox"); n != 1 {
		t.Fatalf("the stale Ack deleted the row: %d rows left", n)
	}
	if b1.Stats().LeaseLost != 1 {
		t.Errorf("LeaseLost %d, want 1", b1.Stats().LeaseLost)
	}
}

// TestLeaseExtendedWhileHandlerRuns: a handler running for several leases
// keeps its row: nobody else claims it and its settlement succeeds.
func TestLeaseExtendedWhileHandlerRuns(t *testing.T) {
	for _, conns := range []int32{24, 1} {
		t.Run(fmt.Sprintf("pool=%d", conns), func(t *testing.T) { testLeaseExtended(t, conns) })
	}
}

// testLeaseExtended: with a pool of as many connections as workers, the
// extension still finds one (a lease claim holds none while its handler
// runs).
func testLeaseExtended(t *testing.T, conns int32) {
	pool := smallPool(t, conns)
	tb := Table{Name: "inbox"}
	migrate(t, pool, tb)
	b := newBroker(t, Config{Pool: pool})
	sendJobs(t, b, tb, 1)
	const lease = 200 * time.Millisecond
	var runs atomic.Int32
	tokens := make(chan time.Time, 2)
	done := make(chan error, 1)
	subscribe(t, b, &Subscription{Table: tb, Form: Lease, Lease: lease, Workers: 2, PollInterval: 10 * time.Millisecond,
		OnSettled: func(d *Delivery, o Outcome, err error) { done <- err }},
		Messages(func(ctx context.Context, d *Delivery, m Job) Outcome {
			runs.Add(1)
			tokens <- d.LeaseToken()
			var tok time.Time
			if err := pool.QueryRow(bg, "SELECT locked_until FROM inbox").Scan(&tok); err != nil {
				t.Error(err)
			}
			// Poll until an extension moved the token twice.
			deadline := time.Now().Add(30 * time.Second)
			for d.LeaseToken().Sub(tok) < lease && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			tokens <- d.LeaseToken()
			return Ack
		}))
	if err := <-done; err != nil {
		t.Fatalf("settlement after extensions: %v", err)
	}
	t0, t1 := <-tokens, <-tokens
	if !t1.After(t0) {
		t.Errorf("lease token not extended: %v then %v", t0, t1)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("row ran %d times", n)
	}
	if n := count(t, pool, "inbox"); n != 0 {
		t.Errorf("%d rows left", n)
	}
}

// TestPoisonRowsDeadLetteredRestFlows: an undecodable row and a row whose
// handler panics every time end in the dead-letter table (the second after
// MaxAttempts); every other row is handled.
func TestPoisonRowsDeadLetteredRestFlows(t *testing.T) {
	for _, form := range []Form{RowLock, Lease, Advisory} {
		t.Run(form.String(), func(t *testing.T) {
			pool, _ := newPool(t)
			tb := Table{Name: "inbox", DeadLetter: "inbox_dead"}
			migrate(t, pool, tb)
			b := newBroker(t, Config{Pool: pool})
			const jobs = 30
			sendJobs(t, b, tb, jobs)
			if _, err := pool.Exec(bg, `INSERT INTO inbox (key, type, content_type, payload) VALUES ('bad', 'x', 'application/json', 'not json')`); err != nil {
				t.Fatal(err)
			}
			ta := newTally()
			var panics atomic.Int32
			h := Messages(func(ctx context.Context, d *Delivery, m Job) Outcome {
				if m.N == 7 {
					panics.Add(1)
					panic("poison")
				}
				ta.ran(m.N)
				return Ack
			})
			subscribe(t, b, &Subscription{Table: tb, Form: form, Workers: 2, Batch: 4, MaxAttempts: 3,
				DecodePolicy: DecodeDeadLetter, RetryDelay: func(int) time.Duration { return 0 },
				PollInterval: 10 * time.Millisecond}, h)
			waitFor(t, "inbox empty", func() bool { return count(t, pool, "inbox") == 0 })
			if err := b.Stop(bg); err != nil {
				t.Fatal(err)
			}
			if n := panics.Load(); n != 3 {
				t.Errorf("poison handler ran %d times, want MaxAttempts = 3", n)
			}
			var reasons []string
			rows, err := pool.Query(bg, "SELECT key, reason FROM inbox_dead ORDER BY id")
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var k, r string
				if err := rows.Scan(&k, &r); err != nil {
					t.Fatal(err)
				}
				reasons = append(reasons, k+": "+r)
			}
			if len(reasons) != 2 {
				t.Fatalf("dead letters %q, want the panicking row and the undecodable one", reasons)
			}
			for i := 0; i < jobs; i++ {
				if i != 7 && ta.runs[i] != 1 {
					t.Errorf("job %d ran %d times", i, ta.runs[i])
				}
			}
			st := b.Stats()
			if st.DecodeFailures != 1 || st.DeadLettered != 2 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestClaimPastMaxAttemptsDeadLettersWithoutRunning: in the forms that
// count the attempt at claim (lease, advisory), a row whose handler crashed
// the process every time is dead-lettered at its next claim without
// running.
func TestClaimPastMaxAttemptsDeadLettersWithoutRunning(t *testing.T) {
	for _, form := range []Form{Lease, Advisory} {
		t.Run(form.String(), func(t *testing.T) {
			pool, _ := newPool(t)
			tb := Table{Name: "inbox", DeadLetter: "inbox_dead"}
			migrate(t, pool, tb)
			b := newBroker(t, Config{Pool: pool})
			sendJobs(t, b, tb, 2)
			// Row 1 was claimed three times by workers that died.
			if _, err := pool.Exec(bg, "UPDATE inbox SET attempt = 3 WHERE id = 1"); err != nil {
				t.Fatal(err)
			}
			var ran sync.Map
			subscribe(t, b, &Subscription{Table: tb, Form: form, MaxAttempts: 3, PollInterval: 10 * time.Millisecond},
				Messages(func(ctx context.Context, d *Delivery, m Job) Outcome { ran.Store(d.ID, d.Attempt); return Ack }))
			waitFor(t, "inbox drained", func() bool { return count(t, pool, "inbox") == 0 })
			if _, ok := ran.Load(int64(1)); ok {
				t.Error("the handler ran a row past MaxAttempts")
			}
			if a, ok := ran.Load(int64(2)); !ok || a.(int) != 1 {
				t.Errorf("row 2: ran %v with attempt %v, want attempt 1", ok, a)
			}
			var attempt int
			var reason string
			if err := pool.QueryRow(bg, "SELECT attempt, reason FROM inbox_dead WHERE id = 1").Scan(&attempt, &reason); err != nil {
				t.Fatal(err)
			}
			if attempt != 4 {
				t.Errorf("dead letter attempt %d, want 4 (counted at the claim)", attempt)
			}
		})
	}
}

// TestGracefulStopSettlesInFlightHardCloseLeavesThem: Stop lets a running
// handler finish and settles its row; Close leaves the row to be claimed
// again.
func TestGracefulStopSettlesInFlightHardCloseLeavesThem(t *testing.T) {
	for _, form := range []Form{RowLock, Lease, Advisory} {
		for _, hard := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/hard=%v", form, hard), func(t *testing.T) {
				pool, _ := newPool(t)
				tb := Table{Name: "inbox"}
				migrate(t, pool, tb)
				b := newBroker(t, Config{Pool: pool})
				sendJobs(t, b, tb, 1)
				inside := make(chan struct{})
				subscribe(t, b, &Subscription{Table: tb, Form: form, Lease: time.Hour, PollInterval: 10 * time.Millisecond},
					Messages(func(ctx context.Context, d *Delivery, m Job) Outcome {
						close(inside)
						if hard {
							<-ctx.Done() // Close cancels handlers
						} else {
							time.Sleep(50 * time.Millisecond)
						}
						return Ack
					}))
				<-inside
				if hard {
					b.Close()
				} else if err := b.Stop(bg); err != nil {
					t.Fatal(err)
				}
				var n int
				var locked bool
				if err := pool.QueryRow(bg, "SELECT count(*), coalesce(bool_or(locked_until IS NOT NULL), false) FROM inbox").Scan(&n, &locked); err != nil {
					t.Fatal(err)
				}
				if hard && n != 1 {
					t.Fatalf("hard close settled the in-flight row (%d rows left)", n)
				}
				if !hard && n != 0 {
					t.Fatalf("graceful stop left the in-flight row unsettled (%d rows left)", n)
				}
				if hard && form != Lease && locked {
					t.Error("row still marked locked")
				}
				if hard && form == RowLock {
					// The claim's connection was closed: once its backend
					// notices (asynchronously), the transaction rolls back
					// and the row is claimable.
					waitFor(t, "the row claimable after the hard close", func() bool {
						var free int
						err := pool.QueryRow(bg, "SELECT count(*) FROM (SELECT id FROM inbox FOR UPDATE SKIP LOCKED) x").Scan(&free)
						return err == nil && free == 1
					})
				}
			})
		}
	}
}
