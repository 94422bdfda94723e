package actor

import (
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/berthrt/berth/payload"
)

// The trace context of a header comes from the network. Whatever its
// traceparent and tracestate, reading it never panics; what it yields is
// either nothing or a valid remote span context, which — for a version 00
// traceparent — writes back exactly as it came.
func FuzzTraceContextFromHeader(f *testing.F) {
	good := "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01"
	for _, seed := range [][2]string{
		{good, ""}, {good, "k=v,x=y"}, {good, "=,\x00"}, {"", ""}, {"garbage", "k=v"},
		{"00-" + strings.Repeat("0", 32) + "-0102030405060708-01", ""},
		{"00-0102030405060708090a0b0c0d0e0f10-0000000000000000-01", ""},
		{"00-0102030405060708090A0B0C0D0E0F10-0102030405060708-01", ""},
		{"01-0102030405060708090a0b0c0d0e0f10-0102030405060708-01-future", ""},
		{"ff-0102030405060708090a0b0c0d0e0f10-0102030405060708-01", ""},
		{"00-0102030405060708090a0b0c0d0e0f10-0102030405060708-04", ""},
		{good + "-", ""}, {good + "-x", ""}, {good[:54], ""},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, tp, ts string) {
		h := payload.Header{Target: payload.Target{Scope: payload.ScopeObject, Name: "k", ID: "i"}, Op: payload.NewOpID()}
		if tp != "" {
			h.Meta = append(h.Meta, payload.MetaEntry{Key: metaTraceparent, Value: tp})
		}
		if ts != "" {
			h.Meta = append(h.Meta, payload.MetaEntry{Key: metaTracestate, Value: ts})
		}
		frame, err := payload.AppendHeader(nil, &h)
		if err != nil {
			return // no such header reaches a host
		}
		hv, _, err := payload.DecodeHeader(frame)
		if err != nil {
			t.Fatalf("a header AppendHeader made does not decode: %v", err)
		}
		sc := trace.SpanContextFromContext(parentOf(&hv))
		if !sc.IsValid() {
			if !sc.Equal(trace.SpanContext{}) {
				t.Fatalf("traceparent %q: an invalid, non-empty span context %v", tp, sc)
			}
			return
		}
		if !sc.IsRemote() {
			t.Fatalf("traceparent %q: a span context that is not remote", tp)
		}
		c := metaCarrier{}
		traceContext.Inject(trace.ContextWithSpanContext(bg, sc), &c)
		if got := c.Get(metaTraceparent); strings.HasPrefix(tp, "00-") && got != tp {
			t.Fatalf("traceparent %q reads back as %q", tp, got)
		}
	})
}
