package tests

// Benchmarks across OS processes: the objects live in child processes
// (child_test.go), `berth`-like nodes on transport/tcp (mutual TLS) over
// loopback and pgstore; this process sends through a gateway host of its
// own. The floor is BenchmarkProcsRawTCPRoundTrip (bench_rawtcp_test.go):
// a raw TCP ping-pong between the same two kinds of process;
// BenchmarkProcsRawRequestFuture, protoactor-go alone with its echo actor
// in a child process, is a point of comparison.

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	paactor "github.com/asynkron/protoactor-go/actor"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/internal/pgtest"
	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/transport"
	"github.com/berthrt/berth/transport/tcp"
)

// procsGateway starts a gateway host in this process on database db (it
// hosts nothing) and waits until it knows nodes peers; insecure runs it
// without TLS (its nodes must be started so too).
func procsGateway(b testing.TB, db string, nodes int, insecure bool) *actor.Host {
	store, members, closePG := openPostgres(b, db)
	b.Cleanup(closePG)
	var att transport.Attacher = newTLSAttacher(tcp.Options{})
	if insecure {
		att = tcp.New(tcp.Options{Insecure: true})
	}
	h, err := actor.NewHost(actor.Config{Name: "gateway", Transport: att, Store: store,
		Membership: members, Logger: quietLogger(), Gateway: true})
	if err != nil {
		b.Fatal(err)
	}
	h.Register(benchKind())
	h.Register(tallyKind())
	if err := h.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close() })
	testutil.WaitForWithin(b, "the gateway to know the nodes", time.Minute, func() bool { return len(h.Peers()) >= nodes })
	return h
}

// procsOne: one node process and a gateway here, with TLS unless
// insecure; the bench object activated on the node.
func procsOne(b *testing.B, insecure bool) (*actor.Host, actor.Ref) {
	if testutil.Race {
		b.Skip("benchmarks run without -race")
	}
	db := pgtest.New(b).URL
	var env []string
	if insecure {
		env = append(env, "BERTH_CHILD_INSECURE=1")
	}
	startNodeChild(b, db, "n1", env...)
	gw := procsGateway(b, db, 1, insecure)
	ref := actor.Ref{Kind: "bench", ID: "one-" + strconv.Itoa(b.N)}
	if _, err := actor.Ask[benchGet, int](context.Background(), gw, ref, benchGet{}); err != nil { // activates on n1 (the gateway hosts nothing)
		b.Fatal(err)
	}
	return gw, ref
}

// BenchmarkProcsTellPipelined: Tells from this process to an object in
// another process, one goroutine; the clock stops when the object ran
// them all. With TLS, and without (the cost of TLS itself).
func BenchmarkProcsTellPipelined(b *testing.B) {
	tlsModes(b, func(b *testing.B, insecure bool) {
		gw, ref := procsOne(b, insecure)
		benchTells(b, gw, ref)
	})
}

// BenchmarkProcsAsk: one Ask at a time from this process to an object in
// another process: a round trip. With TLS, and without.
func BenchmarkProcsAsk(b *testing.B) {
	tlsModes(b, func(b *testing.B, insecure bool) {
		gw, ref := procsOne(b, insecure)
		benchAsks(b, gw, ref)
	})
}

// BenchmarkProcsRawRequestFuture is a point of comparison for
// BenchmarkProcsAsk: protoactor-go's RequestFuture from this process to an actor in another
// process over its remote, one at a time.
func BenchmarkProcsRawRequestFuture(b *testing.B) {
	if testutil.Race {
		b.Skip("benchmarks run without -race")
	}
	echo := startChild(b, "rawecho", "echo")
	sys, r := rawSystem()
	defer r.Shutdown(false)
	benchRawRequests(b, sys, paactor.NewPID(echo.addr, "echo"))
}

