package actor_test

import (
	"context"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/berthrt/berth/actor"
)

// With a TracerProvider each turn is a span, a child of the span that sent
// its message; the handler's Context carries it, so that what the handler
// sends continues the trace. (Here the spans are kept in memory; a service
// would export them, with an OTLP exporter say.)
func ExampleConfig_tracing() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())

	carts := actor.NewKind("cart", func(ctx *actor.Context, id string) (*Cart, error) {
		return &Cart{Items: map[string]int{}}, nil
	})
	actor.Handle(carts, func(ctx *actor.Context, c *Cart, m AddItem) error {
		c.Items[m.SKU] += m.Qty
		fmt.Println("the handler's context has a span:", trace.SpanFromContext(ctx).SpanContext().IsValid())
		return nil
	})
	host, err := actor.NewHost(actor.Config{Name: "host-1", TracerProvider: tp})
	if err != nil {
		panic(err)
	}
	host.Register(carts)
	if err := host.Start(); err != nil {
		panic(err)
	}

	ctx, checkout := tp.Tracer("shop").Start(context.Background(), "checkout")
	actor.Tell(ctx, host, actor.Ref{Kind: "cart", ID: "alice"}, AddItem{SKU: "apple", Qty: 2})
	host.Stop(context.Background()) // the turn has ended: its span too
	checkout.End()

	for _, s := range spans.Ended() {
		fmt.Println(s.Name(), s.SpanKind(), "child of checkout:", s.Parent().SpanID() == checkout.SpanContext().SpanID())
		for _, a := range s.Attributes() {
			fmt.Println(" ", a.Key, "=", a.Value.Emit())
		}
	}
	// Output:
	// the handler's context has a span: true
	// berth.turn cart consumer child of checkout: true
	//   berth.kind = cart
	//   berth.id = alice
	//   berth.message.type = actor_test.AddItem
	//   berth.host = host-1
	// checkout internal child of checkout: false
}
