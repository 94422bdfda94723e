package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/actor/admin"
	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/metrics"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/pgstore"
	"github.com/berthrt/berth/transport/tcp"
)

// ErrNameHeld is the error of Start when a live node holds the name: the
// membership still had the name's lease once Config.NameWait had passed.
// It wraps membership.ErrNameTaken.
var ErrNameHeld = errors.New("node: the name is held by a live node")

// ErrStopUnfinished is the error of Stop when its Context ended before the
// drain finished: the node closed its host instead, and the message says
// how many accepted messages that dropped unrun.
var ErrStopUnfinished = errors.New("node: the graceful stop did not finish; the host was closed")

// Node is a running node: a host on the Postgres Location Store and
// membership, reached by its peers over TCP, with its HTTP and admin
// servers. Start makes one; Stop or Close ends it.
type Node struct {
	cfg  Config
	log  *slog.Logger
	host *actor.Host

	pools   *pgstore.Pools
	store   *pgstore.Store
	members *pgstore.Membership

	links               *tcpCollector                // the transport's counts on /metrics (nil without HTTP)
	attacher            atomic.Pointer[tcp.Attacher] // the host's transports (ReloadTLS)
	tlsNow              atomic.Pointer[tcp.TLS]      // the TLS in use (nil: none)
	httpAddr, adminAddr string
	stopping            atomic.Bool // Stop began: /readyz answers 503
	stopHTTP, stopAdmin func()      // nil: not serving
	once                sync.Once
}

// Start opens the database, starts the node's host with kinds and its
// servers, and returns once the host serves. It writes "http <address>",
// "admin <address>" and "ready <name> <address>" on Config.Stdout as each
// begins.
//
// While the membership says a previous run holds the name (it crashed,
// and its lease has not run out), Start waits and tries again, for at
// most Config.NameWait, then returns ErrNameHeld. ctx bounds the whole
// start: when it ends first, Start returns its error. A bad Config is
// ErrConfig.
func Start(ctx context.Context, cfg Config, kinds ...actor.Registrable) (_ *Node, err error) {
	cfg = cfg.withDefaults()
	sec, err := cfg.check()
	if err != nil { // no log yet: the caller says it
		return nil, err
	}
	n := &Node{cfg: cfg, log: cfg.Logger}
	if n.log == nil {
		opts := &slog.HandlerOptions{Level: cfg.LogLevel}
		var h slog.Handler = slog.NewTextHandler(cfg.Stderr, opts)
		if cfg.LogFormat == "json" {
			h = slog.NewJSONHandler(cfg.Stderr, opts)
		}
		n.log = slog.New(h).With("node", cfg.Name)
	}
	switch sec {
	case securityTLS:
		if cfg.TLS == nil {
			if n.cfg.TLS, err = n.loadTLS(); err != nil {
				return nil, err
			}
		} else if cfg.TLSDeny != "" {
			c := *cfg.TLS
			if c.Deny, err = tcp.LoadDenyList(cfg.TLSDeny); err != nil {
				return nil, fmt.Errorf("node: cannot load the deny list: %w", err)
			}
			n.cfg.TLS = &c
		}
		n.tlsNow.Store(n.cfg.TLS)
	case securityLoopback:
		n.log.Warn("no TLS: the node runs unauthenticated on loopback (-tls-cert, -tls-key and -tls-ca authenticate its peers)", "listen", cfg.Listen)
	case securityInsecure:
		n.log.Warn("-insecure: the node is unauthenticated; anyone who reaches it can act as any host", "listen", cfg.Listen)
	}
	defer func() {
		if err != nil {
			if ctx.Err() == nil {
				n.log.Error("cannot start", "err", err)
			}
			n.closeAll()
		}
	}()
	var m *metrics.Metrics
	var reg *prometheus.Registry
	var onStatement func(pool string, took time.Duration, err error)
	if cfg.HTTP != "" {
		// The Go runtime's and the process's own series beside berth's,
		// the transport's counts and the database's statements.
		reg = prometheus.NewRegistry()
		n.links = newTCPCollector(cfg.Name)
		statements := newStatementMetrics()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), n.links,
			statements.took, statements.failed)
		onStatement = statements.observe
		m = metrics.New(reg)
	}
	if err := n.open(ctx, onStatement); err != nil {
		return nil, err
	}
	var dashboard atomic.Pointer[http.Handler]
	var current atomic.Pointer[actor.Host]
	var obs actor.Observer
	if m != nil {
		obs = m
		if err := n.serveHTTP(m, &dashboard, func() error {
			if n.stopping.Load() {
				return errors.New("stopping")
			}
			h := current.Load()
			if h == nil {
				return errors.New("starting")
			}
			return h.Ready()
		}); err != nil {
			return nil, err
		}
	}
	if err := n.startHost(ctx, obs, kinds); err != nil {
		return nil, err
	}
	current.Store(n.host)
	if m != nil {
		d, err := admin.Dashboard(admin.DashboardOptions{Host: n.host, Membership: n.members, Store: n.store, Messages: m.Turns})
		if err != nil {
			return nil, fmt.Errorf("node: the dashboard: %w", err)
		}
		d = http.StripPrefix("/dashboard", d)
		dashboard.Store(&d)
	}
	if cfg.Admin != "" {
		if err := n.serveAdmin(); err != nil {
			return nil, err
		}
	}
	n.log.Info("serving", "address", n.host.Addr())
	fmt.Fprintf(cfg.Stdout, "ready %s %s\n", cfg.Name, n.host.Addr())
	return n, nil
}