// BenchmarkProcsRelocate moves one object with 1 KiB or 1 MiB of state
// back and forth between two node processes, asked through the gateway
// here (the owner moves it): the whole Relocate call per op, and the
// pause (seal at the source → open at the target, Host.Pauses on the
// nodes) percentiles.
func BenchmarkProcsRelocate(b *testing.B) {
	for _, size := range []struct {
		name  string
		bytes int
	}{{"state=1KiB", 1 << 10}, {"state=1MiB", 1 << 20}} {
		b.Run(size.name, func(b *testing.B) {
			if testutil.Race {
				b.Skip("benchmarks run without -race")
			}
			db := pgtest.New(b).URL
			n1, n2 := startNodeChild(b, db, "n1"), startNodeChild(b, db, "n2")
			n1.waitPeers(b, 1)
			n2.waitPeers(b, 1)
			n1.must(b, "activate 1 moving "+strconv.Itoa(size.bytes)) // tally object moving0 on n1
			gw := procsGateway(b, db, 2, false)
			ctx := context.Background()
			ref := actor.Ref{Kind: "tally", ID: "moving0"}
			n1.must(b, "pauses")
			nodes := []string{"n1", "n2"}
			where := 0
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := gw.Relocate(ctx, ref, nodes[1-where]); err != nil {
					b.Fatal(err)
				}
				where = 1 - where
			}
			b.StopTimer()
			reportPauses(b, n1.must(b, "pauses"), n2.must(b, "pauses"))
		})
	}
}

// reportPauses reports the percentiles of the pauses in "pauses" replies.
func reportPauses(b *testing.B, replies ...string) {
	var p []time.Duration
	for _, r := range replies {
		for _, us := range strings.Split(r, ",") {
			if n, err := strconv.ParseInt(us, 10, 64); err == nil {
				p = append(p, time.Duration(n)*time.Microsecond)
			}
		}
	}
	slices.Sort(p)
	if len(p) > 0 {
		b.ReportMetric(float64(p[len(p)/2].Microseconds()), "pause-p50-µs")
		b.ReportMetric(float64(p[len(p)*99/100].Microseconds()), "pause-p99-µs")
	}
}

// BenchmarkProcsDrain: 10,000 objects with a little state each on one
// node process drain to two others; the clock runs from Drain to the
// drained host's stop (every object moved). One drain per op.
func BenchmarkProcsDrain(b *testing.B) {
	if testutil.Race {
		b.Skip("benchmarks run without -race")
	}
	const objects = 10_000
	var total time.Duration
	var pauses []string
	b.StopTimer()
	for range b.N {
		db := pgtest.New(b).URL
		n1 := startNodeChild(b, db, "n1")
		n1.must(b, "activate "+strconv.Itoa(objects)+" d 16") // all on n1: it is alone
		n2, n3 := startNodeChild(b, db, "n2"), startNodeChild(b, db, "n3")
		for _, n := range []*child{n1, n2, n3} {
			n.waitPeers(b, 2)
		}
		// BERTH_BENCH_DRAIN_PROFILE=<prefix>: a CPU profile of each node
		// for the drain alone, in <prefix>-<node>.
		prof := os.Getenv("BERTH_BENCH_DRAIN_PROFILE")
		if prof != "" {
			for _, n := range []*child{n1, n2, n3} {
				n.must(b, "cpuprofile "+prof+"-"+n.name)
			}
		}
		start := time.Now()
		b.StartTimer()
		r := n1.must(b, "drain")
		b.StopTimer()
		total += time.Since(start)
		if prof != "" {
			for _, n := range []*child{n2, n3} {
				n.must(b, "cpuprofile stop")
			}
		}
		n1.exited(b)
		if _, p, ok := strings.Cut(r, " "); ok {
			pauses = append(pauses, p)
		}
		owners := decode[map[string]int](b, n2.must(b, "owners d "+strconv.Itoa(objects)))
		if owners["n2"]+owners["n3"] != objects {
			b.Fatalf("after the drain the objects live on %v; want all %d on n2 and n3", owners, objects)
		}
		n2.stop(b)
		n3.stop(b)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "drain-ms")
	reportPauses(b, pauses...)
}
