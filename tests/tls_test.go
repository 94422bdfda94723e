package tests

import (
	"os"
	"sync"

	"github.com/berthrt/berth/internal/devca"
	"github.com/berthrt/berth/transport"
	"github.com/berthrt/berth/transport/tcp"
)

// The CA every host of these tests trusts, in this process and in its
// child processes: the parent makes it and hands it to its children in
// the environment (startChild passes the parent's environment on).
const (
	caCertEnv = "BERTH_TESTS_CA_CERT"
	caKeyEnv  = "BERTH_TESTS_CA_KEY"
)

var testCA = sync.OnceValue(func() *devca.CA {
	if c, k := os.Getenv(caCertEnv), os.Getenv(caKeyEnv); c != "" && k != "" {
		ca, err := devca.Load([]byte(c), []byte(k))
		if err != nil {
			panic("tests: the CA in the environment: " + err.Error())
		}
		return ca
	}
	ca, err := devca.New("berth tests")
	if err != nil {
		panic(err)
	}
	if err := os.Setenv(caCertEnv, string(ca.CertPEM())); err != nil {
		panic(err)
	}
	if err := os.Setenv(caKeyEnv, string(ca.KeyPEM())); err != nil {
		panic(err)
	}
	return ca
})

// identity returns the TLS identity of host name, issued by the tests' CA.
func identity(name string) (*tcp.TLS, error) {
	ca := testCA()
	cert, err := ca.IssueTLS(name)
	if err != nil {
		return nil, err
	}
	return &tcp.TLS{Certificate: cert, CA: ca.Pool()}, nil
}

// tlsAttacher attaches each host on transport/tcp with TLS and a
// certificate of its own name (tcp.Attacher gives every host the same
// Options, so one certificate); it keeps the transports by name, as
// tcp.Attacher does, for fault injection (Cut).
type tlsAttacher struct {
	opts tcp.Options

	mu       sync.Mutex
	attached map[string]*tcp.Transport // guarded by mu
}

// newTLSAttacher returns an attacher of hosts on loopback with opts (its
// TLS set per host).
func newTLSAttacher(opts tcp.Options) *tlsAttacher {
	return &tlsAttacher{opts: opts, attached: map[string]*tcp.Transport{}}
}

// Attach implements transport.Attacher.
func (a *tlsAttacher) Attach(name string, h transport.Handler) (transport.Transport, error) {
	return a.AttachRun(name, 0, h)
}

// AttachRun implements transport.RunAttacher.
func (a *tlsAttacher) AttachRun(name string, run uint64, h transport.Handler) (transport.Transport, error) {
	id, err := identity(name)
	if err != nil {
		return nil, err
	}
	opts := a.opts
	opts.TLS, opts.Run = id, run
	t, err := tcp.Listen(name, h, opts)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.attached[name] = t
	a.mu.Unlock()
	return t, nil
}

// Transport returns the transport attached as name, or nil.
func (a *tlsAttacher) Transport(name string) *tcp.Transport {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.attached[name]
}
