package actor_test

// Durable state benchmarks: persistent kinds (Kind.PersistStateJSON) on
// Postgres (pgstore.Store as the state store) next to the loop a user
// would write by hand — one conditional UPDATE per turn on a pgxpool — in
// the same run, on the same throwaway server (started with fsync on, as
// pgtest does for a test binary run with -test.bench). They skip without
// Postgres. Each benchmark sets its host and database up once, in the
// parent benchmark; its sub-benchmarks measure.
//
//   - BenchmarkDurableTurns: closed-loop Asks to 1,000 persistent objects
//     from C goroutines; each reply leaves only once its turn's write is
//     durable.
//   - BenchmarkRawPgxConditionalUpdate: the same objects, goroutines and
//     pool, each turn one autocommit UPDATE … WHERE id AND owner_gen.
//   - BenchmarkAskPersistentVsPlain: one goroutine's Ask latency, to a
//     persistent object and to a plain one, beside one raw UPDATE and one
//     call of the host's flush statement.
//   - BenchmarkMovePausePersistentVsPlain: move pauses between two hosts
//     sharing one pgstore.Store, persistent against plain.

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/internal/pgtest"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/pgstore"
	"github.com/berthrt/berth/relocation"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestMain lets the package's tests and benchmarks take a database from
// pgtest (pgtest.New); it stops the throwaway server, if one started.
func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	// durableObjects is how many objects the throughput benchmarks spread
	// their turns over.
	durableObjects = 1000
	// durablePoolConns is the pool size of both the host's store and the
	// raw loop: the raw loop's best of 4, 8, 16, 32 and 64 on the 2-core
	// machine of docs/benchmarks.md (the host's flushes, one at a time,
	// do not depend on it).
	durablePoolConns = 32
)

// durableConcurrency is the closed-loop goroutine counts measured.
var durableConcurrency = []int{256, 1000}

// DurableCount is the persistent objects' state: a counter, JSON-encoded.
type DurableCount struct{ N int }

type (
	durableInc  struct{ By int }
	durablePeek struct{}
)

// durableCountKind is a counter kind: persistent (PersistStateJSON) or
// plain (PreserveStateJSON: it moves with its state, nothing is written).
func durableCountKind(name string, persist bool) *actor.Kind[DurableCount] {
	k := actor.NewKind(name, func(*actor.Context, string) (*DurableCount, error) { return &DurableCount{}, nil })
	actor.HandleRequest(k, func(_ *actor.Context, s *DurableCount, m durableInc) (int, error) {
		s.N += m.By
		return s.N, nil
	})
	actor.HandleRequest(k, func(ctx *actor.Context, s *DurableCount, _ durablePeek) (int, error) {
		ctx.StateUnchanged()
		return s.N, nil
	})
	if persist {
		k.PersistStateJSON()
	} else {
		k.PreserveStateJSON()
	}
	return k
}

// benchPool returns a pool of durablePoolConns connections on a fresh
// database (skipping b without Postgres); it closes when b ends.
func benchPool(b *testing.B) *pgxpool.Pool {
	b.Helper()
	db := pgtest.New(b)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = durablePoolConns
	cfg.MinConns = durablePoolConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return pool
}

