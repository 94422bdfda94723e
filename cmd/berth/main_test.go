package main

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/testutil"
)

// The demo, small: a drain and a rebalance under load lose, duplicate and
// reorder nothing, and leave no goroutine behind.
func TestDemoLosesNothing(t *testing.T) {
	rep, err := run(context.Background(), demoConfig{hosts: 3, objects: 300, senders: 2, duration: 1500 * time.Millisecond,
		rebalance: 100, quiet: true, accounts: 150, crashFor: 1500 * time.Millisecond}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if rep.accepted == 0 || rep.relocations == 0 {
		t.Fatalf("nothing happened: %+v", rep)
	}
	if rep.lost != 0 || rep.duplicated != 0 || rep.outOfOrder != 0 || rep.handled != rep.accepted {
		t.Fatalf("report: %d accepted, %d handled, %d lost, %d duplicated, %d out of order %v",
			rep.accepted, rep.handled, rep.lost, rep.duplicated, rep.outOfOrder, rep.breaks)
	}
	if d := rep.durable; d.acknowledged == 0 || d.onVictim == 0 || d.failed() {
		t.Fatalf("durable-state phase: %+v", d)
	}
	testutil.CheckNoGoroutines(t)
}
