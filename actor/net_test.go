package actor

import (
	"testing"

	"github.com/berthrt/berth/internal/localnet"
	"github.com/berthrt/berth/relocation"
)

// Network is this package's tests' in-process cluster: an inproc network
// that copies every item, one MemoryStore and one membership.Memory, with
// faults (internal/localnet). It exists in test builds only.
type Network struct{ *localnet.Net }

// NewNetwork returns an empty cluster on store (nil: a new MemoryStore).
func NewNetwork(store relocation.Store) *Network {
	return &Network{localnet.New(localnet.Options{Store: store})}
}

// Store returns the cluster's Location Store.
func (n *Network) Store() relocation.Store { return n.Net.Store }

// With returns c joined to the cluster: its Transport, Store and
// Membership set.
func (n *Network) With(c Config) Config {
	c.Transport, c.Store, c.Membership = n.Transport, n.Net.Store, n.Membership
	return c
}

// Kill crashes host h as its process would die: its transport first (what
// was queued to and from it is lost), its leases expired, then the host
// closed.
func (n *Network) Kill(h *Host) {
	n.Net.Kill(h.Name())
	_ = h.Close()
}

// waitViews waits until every host of hs knows every other from its
// membership watch (a host learns of one that joined after it a moment
// later), and has heard its load.
func waitViews(t testing.TB, hs ...*Host) {
	t.Helper()
	waitFor(t, "the hosts to know each other", func() bool {
		for _, h := range hs {
			for _, o := range hs {
				if _, ok := h.peers.view.member(o.name); !ok {
					return false
				}
				if o != h && h.peers.view.loadOf(o.name) != o.stats.owners.Load() {
					return false
				}
			}
		}
		return true
	})
}
