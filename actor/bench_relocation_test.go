package actor_test

// Relocation benchmarks: the pause of one move (seal at the source → the
// target opens) with 1 KiB and 1 MiB of state, idle and under load, and
// the drain of a host with 10,000 objects. They report percentiles as
// custom metrics (pause-p50-µs, pause-p99-µs, pause-max-µs, objects/s).

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/internal/localnet"
	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/transport/tcp"
)

type blob struct{ Data []byte }

type blobTouch struct{}

func blobKind(size int) *actor.Kind[blob] {
	k := actor.NewKind("blob", func(*actor.Context, string) (*blob, error) {
		return &blob{Data: make([]byte, size)}, nil
	})
	actor.Handle(k, func(ctx *actor.Context, s *blob, _ blobTouch) error { s.Data[0]++; return nil })
	actor.HandleRequest(k, func(ctx *actor.Context, s *blob, _ benchGet) (int, error) { return len(s.Data), nil })
	// Raw bytes, not JSON: the benchmark measures the move, not a codec.
	k.PreserveState(func(s *blob) ([]byte, error) { return s.Data, nil },
		func(_ *actor.Context, _ string, data []byte) (*blob, error) {
			return &blob{Data: append([]byte(nil), data...)}, nil
		})
	return k
}

func startBenchNetwork(b *testing.B, k func() actor.Registrable, names ...string) (*actor.Network, []*actor.Host) {
	b.Helper()
	n := actor.NewNetwork(nil)
	var hs []*actor.Host
	for _, name := range names {
		h, err := actor.NewHost(actor.Config{Name: name, Transport: n.Transport, Store: n.Net.Store, Membership: n.Membership, Logger: discardLogger()})
		if err != nil {
			b.Fatal(err)
		}
		h.Register(k())
		if err := h.Start(); err != nil {
			b.Fatal(err)
		}
		hs = append(hs, h)
	}
	b.Cleanup(func() {
		for _, h := range hs {
			h.Close()
		}
	})
	return n, hs
}

func reportPauses(b *testing.B, p []time.Duration) {
	if len(p) == 0 {
		return
	}
	slices.Sort(p)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(us(p[len(p)/2]), "pause-p50-µs")
	b.ReportMetric(us(p[len(p)*99/100]), "pause-p99-µs")
	b.ReportMetric(us(p[len(p)-1]), "pause-max-µs")
}

// moveCounts sums the hosts' captured, relayed and forwarded counters.
func moveCounts(hs []*actor.Host) [3]int64 {
	var c [3]int64
	for _, h := range hs {
		s := h.Stats()
		c[0] += s.Captured
		c[1] += s.Relayed
		c[2] += s.Forwarded
	}
	return c
}

// reportMoveCounts reports, per move, the messages that moved queued in
// the move record, were relayed after relay-ready, and were forwarded.
func reportMoveCounts(b *testing.B, before, after [3]int64, moves int) {
	b.ReportMetric(float64(after[0]-before[0])/float64(moves), "captured/move")
	b.ReportMetric(float64(after[1]-before[1])/float64(moves), "relayed/move")
	b.ReportMetric(float64(after[2]-before[2])/float64(moves), "forwarded/move")
}