// benchPGStore returns a pgstore.Store on a fresh database.
func benchPGStore(b *testing.B) (*pgstore.Store, *pgxpool.Pool) {
	b.Helper()
	pool := benchPool(b)
	s, err := pgstore.Open(context.Background(), pool, pgstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	return s, pool
}

// checkpoint makes the server write its dirty pages now (CHECKPOINT), so
// that a measurement does not share the disk with a checkpoint the one
// before it caused.
func checkpoint(b *testing.B, pool *pgxpool.Pool) {
	b.Helper()
	if _, err := pool.Exec(context.Background(), "CHECKPOINT"); err != nil {
		b.Fatal(err)
	}
}

// usOf is d in µs.
func usOf(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// reportLatencies reports the p50 and p99 of ds (sorted in place) as
// <name>-p50-µs and <name>-p99-µs.
func reportLatencies(b *testing.B, name string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	b.ReportMetric(usOf(ds[len(ds)/2]), name+"-p50-µs")
	b.ReportMetric(usOf(ds[len(ds)*99/100]), name+"-p99-µs")
}

// closedLoop runs b.N turns from c goroutines, each taking the next turn
// as soon as its last one returned; goroutine g runs turn(g, i) for its
// i-th turn. It reports turns/s and the turns' p50 and p99 latency.
func closedLoop(b *testing.B, c int, turn func(g, i int) error) {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		all  = make([]time.Duration, 0, b.N)
		fail atomic.Pointer[error]
	)
	b.ResetTimer()
	start := time.Now()
	for g := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for i := 0; next.Add(1) <= int64(b.N); i++ {
				t0 := time.Now()
				if err := turn(g, i); err != nil {
					fail.CompareAndSwap(nil, &err)
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	took := time.Since(start)
	b.StopTimer()
	if err := fail.Load(); err != nil {
		b.Fatal(*err)
	}
	b.ReportMetric(float64(b.N)/took.Seconds(), "turns/s")
	reportLatencies(b, "turn", all)
}

// objectOf is the object goroutine g of c uses for its i-th turn: the
// goroutines share the objects out, none two goroutines share one.
func objectOf(g, c, i int) int {
	per := (durableObjects - g + c - 1) / c // objects g, g+c, g+2c, … below durableObjects
	return g + (i%per)*c
}

// BenchmarkDurableTurns: closed-loop Asks from C goroutines to 1,000
// persistent counters on one standalone host whose state store is
// pgstore; every reply waits for its turn's write to be durable (group
// commit: one statement per flush carries every write queued meanwhile).
func BenchmarkDurableTurns(b *testing.B) {
	store, pool := benchPGStore(b)
	h := newBenchHostWith(b, actor.Config{Name: "a", Store: store}, durableCountKind("dcount", true))
	b.Cleanup(func() { h.Close() })
	ctx := context.Background()
	refs := make([]actor.Ref, durableObjects)
	for j := range refs {
		refs[j] = actor.Ref{Kind: "dcount", ID: strconv.Itoa(j)}
	}
	activate(b, func(j int) error {
		_, err := actor.Ask[durablePeek, int](ctx, h, refs[j], durablePeek{})
		return err
	})
	for _, c := range durableConcurrency {
		b.Run("objects=1000/C="+strconv.Itoa(c), func(b *testing.B) {
			b.ReportAllocs()
			checkpoint(b, pool)
			before := h.Stats()
			closedLoop(b, c, func(g, i int) error {
				_, err := actor.Ask[durableInc, int](ctx, h, refs[objectOf(g, c, i)], durableInc{By: 1})
				return err
			})
			after := h.Stats()
			if f := after.StateFlushes - before.StateFlushes; f > 0 {
				b.ReportMetric(float64(after.StateWrites-before.StateWrites)/float64(f), "writes/flush")
			}
		})
	}
}

// activate runs do(j) for every object j, 64 at a time.
func activate(b *testing.B, do func(j int) error) {
	b.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	errs := make([]error, durableObjects)
	for j := range durableObjects {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[j] = do(j)
			<-sem
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
}

// rawStateDDL is the raw loop's table: an object's state and its owner
// generation, which every write is conditional on.
const rawStateDDL = `CREATE TABLE bench_state (id text PRIMARY KEY, data bytea NOT NULL, owner_gen bigint NOT NULL)`

const rawUpdateSQL = `UPDATE bench_state SET data = $2 WHERE id = $1 AND owner_gen = $3`

// rawStatePool returns a pool on a fresh database with bench_state's
// 1,000 rows.
func rawStatePool(b *testing.B) *pgxpool.Pool {
	b.Helper()
	pool := benchPool(b)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, rawStateDDL); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO bench_state SELECT g::text, '{"N":0}', 1 FROM generate_series(0, $1 - 1) g`, durableObjects); err != nil {
		b.Fatal(err)
	}
	return pool
}

// rawTurn is one turn of the hand-written loop: the new state encoded,
// one autocommit conditional UPDATE (one WAL flush), waited for.
func rawTurn(ctx context.Context, pool *pgxpool.Pool, id string, s *DurableCount) error {
	s.N++
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tag, err := pool.Exec(ctx, rawUpdateSQL, id, data, int64(1))
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return errors.New("raw update: fenced")
	}
	return nil
}

// BenchmarkRawPgxConditionalUpdate is BenchmarkDurableTurns' floor: the
// same objects, goroutines and pool size, each turn one autocommit
// UPDATE … WHERE id = $1 AND owner_gen = $3 on the pool, waited for.
func BenchmarkRawPgxConditionalUpdate(b *testing.B) {
	pool := rawStatePool(b)
	ctx := context.Background()
	ids := make([]string, durableObjects)
	for j := range ids {
		ids[j] = strconv.Itoa(j)
	}
	states := make([]DurableCount, durableObjects) // each object's, used by one goroutine at a time
	for _, c := range durableConcurrency {
		b.Run("objects=1000/C="+strconv.Itoa(c), func(b *testing.B) {
			b.ReportAllocs()
			checkpoint(b, pool)
			closedLoop(b, c, func(g, i int) error {
				j := objectOf(g, c, i)
				return rawTurn(ctx, pool, ids[j], &states[j])
			})
		})
	}
}

// BenchmarkAskPersistentVsPlain: one goroutine's Asks, one after another,
// to a persistent counter and to a plain one on the same host (its store
// pgstore), beside one raw UPDATE round trip (raw-update) and one call of
// the host's flush statement, pgstore.Store.WriteStates of one write
// (store-write): what a persistent Ask may add; and a persistent Ask on a
// host whose state store is in memory (persistent-memstore): the output
// gate's own cost.
func BenchmarkAskPersistentVsPlain(b *testing.B) {
	store, pool := benchPGStore(b)
	h := newBenchHostWith(b, actor.Config{Name: "a", Store: store},
		durableCountKind("pcount", true), durableCountKind("count", false))
	b.Cleanup(func() { h.Close() })
	ctx := context.Background()
	if _, err := pool.Exec(ctx, rawStateDDL); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO bench_state VALUES ('0', '{"N":0}', 1)`); err != nil {
		b.Fatal(err)
	}
	sequential := func(b *testing.B, op func() error) {
		b.ReportAllocs()
		checkpoint(b, pool)
		ds := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			t0 := time.Now()
			if err := op(); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(t0))
		}
		b.StopTimer()
		reportLatencies(b, "ask", ds)
	}
	for _, kind := range []string{"pcount", "count"} {
		name := "persistent"
		if kind == "count" {
			name = "plain"
		}
		ref := actor.Ref{Kind: kind, ID: "0"}
		if _, err := actor.Ask[durableInc, int](ctx, h, ref, durableInc{By: 1}); err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			sequential(b, func() error {
				_, err := actor.Ask[durableInc, int](ctx, h, ref, durableInc{By: 1})
				return err
			})
		})
	}
	// The output gate's own cost: a persistent counter on a host whose
	// state store is its private MemoryStore (no database).
	hm := newBenchHostWith(b, actor.Config{Name: "m"}, durableCountKind("pcount", true))
	b.Cleanup(func() { hm.Close() })
	mref := actor.Ref{Kind: "pcount", ID: "0"}
	if _, err := actor.Ask[durableInc, int](ctx, hm, mref, durableInc{By: 1}); err != nil {
		b.Fatal(err)
	}
	b.Run("persistent-memstore", func(b *testing.B) {
		sequential(b, func() error {
			_, err := actor.Ask[durableInc, int](ctx, hm, mref, durableInc{By: 1})
			return err
		})
	})
	b.Run("raw-update", func(b *testing.B) {
		var s DurableCount
		sequential(b, func() error { return rawTurn(ctx, pool, "0", &s) })
	})
	// The host's flush statement by hand: one write of a persistent
	// object (active on h, which never writes it meanwhile) per call.
	obj := relocation.Object{Kind: "pcount", ID: "1"}
	if _, err := actor.Ask[durablePeek, int](ctx, h, actor.Ref{Kind: obj.Kind, ID: obj.ID}, durablePeek{}); err != nil {
		b.Fatal(err)
	}
	row, err := store.Get(ctx, obj)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("store-write", func(b *testing.B) {
		var s DurableCount
		sequential(b, func() error {
			s.N++
			data, err := json.Marshal(&s)
			if err != nil {
				return err
			}
			fenced, err := store.WriteStates(ctx, []relocation.StateWrite{{Object: obj, Owner: row.Ownership, Data: data}})
			if err == nil && len(fenced) > 0 {
				err = errors.New("store write: fenced")
			}
			return err
		})
	})
}

