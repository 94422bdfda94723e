package actor

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/berthrt/berth/transport"
)

// runLink is the host's end of its links across its runs: the transport
// attachment of the current run. A host attaches once, at Start, and
// keeps that attachment for its life — except a gateway whose run the
// membership ended (it was paused past its lease): it joins again as a
// new run (lease.go, rejoin), whose links are a new attachment under the
// new run's generation, which replaces the old one here.
//
// Owns: the current attachment. Lock: none (an atomic pointer).
// Invariants: a Send that finds the attachment it used closed while a
// successor is being made waits for it and sends there: nothing a sender
// hands over in that window is refused for it; what the old attachment
// had queued died with the old run (its peers saw that run fail), counted
// by replace's caller (Stats.LostOnRejoin).
type runLink struct {
	cur atomic.Pointer[attachment]
}

// attachment is one run's transport.
type attachment struct {
	t       transport.Transport
	backlog transport.Backlogger   // t, if its links have a hard bound
	dir     transport.Directory    // t, if it needs its peers' addresses
	runDir  transport.RunDirectory // t, if it checks its peers' runs
	// replacing is set before t is closed for a new run's attachment;
	// replaced is closed once that one is current (or the replacement
	// failed: the host then closes).
	replacing atomic.Bool
	replaced  chan struct{}
}

func newAttachment(t transport.Transport) *attachment {
	a := &attachment{t: t, replaced: make(chan struct{})}
	a.backlog, _ = t.(transport.Backlogger)
	a.dir, _ = t.(transport.Directory)
	a.runDir, _ = t.(transport.RunDirectory)
	return a
}

// newRunLink returns the link of a host whose first run attached as t.
func newRunLink(t transport.Transport) *runLink {
	l := &runLink{}
	l.cur.Store(newAttachment(t))
	return l
}

// current returns the current run's attachment.
func (l *runLink) current() *attachment { return l.cur.Load() }

// Send sends it as the current run's transport does (transport.Send). A
// send that finds its attachment closed for a new run's sends there.
func (l *runLink) Send(to string, it transport.Item) error {
	for {
		a := l.cur.Load()
		err := a.t.Send(to, it)
		if err == nil || !errors.Is(err, transport.ErrClosed) || !a.replacing.Load() {
			return err
		}
		<-a.replaced
		if l.cur.Load() == a {
			return err // the replacement failed: the host closes
		}
	}
}

// WaitRoom is transport.WaitRoom on the current run's links.
func (l *runLink) WaitRoom(ctx context.Context, to string) error {
	return l.cur.Load().t.WaitRoom(ctx, to)
}

// Peers is transport.Peers of the current run.
func (l *runLink) Peers() []string { return l.cur.Load().t.Peers() }

// Pending is transport.Pending of the current run.
func (l *runLink) Pending() (in, out int) { return l.cur.Load().t.Pending() }

// Leave is transport.Leave of the current run.
func (l *runLink) Leave() { l.cur.Load().t.Leave() }

// Close is transport.Close of the current run.
func (l *runLink) Close(graceful bool) error { return l.cur.Load().t.Close(graceful) }

// backlogged reports whether the current run's link to host to is at its
// bound (transport.Backlogger).
func (l *runLink) backlogged(to string) bool {
	a := l.cur.Load()
	return a.backlog != nil && a.backlog.Backlogged(to)
}

// replace closes the current run's attachment, as a crash would (its
// peers saw the run fail), and makes next the current one with attach.
// Sends meanwhile wait for it. It returns how many messages and move
// records the old attachment's links had not delivered as it closed
// (transport.Pending): they are lost with the old run. If attach fails,
// the old attachment stays current, closed: sends fail with ErrClosed,
// and the caller closes the host.
func (l *runLink) replace(attach func() (transport.Transport, error)) (lost int, err error) {
	old := l.cur.Load()
	old.replacing.Store(true)
	defer close(old.replaced)
	_, lost = old.t.Pending()
	_ = old.t.Close(false)
	t, err := attach()
	if err != nil {
		return lost, err
	}
	l.cur.Store(newAttachment(t))
	return lost, nil
}
