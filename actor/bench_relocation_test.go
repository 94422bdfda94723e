package actor_test

// Relocation benchmarks: the pause of one move (seal at the source → the
// target opens) with 1 KiB and 1 MiB of state, idle and under load, and
// the drain of a host with 10,000 objects. They report percentiles as
// custom metrics (pause-p50-µs, pause-p99-µs, pause-max-µs, objects/s).

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/berthrt/berth/actor"
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
		h, err := actor.NewHost(actor.Config{Name: name, Network: n, Logger: discardLogger()})
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

// BenchmarkRelocatePause moves one object back and forth between two hosts;
// each op is one move. "loaded" keeps a sender telling the moving object
// and 99 others from a third host throughout.
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
				n, hs := startBenchNetwork(b, func() actor.Registrable { return blobKind(size) }, "a", "b", "c")
				ctx := context.Background()
				ref := actor.Ref{Kind: "blob", ID: "moving"}
				if _, err := actor.Ask[benchGet, int](ctx, hs[0], ref, benchGet{}); err != nil {
					b.Fatal(err)
				}
				stop := make(chan struct{})
				var wg sync.WaitGroup
				if loaded {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; ; i++ {
							select {
							case <-stop:
								return
							default:
							}
							r := ref
							if i%2 == 1 {
								r = actor.Ref{Kind: "blob", ID: strconv.Itoa(i % 100)}
							}
							if err := actor.Tell(ctx, hs[2], r, blobTouch{}); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				n.Pauses()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					from, to := hs[i%2], hs[(i+1)%2]
					if err := from.Relocate(ctx, ref, to.Name()); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				close(stop)
				wg.Wait()
				reportPauses(b, n.Pauses())
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
		n, hs := startBenchNetwork(b, func() actor.Registrable { return blobKind(1 << 10) }, "a", "b", "c")
		for j := 0; j < objects; j++ {
			if err := actor.Tell(ctx, hs[2], actor.Ref{Kind: "blob", ID: strconv.Itoa(j)}, blobTouch{}); err != nil {
				b.Fatal(err)
			}
		}
		for hs[2].Stats().OwnersActive < objects {
			time.Sleep(time.Millisecond) // activation is asynchronous to Tell
		}
		n.Pauses()
		b.StartTimer()
		start := time.Now()
		if err := hs[2].Drain(ctx); err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		b.StopTimer()
		b.ReportMetric(objects/took.Seconds(), "objects/s")
		reportPauses(b, n.Pauses())
		for _, h := range hs {
			h.Close()
		}
		b.StartTimer()
	}
}