// BenchmarkMovePausePersistentVsPlain moves counters back and forth
// between two hosts over the in-process network, both on one pgstore.Store
// (Location Store and state store): sixteen persistent objects and sixteen
// plain ones (the same kind without persistence), one move per op,
// persistent and plain in turn so that both see the same machine and the
// same server (its checkpoints), under light load (loaded: two goroutines
// on host a ask the moving objects, each pausing 2 ms between asks) and
// idle. It reports, per kind, the pauses (the seal at the source to the
// opening at the target, Host.Pauses) and Relocate's time end to end,
// which also holds what the source waits for before the seal (a
// persistent object's pending write made durable).
func BenchmarkMovePausePersistentVsPlain(b *testing.B) {
	store, pool := benchPGStore(b)
	n := actor.NewNetwork(store)
	kinds := func() []actor.Registrable {
		return []actor.Registrable{durableCountKind("mpcount", true), durableCountKind("mcount", false)}
	}
	hs := []*actor.Host{
		newBenchHostWith(b, n.With(actor.Config{Name: "a"}), kinds()...),
		newBenchHostWith(b, n.With(actor.Config{Name: "b"}), kinds()...),
	}
	b.Cleanup(func() {
		for _, h := range hs {
			h.Close()
		}
	})
	ctx := context.Background()
	// Even objects are persistent, odd ones plain; op i moves object i%32.
	const moving = 32
	refs := make([]actor.Ref, moving)
	where := make([]int, moving) // the host each object is on now, across the runs
	for j := range refs {
		kind := "mpcount"
		if j%2 == 1 {
			kind = "mcount"
		}
		refs[j] = actor.Ref{Kind: kind, ID: "moving-" + strconv.Itoa(j/2)}
		// Activate it here (on a), and move it there and back once.
		if _, err := actor.Ask[durableInc, int](ctx, hs[0], refs[j], durableInc{By: 1}); err != nil {
			b.Fatal(err)
		}
		for k := range 2 {
			if err := hs[k].Relocate(ctx, refs[j], hs[1-k].Name()); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, loaded := range []bool{true, false} {
		name := "idle"
		if loaded {
			name = "loaded"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			checkpoint(b, pool)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var unavailable atomic.Int64
			for g := range 2 {
				if !loaded {
					break
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := g; ; i += 2 {
						select {
						case <-stop:
							return
						case <-time.After(2 * time.Millisecond):
						}
						if _, err := actor.Ask[durableInc, int](ctx, hs[0], refs[i%moving], durableInc{By: 1}); err != nil {
							if !errors.Is(err, payload.Unavailable) {
								b.Error(err)
								return
							}
							unavailable.Add(1) // it chased its object past MaxHops
						}
					}
				}()
			}
			pausesOf(hs)
			var pauses, took [2][]time.Duration // [0] persistent, [1] plain
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				j := i % moving
				from, to := hs[where[j]], hs[1-where[j]]
				t0 := time.Now()
				if err := from.Relocate(ctx, refs[j], to.Name()); err != nil {
					b.Fatal(err)
				}
				took[j%2] = append(took[j%2], time.Since(t0))
				// The source logs the pause before Relocate returns.
				pauses[j%2] = append(pauses[j%2], from.Pauses()...)
				where[j] = 1 - where[j]
			}
			b.StopTimer()
			close(stop)
			wg.Wait()
			reportLatencies(b, "pause-persistent", pauses[0])
			reportLatencies(b, "pause-plain", pauses[1])
			reportLatencies(b, "relocate-persistent", took[0])
			reportLatencies(b, "relocate-plain", took[1])
			if loaded {
				b.ReportMetric(float64(unavailable.Load()), "asks-past-MaxHops")
			}
		})
	}
}
