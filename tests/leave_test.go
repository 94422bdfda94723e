package tests

import (
	"context"
	"testing"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/internal/localnet"
	"github.com/berthrt/berth/transport"
	"github.com/berthrt/berth/transport/tcp"
)

// slowClose is a host's tcp transport whose Close starts late (a slow
// machine), and reports what it returned.
type slowClose struct {
	*tcp.Transport
	delay time.Duration
	err   chan error
}

func (s *slowClose) Close(graceful bool) error {
	time.Sleep(s.delay)
	err := s.Transport.Close(graceful)
	select {
	case s.err <- err:
	default:
	}
	return err
}

// slowCloseAttacher attaches hosts as a tlsAttacher does, the host named
// slow with a slowClose.
type slowCloseAttacher struct {
	*tlsAttacher
	slow string
	tr   *slowClose
}

func (a *slowCloseAttacher) Attach(name string, h transport.Handler) (transport.Transport, error) {
	return a.AttachRun(name, 0, h)
}

func (a *slowCloseAttacher) AttachRun(name string, run uint64, h transport.Handler) (transport.Transport, error) {
	tr, err := a.tlsAttacher.AttachRun(name, run, h)
	if err != nil || name != a.slow {
		return tr, err
	}
	a.tr = &slowClose{Transport: tr.(*tcp.Transport), delay: 300 * time.Millisecond, err: make(chan error, 1)}
	return a.tr, nil
}

// A host that stops tells the membership it handed everything on (Gone),
// then closes its transport gracefully: the close waits until its peers
// received what it sent last. A peer that sees the Gone first keeps the
// link until the host left the membership, so the close completes — it is
// not left waiting, until its timeout, for peers that cut the link (the
// cause of drains that took 10 s longer than they should, one in five).
func TestAStoppingHostsCloseIsAnsweredByPeersThatSawItsLeaveFirst(t *testing.T) {
	net := localnet.New(localnet.Options{})
	att := &slowCloseAttacher{tlsAttacher: newTLSAttacher(tcp.Options{CloseTimeout: 5 * time.Second}), slow: "a"}
	a, b := startPair(t, actor.Config{Transport: att, Store: net.Store, Membership: net.Membership},
		func(h *actor.Host) { h.Register(benchKind()) })
	ref := actor.Ref{Kind: "bench", ID: "one"}
	if _, err := actor.Ask[benchGet, int](context.Background(), a, ref, benchGet{}); err != nil { // on a
		t.Fatal(err)
	}
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-att.tr.err; err != nil {
		t.Fatalf("a's graceful close: %v", err)
	}
	if n, err := actor.Ask[benchGet, int](context.Background(), b, ref, benchGet{}); err != nil || n != 0 {
		t.Fatalf("the object after a stopped: %d, %v", n, err)
	}
}
