package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

// The demo's report, for a small run.
func Example_demo() {
	rep, err := run(context.Background(), demoConfig{hosts: 2, objects: 50, senders: 1, duration: 600 * time.Millisecond,
		rebalance: 10, quiet: true}, io.Discard)
	fmt.Println(err, rep.lost, rep.duplicated, rep.outOfOrder, rep.accepted == rep.handled)
	// Output: <nil> 0 0 0 true
}
