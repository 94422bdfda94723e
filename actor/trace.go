package actor

import (
	"context"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/berthrt/berth/payload"
)

// TracerName is the instrumentation scope name of the tracer a host takes
// from Config.TracerProvider.
const TracerName = "github.com/berthrt/berth/actor"

// The span attributes of a turn.
const (
	// AttrKind is the object's kind, or the subscriber's channel.
	AttrKind = attribute.Key("berth.kind")
	// AttrID is the object's id (a channel subscriber's is "#" and its index).
	AttrID = attribute.Key("berth.id")
	// AttrMessageType is the type name the message travels under (TypeName).
	AttrMessageType = attribute.Key("berth.message.type")
	// AttrHost is the name of the host the turn runs on.
	AttrHost = attribute.Key("berth.host")
)

// The metadata keys the trace context travels under: those of the W3C
// Trace Context recommendation.
const (
	metaTraceparent = "traceparent"
	metaTracestate  = "tracestate"
)

// traceContext reads and writes the W3C traceparent and tracestate; a
// malformed traceparent reads as no trace context at all, a malformed
// tracestate as an empty one.
var traceContext propagation.TraceContext

// inject returns meta with the trace context of the span ctx carries
// added, or meta itself when ctx carries no valid span, when meta already
// has a traceparent or a tracestate (the caller's win), or when the
// entries would not fit in a header (MaxMetadataLen): the tracestate goes
// first, then the traceparent — tracing never fails a send. meta's array
// is not modified.
func (t *tracing) inject(ctx context.Context, meta []payload.MetaEntry) []payload.MetaEntry {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return meta
	}
	for _, e := range meta {
		if e.Key == metaTraceparent || e.Key == metaTracestate {
			return meta
		}
	}
	c := metaCarrier{meta: slices.Clip(meta)}
	traceContext.Inject(ctx, &c)
	if metaLen(c.meta) > payload.MaxMetadataLen {
		c.meta = slices.DeleteFunc(c.meta, func(e payload.MetaEntry) bool { return e.Key == metaTracestate })
		if metaLen(c.meta) > payload.MaxMetadataLen {
			return meta
		}
	}
	return c.meta
}

// metaLen is the encoded size of metadata entries.
func metaLen(meta []payload.MetaEntry) int {
	n := 0
	for _, e := range meta {
		n += 1 + len(e.Key) + 2 + len(e.Value)
	}
	return n
}

// parentOf returns a context carrying the trace context of the message
// whose header is hv, as a remote span context; context.Background() if
// it carries none, or a malformed one.
func parentOf(hv *payload.HeaderView) context.Context {
	return traceContext.Extract(context.Background(), viewCarrier{hv})
}

// turnSpanName is the name of the spans of the turns of a kind or channel.
func turnSpanName(name string) string { return "berth.turn " + name }

// metaCarrier collects the entries a propagator injects.
type metaCarrier struct{ meta []payload.MetaEntry }

func (c *metaCarrier) Get(key string) string {
	for _, e := range c.meta {
		if e.Key == key {
			return e.Value
		}
	}
	return ""
}

func (c *metaCarrier) Set(key, value string) {
	c.meta = append(c.meta, payload.MetaEntry{Key: key, Value: value})
}

func (c *metaCarrier) Keys() []string {
	keys := make([]string, len(c.meta))
	for i, e := range c.meta {
		keys[i] = e.Key
	}
	return keys
}

// viewCarrier reads a received header's metadata for a propagator.
type viewCarrier struct{ hv *payload.HeaderView }

// traceparentLen is the length of a version 00 traceparent.
const traceparentLen = len("00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01")

func (c viewCarrier) Get(key string) string {
	v, _ := c.hv.Meta(key)
	if key == metaTraceparent && len(v) > traceparentLen && v[0] == '0' && v[1] == '0' {
		return "" // version 00 has nothing after its flags (the propagator lets a "-" pass)
	}
	return string(v)
}

func (viewCarrier) Set(string, string) {} // a received header is read-only

func (c viewCarrier) Keys() []string {
	var keys []string
	for k := range c.hv.MetaAll() {
		keys = append(keys, string(k))
	}
	return keys
}

func newTracing(tp trace.TracerProvider, host string) *tracing {
	if tp == nil {
		return nil
	}
	return &tracing{tracer: tp.Tracer(TracerName), host: AttrHost.String(host)}
}
