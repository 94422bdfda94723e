// Package localnet assembles the in-process cluster that berth's tests and
// benchmarks run on: one transport/inproc Network (copying every
// item), one relocation.MemoryStore and one membership.Memory, with fault
// injection that spans them (Kill expires the host's leases too; Break
// loses the relocation records sent while it lasts).
//
// It is what a user composes by hand from the public packages (see
// actor's examples); it lives here so the tests need not repeat it. It
// imports no berth package that imports it back: actor's own tests use it.
package localnet

import (
	"context"
	"sync"
	"time"

	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport"
	"github.com/berthrt/berth/transport/inproc"
)

// Net is one in-process cluster. Its fields are what a host's Config
// takes: Transport, Store and Membership.
type Net struct {
	Transport  *inproc.Network
	Store      relocation.Store
	Membership *membership.Memory

	mu     sync.Mutex
	broken map[[2]string]bool                                // guarded by mu
	hook   func(from, to string, rec relocation.Record) bool // guarded by mu
}

// Options configures New.
type Options struct {
	// Store is the Location Store (nil: a new MemoryStore). Kill expires
	// a host's lease in it if it has an Expire(host string) method, as
	// MemoryStore has.
	Store relocation.Store
	// High is the links' flow-control mark (inproc.Options.High; 0: its
	// default).
	High int
}

// New returns an empty cluster.
func New(opts Options) *Net {
	n := &Net{Store: opts.Store, broken: map[[2]string]bool{}}
	if n.Store == nil {
		n.Store = relocation.NewMemoryStore(nil)
	}
	n.Transport = inproc.NewNetwork(inproc.Options{High: opts.High})
	n.Membership = membership.NewMemory(membership.Options{})
	n.Transport.SetHook(n.filter)
	return n
}

func pair(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// filter loses the records sent over a broken pair, and those the record
// hook refuses.
func (n *Net) filter(from, to string, it transport.Item) bool {
	if it.Kind != transport.Record {
		return true
	}
	n.mu.Lock()
	broken, hook := n.broken[pair(from, to)], n.hook
	n.mu.Unlock()
	if broken {
		return false
	}
	if hook == nil {
		return true
	}
	_, rec, err := relocation.DecodeRecord(it.Data)
	return err != nil || hook(from, to, rec)
}

// SetRecordHook installs a hook that sees every relocation record sent
// from one host to another, decoded; a record for which it returns false
// is lost. It must not block; nil removes it.
func (n *Net) SetRecordHook(hook func(from, to string, rec relocation.Record) bool) {
	n.mu.Lock()
	n.hook = hook
	n.mu.Unlock()
}

// Break breaks the link between a and b both ways until Heal: messages,
// replies, hints and control items wait on it and are delivered after
// Heal; relocation records sent meanwhile are lost (the moves resend what
// their phase needs when they hear the link is up).
func (n *Net) Break(a, b string) {
	n.mu.Lock()
	n.broken[pair(a, b)] = true
	n.mu.Unlock()
	n.Transport.Break(a, b)
}

// Heal repairs the link between a and b.
func (n *Net) Heal(a, b string) {
	n.mu.Lock()
	delete(n.broken, pair(a, b))
	n.mu.Unlock()
	n.Transport.Heal(a, b)
}

// Broken reports whether the link between a and b is broken.
func (n *Net) Broken(a, b string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.broken[pair(a, b)]
}

// Delay makes every delivery between a and b wait d (0 removes it).
func (n *Net) Delay(a, b string, d time.Duration) { n.Transport.Delay(a, b, d) }

// Kill crashes the named host's transport, as if its process died (what
// was queued to and from it is lost), and expires its leases in the store
// and the membership, so other hosts may take its objects over at once.
// The caller then closes the host itself.
func (n *Net) Kill(name string) {
	n.Transport.Kill(name)
	if s, ok := n.Store.(interface{ Expire(host string) }); ok {
		s.Expire(name)
	}
	n.Membership.Expire(name)
}

// Members returns the names of the live members.
func (n *Net) Members() []string {
	list, _ := n.Membership.Members(context.Background())
	out := make([]string, len(list))
	for i, m := range list {
		out[i] = m.Name
	}
	return out
}