// BenchmarkRelocatePause moves objects back and forth between two hosts
// (sixteen objects in turn); each op is one move. "loaded" keeps four
// closed-loop senders on a third host busy throughout (each: 16 tells then
// an ask, to the moving objects or to 100 others).
func BenchmarkRelocatePause(b *testing.B) {
	for _, size := range []int{1 << 10, 1 << 20} {
		for _, loaded := range []bool{false, true} {
			name := "state=1KiB"
			if size == 1<<20 {
				name = "state=1MiB"
			}
			if loaded {
				name += "/loaded"
			} else {
				name += "/idle"
			}
			b.Run(name, func(b *testing.B) {
				_, hs := startBenchNetwork(b, func() actor.Registrable { return blobKind(size) }, "a", "b", "c")
				ctx := context.Background()
				// Sixteen objects take turns to move, so that each one
				// moves every sixteenth op (an object moved back to back
				// makes messages chase it past MaxHops).
				const moving = 16
				refs := make([]actor.Ref, moving)
				where := make([]int, moving)
				for j := range refs {
					refs[j] = actor.Ref{Kind: "blob", ID: "moving-" + strconv.Itoa(j)}
					if _, err := actor.Ask[benchGet, int](ctx, hs[0], refs[j], benchGet{}); err != nil {
						b.Fatal(err)
					}
				}
				stop := make(chan struct{})
				var wg sync.WaitGroup
				var unavailable atomic.Int64
				if loaded {
					// Closed-loop load from the third host: four goroutines
					// each tell 16 messages and ask once, in a loop — two
					// to the moving object, two to 100 others.
					for g := 0; g < 4; g++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for i := 0; ; i++ {
								select {
								case <-stop:
									return
								default:
								}
								r := refs[i%moving]
								if g >= 2 {
									r = actor.Ref{Kind: "blob", ID: strconv.Itoa(i % 100)}
								}
								for j := 0; j < 16; j++ {
									if err := actor.Tell(ctx, hs[2], r, blobTouch{}); err != nil {
										b.Error(err)
										return
									}
								}
								if _, err := actor.Ask[benchGet, int](ctx, hs[2], r, benchGet{}); err != nil {
									if !errors.Is(err, payload.Unavailable) {
										b.Error(err)
										return
									}
									// It chased its object past MaxHops.
									unavailable.Add(1)
								}
							}
						}()
					}
				}
				pausesOf(hs)
				before := moveCounts(hs)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					j := i % moving
					from, to := hs[where[j]], hs[1-where[j]]
					if err := from.Relocate(ctx, refs[j], to.Name()); err != nil {
						b.Fatal(err)
					}
					where[j] = 1 - where[j]
				}
				b.StopTimer()
				reportMoveCounts(b, before, moveCounts(hs), b.N)
				close(stop)
				wg.Wait()
				reportPauses(b, pausesOf(hs))
				if loaded {
					b.ReportMetric(float64(unavailable.Load()), "asks-past-MaxHops")
				}
			})
		}
	}
}

// BenchmarkDrain10000Objects drains a host that owns 10,000 objects (1 KiB
// state each) to two others; each op is one whole drain.
func BenchmarkDrain10000Objects(b *testing.B) {
	const objects = 10_000
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		_, hs := startBenchNetwork(b, func() actor.Registrable { return blobKind(1 << 10) }, "a", "b", "c")
		for j := 0; j < objects; j++ {
			if err := actor.Tell(ctx, hs[2], actor.Ref{Kind: "blob", ID: strconv.Itoa(j)}, blobTouch{}); err != nil {
				b.Fatal(err)
			}
		}
		testutil.WaitFor(b, "the objects to activate", func() bool { return hs[2].Stats().OwnersActive >= objects })
		pausesOf(hs)
		b.StartTimer()
		start := time.Now()
		if err := hs[2].Drain(ctx); err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		b.StopTimer()
		b.ReportMetric(objects/took.Seconds(), "objects/s")
		reportPauses(b, pausesOf(hs))
		for _, h := range hs {
			h.Close()
		}
		b.StartTimer()
	}
}

// pausesOf collects the pauses of the moves the hosts were the source of
// since the last call.
func pausesOf(hs []*actor.Host) []time.Duration {
	var out []time.Duration
	for _, h := range hs {
		out = append(out, h.Pauses()...)
	}
	return out
}

// slowRestoreFor is how long the Restore of BenchmarkUnrelatedAskDuringASlowRestore takes.
const slowRestoreFor = 300 * time.Millisecond

type slowState struct{ N int }

// slowRestoreKind is a kind "slow" whose Restore takes slowRestoreFor (a
// big state, a slow decoder).
func slowRestoreKind() *actor.Kind[slowState] {
	k := actor.NewKind("slow", func(*actor.Context, string) (*slowState, error) { return &slowState{}, nil })
	actor.Handle(k, func(_ *actor.Context, s *slowState, _ blobTouch) error { s.N++; return nil })
	k.PreserveState(func(s *slowState) ([]byte, error) { return []byte{byte(s.N)}, nil },
		func(_ *actor.Context, _ string, data []byte) (*slowState, error) {
			time.Sleep(slowRestoreFor)
			return &slowState{N: int(data[0])}, nil
		})
	return k
}

