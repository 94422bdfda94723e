package tcp_test

import (
	"sync"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/devca"
	"github.com/berthrt/berth/transport"
	"github.com/berthrt/berth/transport/tcp"
	"github.com/berthrt/berth/transport/transporttest"
)

// testOptions are quicker than the defaults, so that the suite's breaks
// are seen at once.
func testOptions() tcp.Options {
	return tcp.Options{Tick: 5 * time.Millisecond, Heartbeat: 25 * time.Millisecond, DownAfter: 500 * time.Millisecond}
}

// testCA is the development CA of this package's tests.
var testCA = sync.OnceValue(func() *devca.CA {
	ca, err := devca.New("berth tcp tests")
	if err != nil {
		panic(err)
	}
	return ca
})

// tlsFor returns the TLS identity of member name, from ca.
func tlsFor(t testing.TB, ca *devca.CA, name string) *tcp.TLS {
	t.Helper()
	cert, err := ca.IssueTLS(name)
	if err != nil {
		t.Fatalf("IssueTLS(%s): %v", name, err)
	}
	return &tcp.TLS{Certificate: cert, CA: ca.Pool()}
}

// cluster is the hosts of one test, each with its own listener on
// 127.0.0.1, each told the others' addresses (as a host following the
// membership would be).
type cluster struct {
	opts     tcp.Options
	insecure bool
	mu       sync.Mutex
	hosts    map[string]*tcp.Transport
}

func newCluster(opts tcp.Options, insecure bool) *cluster {
	return &cluster{opts: opts, insecure: insecure, hosts: map[string]*tcp.Transport{}}
}

func (c *cluster) start(t testing.TB, name string, h transport.Handler) *tcp.Transport {
	t.Helper()
	opts := c.opts
	if c.insecure {
		opts.Insecure = true
	} else {
		opts.TLS = tlsFor(t, testCA(), name)
	}
	tr, err := tcp.Listen(name, h, opts)
	if err != nil {
		t.Fatalf("Listen(%s): %v", name, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for other, o := range c.hosts {
		_ = o.AddPeer(name, tr.Addr()) // a closed host refuses: no matter
		if err := tr.AddPeer(other, o.Addr()); err != nil {
			t.Fatalf("AddPeer: %v", err)
		}
	}
	c.hosts[name] = tr
	t.Cleanup(func() {
		c.mu.Lock()
		delete(c.hosts, name)
		c.mu.Unlock()
	})
	return tr
}

func (c *cluster) get(name string) *tcp.Transport {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hosts[name]
}

func harness(c *cluster) transporttest.Harness {
	return transporttest.Harness{
		Start: func(t *testing.T, name string, h transport.Handler) transport.Transport {
			return c.start(t, name, h)
		},
		Break: func(t *testing.T, a, b string) {
			c.get(a).Cut(b, true)
			c.get(b).Cut(a, true)
		},
		Heal: func(t *testing.T, a, b string) {
			c.get(a).Cut(b, false)
			c.get(b).Cut(a, false)
		},
	}
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, harness(newCluster(testOptions(), false)))
}

func TestConformanceInsecure(t *testing.T) {
	transporttest.Run(t, harness(newCluster(testOptions(), true)))
}
