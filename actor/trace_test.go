package actor

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
)

// newRecorder returns a tracer provider that samples every span and keeps
// the ended ones.
func newRecorder(t testing.TB) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, sr
}

// TraceRelay makes a relay object Tell counter To an Inc from its turn.
type TraceRelay struct{ To string }

func traceRelayKind() *Kind[Counter] {
	k := NewKind("trelay", func(*Context, string) (*Counter, error) { return &Counter{}, nil })
	Handle(k, func(ctx *Context, _ *Counter, m TraceRelay) error {
		return Tell(ctx, ctx.Host(), Ref{"counter", m.To}, Inc{By: 1})
	})
	return k
}

// TraceNews is published on the traced channel "news".
type TraceNews struct{}

func traceNewsChannel() *Channel {
	ch := NewChannel("news")
	Subscribe(ch, func(*Context, TraceNews) error { return nil })
	return ch
}

// turnSpans returns the ended turn spans whose message type is typ.
func turnSpans(sr *tracetest.SpanRecorder, typ string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if strings.HasPrefix(s.Name(), "berth.turn ") && attr(s, AttrMessageType) == typ {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) string {
	for _, a := range s.Attributes() {
		if a.Key == k {
			return a.Value.AsString()
		}
	}
	return ""
}

// waitSpan waits for the one ended turn span of message type typ.
func waitSpan(t *testing.T, sr *tracetest.SpanRecorder, typ string) sdktrace.ReadOnlySpan {
	t.Helper()
	waitFor(t, "the turn span of "+typ, func() bool { return len(turnSpans(sr, typ)) > 0 })
	ss := turnSpans(sr, typ)
	if len(ss) != 1 {
		t.Fatalf("%d turn spans of %s, want 1", len(ss), typ)
	}
	return ss[0]
}

// checkChild fails unless s is a child of parent, in its trace, run on host.
func checkChild(t *testing.T, s sdktrace.ReadOnlySpan, parent trace.SpanContext, host string) {
	t.Helper()
	if s.SpanContext().TraceID() != parent.TraceID() || s.Parent().SpanID() != parent.SpanID() {
		t.Fatalf("turn span %q: trace %s parent %s; want trace %s parent %s",
			s.Name(), s.SpanContext().TraceID(), s.Parent().SpanID(), parent.TraceID(), parent.SpanID())
	}
	if got := attr(s, AttrHost); got != host {
		t.Fatalf("turn span %q ran on %q, want %q", s.Name(), got, host)
	}
}

// A turn is a span, a child of the span that sent its message: from
// outside (Tell, Ask) and from a handler (the handler's Context carries
// its turn's span). It is named for the kind and carries the kind, the
// id, the message type and the host; a handler's error is its status.
// Without a span on the sending context, the turn starts a new trace.
func TestTracingATurnIsAChildOfTheSpanThatSentItsMessage(t *testing.T) {
	tp, sr := newRecorder(t)
	h := startHost(t, Config{Name: "solo", TracerProvider: tp}, counterKind(newGates()), traceRelayKind(), traceNewsChannel())
	ctx, client := tp.Tracer("test").Start(bg, "client")
	defer client.End()
	csc := client.SpanContext()
	ref := Ref{"counter", "c1"}

	if err := Tell(ctx, h, ref, Inc{By: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := Ask[Get, int](ctx, h, ref, Get{}); err != nil {
		t.Fatal(err)
	}
	inc, get := waitSpan(t, sr, typeName[Inc]()), waitSpan(t, sr, typeName[Get]())
	checkChild(t, inc, csc, "solo")
	checkChild(t, get, csc, "solo")
	if inc.Name() != "berth.turn counter" || attr(inc, AttrKind) != "counter" || attr(inc, AttrID) != "c1" {
		t.Fatalf("turn span %q, kind %q, id %q", inc.Name(), attr(inc, AttrKind), attr(inc, AttrID))
	}
	if inc.SpanKind() != trace.SpanKindConsumer || get.SpanKind() != trace.SpanKindServer {
		t.Fatalf("span kinds: Tell's turn %v, Ask's %v; want consumer, server", inc.SpanKind(), get.SpanKind())
	}
	if inc.Status().Code != codes.Unset {
		t.Fatalf("a turn that succeeded has status %v", inc.Status())
	}

	// A channel subscriber's turn too.
	if err := Publish(ctx, h, "news", TraceNews{}); err != nil {
		t.Fatal(err)
	}
	news := waitSpan(t, sr, typeName[TraceNews]())
	checkChild(t, news, csc, "solo")
	if news.Name() != "berth.turn news" || attr(news, AttrKind) != "news" {
		t.Fatalf("subscriber's turn span %q, kind %q", news.Name(), attr(news, AttrKind))
	}

	// A handler's sends continue the trace of its turn.
	sr.Reset()
	if err := Tell(ctx, h, Ref{"trelay", "r"}, TraceRelay{To: "c2"}); err != nil {
		t.Fatal(err)
	}
	relay := waitSpan(t, sr, typeName[TraceRelay]())
	checkChild(t, relay, csc, "solo")
	checkChild(t, waitSpan(t, sr, typeName[Inc]()), relay.SpanContext(), "solo")

	// A handler's error is recorded on its turn's span.
	if _, err := Ask[Fail, int](ctx, h, ref, Fail{}); !errors.Is(err, errFail) {
		t.Fatalf("Ask Fail = %v", err)
	}
	if s := waitSpan(t, sr, typeName[Fail]()); s.Status().Code != codes.Error || len(s.Events()) == 0 {
		t.Fatalf("failed turn: status %v, %d events; want an error status and the error recorded", s.Status(), len(s.Events()))
	}

	// No span on the sending context: a new trace.
	if err := Tell(bg, h, ref, Inc{By: 1}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the untraced Tell's turn", func() bool { return len(turnSpans(sr, typeName[Inc]())) == 2 })
	s := turnSpans(sr, typeName[Inc]())[1]
	if s.Parent().IsValid() || s.SpanContext().TraceID() == csc.TraceID() {
		t.Fatalf("a turn of a message sent without a span has parent %v in trace %s", s.Parent(), s.SpanContext().TraceID())
	}
}

// A message's trace context travels in its header: one sent from a
// context with a span carries the traceparent, one sent without does not,
// nor does any message of a host without a tracer provider.
func TestTracingInjectsTheTraceparentOnlyWithATracerAndASpan(t *testing.T) {
	tp, _ := newRecorder(t)
	ctx, client := tp.Tracer("test").Start(bg, "client")
	defer client.End()
	var got atomic.Value // the traceparent the handler saw
	k := NewKind("seen", func(*Context, string) (*Counter, error) { return &Counter{}, nil })
	HandleRequest(k, func(ctx *Context, _ *Counter, _ Get) (string, error) {
		v, _ := ctx.env.Msg.Header().Meta("traceparent")
		got.Store(string(v))
		return string(v), nil
	})
	traced := startHost(t, Config{Name: "traced", TracerProvider: tp}, k)
	plain := startHost(t, Config{Name: "plain"}, k)
	ref := Ref{"seen", "x"}
	tp0, err := Ask[Get, string](ctx, traced, ref, Get{})
	want := "00-" + client.SpanContext().TraceID().String() + "-" + client.SpanContext().SpanID().String() + "-01"
	if err != nil || tp0 != want {
		t.Fatalf("traceparent = %q, %v; want %q", tp0, err, want)
	}
	if v, err := Ask[Get, string](bg, traced, ref, Get{}); err != nil || v != "" {
		t.Fatalf("without a span: traceparent %q, %v", v, err)
	}
	if v, err := Ask[Get, string](ctx, plain, ref, Get{}); err != nil || v != "" {
		t.Fatalf("without a tracer provider: traceparent %q, %v", v, err)
	}
}

// Tracing never fails a send: a traceparent the caller set in an Encoded
// message's metadata wins, and metadata too large for the trace context
// goes without it (first without the tracestate).
func TestTracingInjectKeepsTheCallersEntriesAndTheMetadataBound(t *testing.T) {
	tp, _ := newRecorder(t)
	tr := newTracing(tp, "h")
	ts, err := trace.ParseTraceState("k=v")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: 1, TraceState: ts})
	ctx := trace.ContextWithSpanContext(bg, sc)
	if got := tr.inject(bg, nil); got != nil {
		t.Fatalf("no span: %v", got)
	}
	got := tr.inject(ctx, nil)
	if len(got) != 2 || metaLen(got) > payload.MaxMetadataLen {
		t.Fatalf("inject = %v", got)
	}
	own := []payload.MetaEntry{{Key: "traceparent", Value: "mine"}}
	if got := tr.inject(ctx, own); len(got) != 1 || got[0].Value != "mine" {
		t.Fatalf("the caller's traceparent: %v", got)
	}
	// Room for the traceparent, not for the tracestate too.
	big := make([]byte, payload.MaxMetadataLen-3-len("big")-(3+len("traceparent")+55)-(3+len("tracestate")+3)+1)
	user := []payload.MetaEntry{{Key: "big", Value: string(big)}}
	got = tr.inject(ctx, user)
	if len(got) != 2 || got[1].Key != "traceparent" || metaLen(got) > payload.MaxMetadataLen {
		t.Fatalf("near the bound: %d entries, %d bytes", len(got), metaLen(got))
	}
	if &got[0] == &user[0] || len(user) != 1 {
		t.Fatal("inject changed the caller's slice")
	}
	full := []payload.MetaEntry{{Key: "big", Value: string(make([]byte, payload.MaxMetadataLen-6))}}
	if got := tr.inject(ctx, full); len(got) != 1 {
		t.Fatalf("full metadata: %d entries", len(got))
	}
}

// traceNetwork starts traced hosts on one in-process network, sharing the
// recorder, each serving a movable counter.
func traceNetwork(t *testing.T, g *gates, names ...string) (*Network, *sdktrace.TracerProvider, *tracetest.SpanRecorder, []*Host) {
	tp, sr := newRecorder(t)
	n := NewNetwork(nil)
	var hs []*Host
	for _, name := range names {
		hs = append(hs, startHost(t, n.With(Config{Name: name, Logger: quietLogger(), TracerProvider: tp}), movableKind(g)))
	}
	return n, tp, sr, hs
}

// A message queued at an object that moves travels in the move record with
// its header: its turn, on the new host, is a child of the span that sent
// it.
func TestTracingATraceStaysOneAcrossAMove(t *testing.T) {
	g := newGates()
	n, tp, sr, hs := traceNetwork(t, g, "a", "b")
	a := hs[0]
	ref := Ref{"counter", "m"}
	ctx, client := tp.Tracer("test").Start(bg, "client")
	defer client.End()

	// As TestRelocationPolicies: the seal comes at f2's turn boundary and
	// the Inc behind it is captured.
	Tell(bg, a, ref, Block{Key: "f1"})
	g.waitStarted(t, "f1")
	Tell(bg, a, ref, Block{Key: "f2"})
	if err := Tell(ctx, a, ref, Inc{By: 1}); err != nil {
		t.Fatal(err)
	}
	if err := relocateAtF2sEnd(t, n, a, g, ref, "b"); err != nil {
		t.Fatal(err)
	}
	checkChild(t, waitSpan(t, sr, typeName[Inc]()), client.SpanContext(), "b")
}

// A message sent by a stale route is forwarded by the host the object left,
// its header kept: its turn, on the new host, is a child of the span that
// sent it.
func TestTracingATraceStaysOneAcrossAForward(t *testing.T) {
	_, tp, sr, hs := traceNetwork(t, newGates(), "a", "b", "c")
	a, c := hs[0], hs[2]
	ref := Ref{"counter", "f"}
	obj := relocation.Object{Kind: "counter", ID: "f"}
	if err := Tell(bg, a, ref, Inc{By: 1}); err != nil { // activates on a
		t.Fatal(err)
	}
	if err := a.Relocate(bg, ref, "b"); err != nil {
		t.Fatal(err)
	}
	c.routes.forget(obj, true)
	c.routes.learn(obj, "a", 0, false) // stale: the object left a
	sr.Reset()
	ctx, client := tp.Tracer("test").Start(bg, "client")
	defer client.End()
	if err := Tell(ctx, c, ref, Inc{By: 1}); err != nil {
		t.Fatal(err)
	}
	checkChild(t, waitSpan(t, sr, typeName[Inc]()), client.SpanContext(), "b")
	// a counts the forward after its send: the turn at b may come first.
	waitFor(t, "a to count its forward of the message", func() bool { return a.Stats().Forwarded >= 1 })
}

// The trace context comes from the network: a malformed traceparent is
// ignored — the message runs, its turn starts a new trace — and a
// malformed tracestate is dropped, the traceparent still kept.
func TestTracingAMalformedTraceContextIsIgnored(t *testing.T) {
	tp, sr := newRecorder(t)
	h := startHost(t, Config{Name: "solo", TracerProvider: tp}, counterKind(newGates()))
	ref := Ref{"counter", "x"}
	send := func(meta ...payload.MetaEntry) sdktrace.ReadOnlySpan {
		t.Helper()
		sr.Reset()
		rep, err := h.Deliver(bg, ref, Encoded{Type: TypeName[Echo](), ContentType: "application/json", Body: []byte(`{"S":"hi"}`), Meta: meta})
		if err != nil {
			t.Fatalf("with metadata %v: %v", meta, err)
		}
		rep.Release()
		return waitSpan(t, sr, typeName[Echo]())
	}
	for _, bad := range []string{"", "garbage", "00-" + strings.Repeat("0", 32) + "-0102030405060708-01",
		"00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01-extra", "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01-", "ff-0102030405060708090a0b0c0d0e0f10-0102030405060708-01",
		"00-0102030405060708090A0B0C0D0E0F10-0102030405060708-01", "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-\xff\xfe"} {
		if s := send(payload.MetaEntry{Key: "traceparent", Value: bad}); s.Parent().IsValid() {
			t.Fatalf("traceparent %q: the turn's parent is %v, want none", bad, s.Parent())
		}
	}
	good := "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01"
	s := send(payload.MetaEntry{Key: "traceparent", Value: good}, payload.MetaEntry{Key: "tracestate", Value: "=,=\x00"})
	if s.Parent().TraceID().String() != "0102030405060708090a0b0c0d0e0f10" || s.Parent().SpanID().String() != "0102030405060708" || s.Parent().TraceState().Len() != 0 {
		t.Fatalf("good traceparent, bad tracestate: parent %v", s.Parent())
	}
}
