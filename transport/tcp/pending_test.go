package tcp

import (
	"testing"

	"github.com/berthrt/berth/transport"
)

// Advice (hints, control items) a peer has not taken does not count in
// what a stopping host waits for (Transport.Pending); messages and moves
// do, until the peer takes them.
func TestAdviceAPeerHasNotTakenIsNotPendingForAStoppingHost(t *testing.T) {
	s := newSession(&sessionConfig{local: "a", inc: 1, ackEvery: 4, heartbeatTicks: 3, downTicks: 6, resendTicks: noResend, highItems: 8, highBytes: 1 << 20})
	var o output
	for _, k := range []transport.Kind{transport.Control, transport.Frame, transport.Hint, transport.Reply, transport.Record, transport.Bounce} {
		if err := s.send(transport.Item{Kind: k, Data: []byte("x")}, &o); err != nil {
			t.Fatal(err)
		}
	}
	if got, all := s.pendingMessages(), s.pendingOut(); got != 4 || all != 6 {
		t.Fatalf("6 items sent, 2 of them advice: pendingMessages %d, pendingOut %d; want 4 and 6", got, all)
	}
	s.acks(&Envelope{Ack: 2, Taken: 2}, &o) // the control item and the frame taken
	if got, all := s.pendingMessages(), s.pendingOut(); got != 3 || all != 4 {
		t.Fatalf("2 taken: pendingMessages %d, pendingOut %d; want 3 and 4", got, all)
	}
	s.acks(&Envelope{Ack: 6, Taken: 6}, &o)
	if got, all := s.pendingMessages(), s.pendingOut(); got != 0 || all != 0 {
		t.Fatalf("all taken: pendingMessages %d, pendingOut %d; want 0", got, all)
	}
	if err := s.send(transport.Item{Kind: transport.Hint, Data: []byte("x")}, &o); err != nil {
		t.Fatal(err)
	}
	s.dropOut(false)
	if err := s.send(transport.Item{Kind: transport.Frame, Data: []byte("x")}, &o); err != nil {
		t.Fatal(err)
	}
	if got := s.pendingMessages(); got != 1 {
		t.Fatalf("after a drop and a frame: pendingMessages %d, want 1", got)
	}
}

// A graceful close is done with a peer it cannot reach when only advice
// (and the bye) waits for that peer; a message waiting holds it (up to
// Options.CloseTimeout).
func TestAGracefulCloseWaitsForAnUnreachedPeerOnlyForMessages(t *testing.T) {
	for _, c := range []struct {
		kinds []transport.Kind
		done  bool
	}{
		{[]transport.Kind{transport.Control, transport.Hint}, true},
		{[]transport.Kind{transport.Control, transport.Frame}, false},
		{[]transport.Kind{transport.Reply}, false},
		{nil, true},
	} {
		s := newSession(&sessionConfig{local: "a", inc: 1, ackEvery: 4, heartbeatTicks: 3, downTicks: 6, resendTicks: noResend, highItems: 8, highBytes: 1 << 20})
		var o output
		for _, k := range c.kinds {
			if err := s.send(transport.Item{Kind: k, Data: []byte("x")}, &o); err != nil {
				t.Fatal(err)
			}
		}
		s.close(true, 0, 0, &o)
		if got := s.closed(); got != c.done {
			t.Errorf("items %v waiting for a peer never reached, then a graceful close: closed %v, want %v", c.kinds, got, c.done)
		}
	}
}