// BenchmarkUnrelatedAskDuringASlowRestore: what a slow Restore costs the
// rest of its link. Each op moves a new object from host a to host b
// while one goroutine on a Asks another object on b back to back, over
// the same link as the move record; the object's Restore takes 300 ms.
// It reports the longest of those Asks (ask-stall-max-ms: a Restore run
// on the link's delivery goroutine would hold it up for the whole 300
// ms), the longest of the same Asks for as long again with no move under
// way (ask-max-no-move-ms: the machine's own noise) and the typical one
// during the moves (ask-p50-µs), over the in-process transport and
// transport/tcp (loopback, one process).
func BenchmarkUnrelatedAskDuringASlowRestore(b *testing.B) {
	for _, tr := range []string{"inproc", "tcp"} {
		b.Run("transport="+tr, func(b *testing.B) {
			net := localnet.New(localnet.Options{})
			cfg := actor.Config{Transport: net.Transport, Store: net.Store, Membership: net.Membership, Logger: discardLogger()}
			if tr == "tcp" {
				cfg.Transport = tcp.New(tcp.Options{Insecure: true})
			}
			var hs []*actor.Host
			for _, name := range []string{"a", "b"} {
				c := cfg
				c.Name = name
				h, err := actor.NewHost(c)
				if err != nil {
					b.Fatal(err)
				}
				h.Register(slowRestoreKind(), blobKind(8))
				if err := h.Start(); err != nil {
					b.Fatal(err)
				}
				hs = append(hs, h)
				b.Cleanup(func() { h.Close() })
			}
			a, bh := hs[0], hs[1]
			testutil.WaitFor(b, "the hosts to know each other", func() bool { return len(a.Peers()) == 1 && len(bh.Peers()) == 1 })
			ctx := context.Background()
			u := actor.Ref{Kind: "blob", ID: "unrelated"}
			if _, err := actor.Ask[benchGet, int](ctx, bh, u, benchGet{}); err != nil { // activates u on b
				b.Fatal(err)
			}
			if _, err := actor.Ask[benchGet, int](ctx, a, u, benchGet{}); err != nil { // a knows where u is
				b.Fatal(err)
			}
			// asking Asks u from a back to back until stop is closed,
			// and returns how long each took.
			asking := func(stop <-chan struct{}) <-chan []time.Duration {
				done := make(chan []time.Duration, 1)
				go func() {
					var took []time.Duration
					for {
						select {
						case <-stop:
							done <- took
							return
						default:
						}
						start := time.Now()
						if _, err := actor.Ask[benchGet, int](ctx, a, u, benchGet{}); err != nil {
							b.Error(err)
						}
						took = append(took, time.Since(start))
					}
				}()
				return done
			}
			var asks, calm []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				x := actor.Ref{Kind: "slow", ID: "x" + strconv.Itoa(i)}
				if err := actor.Tell(ctx, a, x, blobTouch{}); err != nil { // activates x on a
					b.Fatal(err)
				}
				stop := make(chan struct{})
				done := asking(stop)
				start := time.Now()
				b.StartTimer()
				if err := a.Relocate(ctx, x, "b"); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				took := time.Since(start)
				close(stop)
				asks = append(asks, <-done...)
				// The same Asks for as long again, no move under way: what
				// this machine makes of them by itself.
				stop = make(chan struct{})
				done = asking(stop)
				time.Sleep(took)
				close(stop)
				calm = append(calm, <-done...)
				b.StartTimer()
			}
			b.StopTimer()
			if len(asks) == 0 || len(calm) == 0 {
				return
			}
			slices.Sort(asks)
			slices.Sort(calm)
			b.ReportMetric(float64(asks[len(asks)-1])/float64(time.Millisecond), "ask-stall-max-ms")
			b.ReportMetric(float64(calm[len(calm)-1])/float64(time.Millisecond), "ask-max-no-move-ms")
			b.ReportMetric(float64(asks[len(asks)/2])/float64(time.Microsecond), "ask-p50-µs")
			b.ReportMetric(float64(len(asks))/float64(b.N), "asks/move")
		})
	}
}
