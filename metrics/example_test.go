package metrics_test

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/metrics"
)

type greeter struct{ greeted int }

type hello struct{ Name string }

// A Metrics observes a host given as its Config.Observer. Setting
// Config.MetricsAddr as well would serve the registry at /metrics while the
// host runs; here the example reads the registry directly.
func Example() {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)

	k := actor.NewKind("greeter", func(*actor.Context, string) (*greeter, error) { return &greeter{}, nil })
	actor.Handle(k, func(_ *actor.Context, g *greeter, _ hello) error { g.greeted++; return nil })

	h, err := actor.NewHost(actor.Config{Name: "example", Observer: m})
	if err != nil {
		panic(err)
	}
	if err := h.Register(k); err != nil {
		panic(err)
	}
	if err := h.Start(); err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, name := range []string{"ada", "brian", "grace"} {
		if err := actor.Tell(ctx, h, actor.Ref{Kind: "greeter", ID: "desk"}, hello{Name: name}); err != nil {
			panic(err)
		}
	}
	if err := h.Stop(ctx); err != nil { // runs everything queued first
		panic(err)
	}

	families, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range families {
		switch mf.GetName() {
		case "berth_messages_handled_total", "berth_permits_in_use":
			for _, s := range mf.GetMetric() {
				fmt.Print(mf.GetName())
				for _, l := range s.GetLabel() {
					fmt.Printf(" %s=%s", l.GetName(), l.GetValue())
				}
				if c := s.GetCounter(); c != nil {
					fmt.Println(":", c.GetValue())
				} else {
					fmt.Println(":", s.GetGauge().GetValue())
				}
			}
		}
	}
	// Output:
	// berth_messages_handled_total kind=greeter outcome=ok: 3
	// berth_permits_in_use host=example: 0
}
