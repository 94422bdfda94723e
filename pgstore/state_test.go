package pgstore_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/pgtest"
	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/pgstore"
	"github.com/berthrt/berth/relocation"
	"github.com/jackc/pgx/v5/pgxpool"
)

// poolFor is newPool for a benchmark too.
func poolFor(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	db := pgtest.New(tb)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns = 24
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// openOn opens a Store with a manual clock on pool.
func openOn(tb testing.TB, pool *pgxpool.Pool) *pgstore.Store {
	tb.Helper()
	s, err := pgstore.Open(bg, pool, pgstore.Options{ManualClock: true})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// activeObjects makes n objects active on host A (whose lease it starts)
// and returns the writes of their owner, with data "v".
func activeObjects(tb testing.TB, s *pgstore.Store, prefix string, n int) []relocation.StateWrite {
	tb.Helper()
	if _, err := s.RenewLease(bg, "A", 1, 0); err != nil {
		tb.Fatal(err)
	}
	writes := make([]relocation.StateWrite, n)
	for i := range writes {
		obj := relocation.Object{Kind: "k", ID: prefix + strconv.Itoa(i)}
		r, err := s.Reserve(bg, obj, "A")
		if err != nil {
			tb.Fatal(err)
		}
		if r, err = s.Commit(bg, obj, r.Ownership); err != nil {
			tb.Fatal(err)
		}
		writes[i] = relocation.StateWrite{Object: obj, Owner: r.Ownership, Data: []byte("v")}
	}
	return writes
}

// Delete removes the object's state with its row: a later owner of the
// same object starts without one.
func TestDeleteRemovesTheState(t *testing.T) {
	s := newStore(t)
	w := activeObjects(t, s, "del", 1)[0]
	if fenced, err := s.WriteStates(bg, []relocation.StateWrite{w}); err != nil || len(fenced) != 0 {
		t.Fatalf("WriteStates = %v, %v", fenced, err)
	}
	if err := s.Delete(bg, w.Object, w.Owner); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LoadState(bg, w.Object); !errors.Is(err, relocation.ErrNoState) {
		t.Fatalf("LoadState after Delete = %v, want ErrNoState", err)
	}
	again := activeObjects(t, s, "del", 1)[0]
	if _, err := s.LoadState(bg, again.Object); !errors.Is(err, relocation.ErrNoState) {
		t.Fatalf("LoadState of the object made again = %v, want ErrNoState", err)
	}
	// A refused Delete keeps the state.
	if _, err := s.WriteStates(bg, []relocation.StateWrite{again}); err != nil {
		t.Fatal(err)
	}
	stale := again.Owner
	stale.Version++
	var ce *relocation.ConflictError
	if err := s.Delete(bg, again.Object, stale); !errors.As(err, &ce) {
		t.Fatalf("Delete with a stale expectation = %v, want a conflict", err)
	}
	if _, err := s.LoadState(bg, again.Object); err != nil {
		t.Fatalf("LoadState after a refused Delete = %v", err)
	}
}

// A Delete that waits for the lock of a state write which writes the
// object's first state deletes that state too. The write is what
// WriteStates does, held open in a transaction: lock the location row FOR
// SHARE and insert the state row. The Delete's snapshot predates the
// insert's commit, so deleting the state in the Delete's own statement
// would miss it; the foreign key's cascade reads with a fresh snapshot.
func TestDeleteWaitingForAFirstStateWriteDeletesIt(t *testing.T) {
	pool, _ := newPool(t)
	s := openOn(t, pool)
	w := activeObjects(t, s, "race", 1)[0]
	tx, err := pool.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(bg)
	var n int
	if err := tx.QueryRow(bg, `SELECT count(*) FROM (SELECT 1 FROM pgstore_locations WHERE kind = $1 AND id = $2 FOR SHARE) x`,
		w.Object.Kind, w.Object.ID).Scan(&n); err != nil || n != 1 {
		t.Fatalf("lock the location row: %d, %v", n, err)
	}
	if _, err := tx.Exec(bg, `INSERT INTO pgstore_object_state (kind, id, owner_gen, data, written_at) VALUES ($1, $2, $3, 'x', now())`,
		w.Object.Kind, w.Object.ID, int64(w.Owner.OwnerGen)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Delete(bg, w.Object, w.Owner) }()
	testutil.WaitFor(t, "the Delete to wait for the write's lock", func() bool {
		var waiting bool
		err := pool.QueryRow(bg, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%DELETE FROM pgstore_locations%')`).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		return waiting
	})
	if err := tx.Commit(bg); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Delete = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Delete did not return")
	}
	if st, err := s.LoadState(bg, w.Object); !errors.Is(err, relocation.ErrNoState) {
		t.Fatalf("LoadState after Delete = %q, %v; want ErrNoState", st.Data, err)
	}
}

// Generations above math.MaxInt64 match no row: the write is fenced, not
// an error, like an expected value of a conditional write.
func TestStateWriteWithAGenerationAboveMaxInt64IsFenced(t *testing.T) {
	s := newStore(t)
	w := activeObjects(t, s, "big", 1)[0]
	for _, f := range []func(*relocation.Ownership){
		func(o *relocation.Ownership) { o.LeaseGen = math.MaxInt64 + 1 },
		func(o *relocation.Ownership) { o.OwnerGen = math.MaxUint64 },
	} {
		big := w
		f(&big.Owner)
		fenced, err := s.WriteStates(bg, []relocation.StateWrite{big})
		if err != nil || !slices.Equal(fenced, []int{0}) {
			t.Fatalf("WriteStates(%+v) = %v, %v; want fenced [0]", big.Owner, fenced, err)
		}
	}
	if _, err := s.LoadState(bg, w.Object); !errors.Is(err, relocation.ErrNoState) {
		t.Fatalf("LoadState after fenced writes = %v, want ErrNoState", err)
	}
}

// Nil data is stored as an empty state, not refused by the NOT NULL column.
func TestStateWriteOfNilDataStoresAnEmptyState(t *testing.T) {
	s := newStore(t)
	w := activeObjects(t, s, "nil", 1)[0]
	w.Data = nil
	if fenced, err := s.WriteStates(bg, []relocation.StateWrite{w}); err != nil || len(fenced) != 0 {
		t.Fatalf("WriteStates(nil data) = %v, %v", fenced, err)
	}
	st, err := s.LoadState(bg, w.Object)
	if err != nil || len(st.Data) != 0 || st.OwnerGen != w.Owner.OwnerGen {
		t.Fatalf("LoadState = %q (owner generation %d), %v; want empty (%d)", st.Data, st.OwnerGen, err, w.Owner.OwnerGen)
	}
}

// A large batch, shuffled, with fenced writes spread through it: the
// fenced indexes come back ascending, the rest land; a duplicate far into
// a large batch refuses it whole.
func TestLargeStateBatch(t *testing.T) {
	s := newStore(t)
	const n = 1500
	writes := activeObjects(t, s, "large", n)
	slices.Reverse(writes)
	var want []int
	for i := range writes {
		writes[i].Data = []byte("d" + strconv.Itoa(i))
		if i%7 == 3 {
			writes[i].Owner.OwnerGen++
			want = append(want, i)
		}
	}
	dup := append(slices.Clone(writes), writes[n/2])
	if _, err := s.WriteStates(bg, dup); !errors.Is(err, relocation.ErrDuplicateWrite) {
		t.Fatalf("a large batch with a duplicate = %v, want ErrDuplicateWrite", err)
	}
	if _, err := s.LoadState(bg, writes[0].Object); !errors.Is(err, relocation.ErrNoState) {
		t.Fatalf("the refused batch wrote: %v", err)
	}
	fenced, err := s.WriteStates(bg, writes)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fenced, want) {
		t.Fatalf("fenced %d writes %v..., want %d", len(fenced), fenced[:min(len(fenced), 10)], len(want))
	}
	for i, w := range writes {
		st, err := s.LoadState(bg, w.Object)
		if slices.Contains(want, i) {
			if !errors.Is(err, relocation.ErrNoState) {
				t.Fatalf("fenced write %d: LoadState = %q, %v", i, st.Data, err)
			}
			continue
		}
		if err != nil || string(st.Data) != string(w.Data) {
			t.Fatalf("write %d: LoadState = %q, %v; want %q", i, st.Data, err, w.Data)
		}
	}
}

// BenchmarkWriteStates writes batches of distinct active objects' states,
// one WriteStates call (one statement) per batch.
func BenchmarkWriteStates(b *testing.B) {
	for _, size := range []int{1, 100, 1000} {
		b.Run("batch="+strconv.Itoa(size), func(b *testing.B) {
			pool := poolFor(b)
			s := openOn(b, pool)
			writes := activeObjects(b, s, "bench", size)
			b.ResetTimer()
			for b.Loop() {
				fenced, err := s.WriteStates(bg, writes)
				if err != nil || len(fenced) != 0 {
					b.Fatalf("WriteStates = %v, %v", fenced, err)
				}
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "writes/s")
		})
	}
}

// BenchmarkRawConditionalUpdate is BenchmarkWriteStates' baseline: the
// same writes, each one plain conditional UPDATE on the pool (one round
// trip and one commit per write), with the fence as an EXISTS and no row
// lock.
func BenchmarkRawConditionalUpdate(b *testing.B) {
	const update = `UPDATE pgstore_object_state SET data = $3 WHERE kind = $1 AND id = $2 AND EXISTS (
	SELECT 1 FROM pgstore_locations l WHERE l.kind = $1 AND l.id = $2 AND l.state = 2
		AND l.host = $4 AND l.lease_gen = $5 AND l.owner_gen = $6)`
	for _, size := range []int{1, 100, 1000} {
		b.Run("batch="+strconv.Itoa(size), func(b *testing.B) {
			pool := poolFor(b)
			s := openOn(b, pool)
			writes := activeObjects(b, s, "bench", size)
			if _, err := s.WriteStates(bg, writes); err != nil { // the rows the UPDATEs find
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				for _, w := range writes {
					tag, err := pool.Exec(bg, update, w.Object.Kind, w.Object.ID, w.Data,
						w.Owner.Host, int64(w.Owner.LeaseGen), int64(w.Owner.OwnerGen))
					if err != nil || tag.RowsAffected() != 1 {
						b.Fatalf("UPDATE = %v, %v", tag, err)
					}
				}
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "writes/s")
		})
	}
}
