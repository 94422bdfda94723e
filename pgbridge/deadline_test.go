package pgbridge

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The reused handler context ends at each run's deadline, starts the next
// run afresh, ignores a run that ended before its deadline, and ends for
// good when the broker's context does.
func TestTheHandlersReusedContextEndsAtEachRunsDeadline(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	var h handlerCtx
	h.init(parent)
	h.arm(20 * time.Millisecond)
	<-h.Done()
	if !errors.Is(h.Err(), context.DeadlineExceeded) {
		t.Fatalf("past the deadline: %v", h.Err())
	}
	h.disarm()
	h.arm(time.Hour)
	if h.Err() != nil {
		t.Fatalf("the next run starts ended: %v", h.Err())
	}
	select {
	case <-h.Done():
		t.Fatal("the next run's Done is closed")
	default:
	}
	if d, ok := h.Deadline(); !ok || time.Until(d) < 59*time.Minute {
		t.Fatalf("deadline %v", d)
	}
	h.fire() // a late timer of an earlier run
	if h.Err() != nil {
		t.Fatalf("a late fire ended a run before its deadline: %v", h.Err())
	}
	h.disarm()
	h.arm(time.Millisecond)
	h.disarm()
	time.Sleep(5 * time.Millisecond)
	h.fire()
	if h.Err() != nil {
		t.Fatalf("a fire after the run ended ended it: %v", h.Err())
	}
	h.arm(time.Hour)
	cancel()
	<-h.Done()
	if !errors.Is(h.Err(), context.Canceled) {
		t.Fatalf("after the broker's context ended: %v", h.Err())
	}
	h.disarm()
	h.arm(time.Hour)
	if !errors.Is(h.Err(), context.Canceled) {
		t.Fatalf("a run after the broker's context ended: %v", h.Err())
	}
}
