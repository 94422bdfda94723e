package actor_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/berthrt/berth/actor"

	"github.com/berthrt/berth/internal/testutil"
)

// discardExporter exports spans nowhere: the traced benchmarks measure
// berth's tracing and the SDK's span recording, not an exporter.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// tracedCaller returns an SDK tracer provider that samples every span and
// exports it nowhere, and a context carrying a sampled span of it, as a
// traced caller's would.
func tracedCaller(tb testing.TB) (*sdktrace.TracerProvider, context.Context) {
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(discardExporter{})))
	ctx, span := tp.Tracer("bench").Start(context.Background(), "caller")
	tb.Cleanup(func() {
		span.End()
		_ = tp.Shutdown(context.Background())
	})
	return tp, ctx
}

// Without a TracerProvider a host does nothing for tracing: a caller whose
// context carries a span costs no allocation more than one whose context
// carries none, and both stay at the round trip's 2 (the decoded values).
// With one, the allocations are the span's and the traceparent's (logged).
func TestAllocsWithoutATracerProviderTracingAddsNone(t *testing.T) {
	if testutil.Race {
		t.Skip("sync.Pool drops items at random under -race; .ci/run runs this test without it")
	}
	arm(1 << 40)
	tp, spanned := tracedCaller(t)
	h := newBenchHostWith(t, actor.Config{}, counterKind())
	defer h.Close()
	plain := allocsPerAskTellFrom(t, context.Background(), h, h)
	withSpan := allocsPerAskTellFrom(t, spanned, h, h)

	traced := newBenchHostWith(t, actor.Config{TracerProvider: tp}, counterKind())
	defer traced.Close()
	tracing := allocsPerAskTellFrom(t, spanned, traced, traced)
	t.Logf("allocs per Ask+Tell without a tracer provider: %.2f, from a traced caller %.2f; with a tracer provider %.2f", plain, withSpan, tracing)
	if withSpan > plain+0.1 {
		t.Fatalf("a caller's span costs %.2f allocations per Ask+Tell on a host without a tracer provider", withSpan-plain)
	}
	if plain > 2.5 {
		t.Fatalf("Ask+Tell allocates %.2f times without a tracer provider; want at most 2", plain)
	}
}

// BenchmarkTellPipelinedOneOwnerTraced is BenchmarkTellPipelinedOneOwner
// with a TracerProvider (every span sampled, exported nowhere) and a
// caller whose context carries a span: each message carries its
// traceparent, each turn is a span.
func BenchmarkTellPipelinedOneOwnerTraced(b *testing.B) {
	tp, ctx := tracedCaller(b)
	h := newBenchHostWith(b, actor.Config{TracerProvider: tp}, counterKind())
	defer closeHost(b, h)
	benchTellPipelinedFrom(b, ctx, h, h)
}

// BenchmarkAskRoundTripTraced is BenchmarkAskRoundTrip traced as
// BenchmarkTellPipelinedOneOwnerTraced is.
func BenchmarkAskRoundTripTraced(b *testing.B) {
	tp, ctx := tracedCaller(b)
	benchAskFrom(b, ctx, actor.Config{TracerProvider: tp})
}