// open opens the database's pools (each statement told to onStatement,
// if not nil), the Location Store and the membership.
func (n *Node) open(ctx context.Context, onStatement func(string, time.Duration, error)) error {
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pools, err := pgstore.OpenPoolsWith(octx, n.cfg.Database, pgstore.PoolsOptions{OnStatement: onStatement})
	if err != nil {
		return fmt.Errorf("node: cannot open the database: %w", err)
	}
	n.pools = pools
	if n.store, err = pgstore.Open(octx, pools.Work, pgstore.Options{LeasePool: pools.Leases, RenewPool: pools.Renewals}); err != nil {
		return fmt.Errorf("node: cannot open the Location Store: %w", err)
	}
	n.members, err = pgstore.OpenMembership(octx, pools.Leases, pgstore.MembershipOptions{Logger: n.log, TTL: n.cfg.LeaseTTL, RenewPool: pools.Renewals})
	if err != nil {
		return fmt.Errorf("node: cannot open the membership: %w", err)
	}
	return nil
}

// nameRetry is how often a node whose name a previous run still holds
// asks the membership again.
const nameRetry = 250 * time.Millisecond

// startHost makes and starts the node's host. While the membership says a
// previous run holds the name (membership.ErrNameTaken), it tries again,
// for at most NameWait.
func (n *Node) startHost(ctx context.Context, obs actor.Observer, kinds []actor.Registrable) error {
	cfg := n.cfg
	began := time.Now()
	for attempt := 1; ; attempt++ {
		links := tcp.New(tcp.Options{Listen: cfg.Listen, Advertise: cfg.Advertise, TLS: cfg.TLS, Insecure: cfg.TLS == nil, Logger: n.log})
		n.attacher.Store(links)
		host, err := actor.NewHost(actor.Config{
			Name:       cfg.Name,
			Transport:  links,
			Store:      n.store,
			Membership: n.members,
			Logger:     n.log,
			Observer:   obs,
			LeaseTTL:   cfg.LeaseTTL,
			LeaseRenew: cfg.LeaseRenew,
			AppVersion: cfg.AppVersion,
		})
		if err != nil {
			return fmt.Errorf("%w: %v", ErrConfig, err)
		}
		if err := host.Register(kinds...); err != nil {
			return fmt.Errorf("node: cannot register the kinds: %w", err)
		}
		err = host.Start()
		if err == nil {
			if attempt > 1 {
				n.log.Info("the previous run's lease ran out; the name is this node's now", "waited", time.Since(began).Round(time.Millisecond))
			}
			n.host = host
			if n.links != nil {
				n.links.attacher.Store(links)
			}
			return nil
		}
		_ = host.Close()
		if !errors.Is(err, membership.ErrNameTaken) {
			return fmt.Errorf("node: cannot start: %w", err)
		}
		if time.Since(began) > cfg.NameWait {
			return fmt.Errorf("%w (%q, still held after -name-wait %v), which this one leaves alone: %w", ErrNameHeld, cfg.Name, cfg.NameWait, err)
		}
		if attempt == 1 {
			n.log.Warn("the name is held by a previous run that did not leave (it crashed?): waiting for its lease to run out",
				"name", cfg.Name, "name-wait", cfg.NameWait)
		}
		select {
		case <-time.After(nameRetry):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Host is the node's host: a program sends to its objects through it.
func (n *Node) Host() *actor.Host { return n.host }

// Addr is the address the node's peers reach it on.
func (n *Node) Addr() string { return n.host.Addr() }

// HTTPAddr is the address of the node's /metrics, /healthz, /readyz and
// /dashboard/, or "" without Config.HTTP.
func (n *Node) HTTPAddr() string { return n.httpAddr }

// AdminAddr is the address of the node's admin API, or "" without
// Config.Admin.
func (n *Node) AdminAddr() string { return n.adminAddr }

// Logger is the node's log.
func (n *Node) Logger() *slog.Logger { return n.log }

// Done is closed when the host has closed: after Stop or Close, after a
// drain through the admin API, or when the host closed itself (its run
// ended: Err says why).
func (n *Node) Done() <-chan struct{} { return n.host.Done() }

// Err is why the host closed itself: nil while it runs and after a
// graceful stop; an error wrapping actor.ErrLeaseLost when a newer run of
// its name holds the lease (another process of that name). A node whose
// run the membership ended (a stall past its lease) joins again as a new
// run instead and goes on.
func (n *Node) Err() error { return n.host.Err() }

// Stop stops the node gracefully: /readyz answers 503 at once, its
// objects move to the other nodes (Host.Stop drains), it leaves the
// cluster, and its servers and the database close. It writes the "stats"
// line on Config.Stdout. If ctx ends before the drain has finished, Stop
// closes the host (Close), which drops what it still holds, and returns
// an error wrapping ErrStopUnfinished that says how many accepted messages
// were dropped unrun.
func (n *Node) Stop(ctx context.Context) error {
	n.stopping.Store(true)
	n.log.Info("stopping: moving the objects to the other nodes")
	if err := n.host.Stop(ctx); err != nil {
		// Stop leaves the host running when its Context ends: closing it
		// is the node's decision, and it drops what the host still held.
		n.log.Error("graceful stop did not finish; closing the host", "err", err)
		dropped := n.Close()
		return fmt.Errorf("%w (%v): %d accepted messages dropped unrun", ErrStopUnfinished, err, dropped)
	}
	n.log.Info("stopped")
	fmt.Fprintln(n.cfg.Stdout, n.stats())
	n.closeAll()
	return nil
}

// Close closes the node at once: the host's objects and what they hold
// are dropped (they are taken over elsewhere once its lease runs out). It
// returns how many accepted messages that dropped unrun
// (actor.Stats.DroppedOnClose), and logs it.
func (n *Node) Close() int64 {
	n.stopping.Store(true)
	n.closeAll()
	d := n.host.Stats().DroppedOnClose
	if d > 0 {
		n.log.Error("closed: accepted messages were dropped unrun", "dropped", d)
	} else {
		n.log.Info("closed: no accepted message was dropped", "dropped", d)
	}
	return d
}

// closeBound bounds how long closing the host may take: its transport's
// graceful close may wait for a peer that takes nothing
// (tcp.Options.CloseTimeout), and a handler that ignores its Context
// holds Host.Close up.
const closeBound = 5 * time.Second

// closeAll closes, once, what the node opened: the admin API first (a
// drain's answer gets out), the host (for at most closeBound), the
// membership, the database, and last the HTTP server, so that /healthz
// answers while the rest closes.
func (n *Node) closeAll() {
	n.once.Do(func() {
		if n.stopAdmin != nil {
			n.stopAdmin()
		}
		if n.host != nil {
			closed := make(chan struct{})
			go func() {
				_ = n.host.Close()
				close(closed)
			}()
			select {
			case <-closed:
			case <-time.After(closeBound):
				n.log.Error("closing the host did not finish; going on all the same", "waited", closeBound)
			}
		}
		if n.members != nil {
			n.members.Close()
		}
		if n.pools != nil {
			n.pools.Close()
		}
		if n.stopHTTP != nil {
			n.stopHTTP()
		}
	})
}

// stats is the line a node writes when it stops gracefully: the moves it
// was the source of and their pauses (Host.Pauses), in microseconds.
func (n *Node) stats() string {
	p := n.host.Pauses()
	us := make([]string, len(p))
	for i, d := range p {
		us[i] = strconv.FormatInt(d.Microseconds(), 10)
	}
	return "stats moves=" + strconv.Itoa(len(p)) + " pauses-us=" + strings.Join(us, ",")
}

// serveHTTP serves /metrics (m), /healthz (200 while the process runs),
// /readyz (200, or 503 and ready's error) and /dashboard/ (the handler
// dashboard holds, once the host has started) on Config.HTTP.
func (n *Node) serveHTTP(m http.Handler, dashboard *atomic.Pointer[http.Handler], ready func() error) error {
	ln, err := net.Listen("tcp", n.cfg.HTTP)
	if err != nil {
		return fmt.Errorf("node: cannot serve HTTP on %s: %w", n.cfg.HTTP, err)
	}
	var dash http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := dashboard.Load()
		if d == nil {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		(*d).ServeHTTP(w, r)
	})
	if !isLoopback(n.cfg.HTTP) && !n.cfg.HTTPOpen {
		// Off loopback, what shows the cluster needs an admin credential
		// (the probes' routes do not).
		var tokens []string
		for _, t := range []string{n.cfg.AdminToken, n.cfg.AdminWriteToken} {
			if t != "" {
				tokens = append(tokens, t)
			}
		}
		if m, err = admin.RequireToken(m, tokens...); err != nil {
			return fmt.Errorf("node: /metrics: %w", err)
		}
		if dash, err = admin.RequireToken(dash, tokens...); err != nil {
			return fmt.Errorf("node: /dashboard/: %w", err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.Handle("GET /dashboard/", dash)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(n.log.Handler(), slog.LevelWarn)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // http.ErrServerClosed after the close
	}()
	n.httpAddr = ln.Addr().String()
	n.stopHTTP = func() { _ = srv.Close(); <-done }
	n.log.Info("serving /metrics, /healthz, /readyz and /dashboard/", "http", n.httpAddr)
	fmt.Fprintf(n.cfg.Stdout, "http %s\n", n.httpAddr)
	return nil
}

// loadTLS reads the node's TLS files: its certificate and key, the CA,
// and the deny list, if any.
func (n *Node) loadTLS() (*tcp.TLS, error) {
	c, err := tcp.LoadTLS(n.cfg.TLSCert, n.cfg.TLSKey, n.cfg.TLSCA)
	if err != nil {
		return nil, fmt.Errorf("node: cannot load the TLS files: %w", err)
	}
	if n.cfg.TLSDeny != "" {
		if c.Deny, err = tcp.LoadDenyList(n.cfg.TLSDeny); err != nil {
			return nil, fmt.Errorf("node: cannot load the deny list: %w", err)
		}
	}
	return c, nil
}

// ErrNoTLSFiles: ReloadTLS on a node whose TLS came from no files.
var ErrNoTLSFiles = payload.NewError(payload.InvalidOperation, "node.ReloadTLS", "the node's TLS comes from no files (-tls-cert, -tls-key, -tls-ca)")

// ReloadTLS reads the node's TLS files (-tls-cert, -tls-key, -tls-ca,
// -tls-deny) again and uses them from now on: new handshakes with peers
// and on the admin listener present the new certificate and check the
// new CA and deny list, links on a newly denied certificate close, and
// links made before go on. A certificate that does not name the node, or
// names it in another role, is refused and nothing changes. berth node
// calls it on SIGHUP. Rotating the CA: give every node a CA file holding
// the old and the new CA, reload each, then their new certificates, then
// the new CA alone.
func (n *Node) ReloadTLS() error {
	if n.cfg.TLSCert == "" {
		return ErrNoTLSFiles
	}
	c, err := n.loadTLS()
	if err != nil {
		return err
	}
	if a := n.attacher.Load(); a != nil {
		if err := a.SetTLS(c); err != nil {
			return fmt.Errorf("node: the new TLS files: %w", err)
		}
	}
	n.tlsNow.Store(c)
	leaf := c.Certificate.Leaf
	n.log.Info("reloaded the TLS files", "serial", leaf.SerialNumber.Text(16), "not_after", leaf.NotAfter, "denied", len(c.Deny))
	return nil
}

// serveAdmin serves the admin API (actor/admin) on Config.Admin: over TLS
// with the node's certificate when it has one.
func (n *Node) serveAdmin() error {
	h, err := admin.New(admin.Options{Host: n.host, Membership: n.members, Store: n.store, Token: n.cfg.AdminToken, WriteToken: n.cfg.AdminWriteToken,
		AllowWrites: n.cfg.AdminWrite, Audit: n.log})
	if err != nil {
		return fmt.Errorf("node: the admin API: %w", err)
	}
	ln, err := net.Listen("tcp", n.cfg.Admin)
	if err != nil {
		return fmt.Errorf("node: cannot serve the admin API on %s: %w", n.cfg.Admin, err)
	}
	if n.cfg.TLS != nil {
		ln = tls.NewListener(ln, &tls.Config{MinVersion: tls.VersionTLS13,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &n.tlsNow.Load().Certificate, nil }})
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(n.log.Handler(), slog.LevelWarn)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	n.adminAddr = ln.Addr().String()
	n.stopAdmin = func() {
		// Answers under way get out (the drain's among them: a node
		// drained through the API stops as soon as its host has), for a
		// while.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
		<-done
	}
	n.log.Info("serving the admin API", "admin", n.adminAddr, "writes", n.cfg.AdminWrite, "tls", n.cfg.TLS != nil)
	fmt.Fprintf(n.cfg.Stdout, "admin %s\n", n.adminAddr)
	return nil
}

// Run runs a node with kinds until ctx ends, then stops it gracefully,
// for at most Config.StopTimeout. It returns nil after a graceful stop
// (or a drain through the admin API); an error wrapping ErrStopUnfinished
// when the stop did not finish in time; one wrapping actor.ErrLeaseLost
// when the node's lease ran out before it could renew it (its process was
// paused, or the database was out of reach past the lease: its objects
// may run elsewhere by now, so it must start again as a new run); or
// Start's error. ExitCode maps each to the exit code of berth node.
func Run(ctx context.Context, cfg Config, kinds ...actor.Registrable) error {
	n, err := Start(ctx, cfg, kinds...)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.cfg.StopTimeout)
		defer cancel()
		return n.Stop(sctx)
	case <-n.Done():
		return n.ended()
	}
}

// ended is what Run returns when the host closed by itself.
func (n *Node) ended() error {
	defer n.closeAll()
	if n.host.Err() == nil && n.host.DrainState() == actor.Stopped {
		n.log.Info("drained (through the admin API) and stopped")
		fmt.Fprintln(n.cfg.Stdout, n.stats())
		return nil
	}
	if errors.Is(n.host.Err(), actor.ErrLeaseLost) {
		n.log.Error("the node's lease ran out; exiting so that it can be started again", "err", n.host.Err())
		return fmt.Errorf("node: %w", n.host.Err())
	}
	n.log.Error("the host closed", "err", n.host.Err())
	return fmt.Errorf("node: the host closed: %w", n.host.Err())
}
