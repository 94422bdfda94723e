package main

// berth node: one host per process.
//
//	go run ./cmd/berth node -name n1 -db postgres://... [-listen 127.0.0.1:0] [-advertise host:port]
//		[-tls-cert n1.pem -tls-key n1-key.pem -tls-ca ca.pem | -insecure] [-http :9090]
//
// The node joins the cluster whose Location Store and membership live in
// the Postgres database -db (package pgstore; without -db, the URL in
// $BERTH_DB, else pgx's PG* variables and .pgpass — a password on the
// command line shows in ps), reaches its peers over transport/tcp (each
// peer's address comes from the membership), and hosts the demo's counter
// kind.
//
// Its connections are mutually authenticated TLS 1.3 with -tls-cert,
// -tls-key and -tls-ca (PEM files, all three or none; the certificate must
// name the node: -name among its DNS names; berth certs makes a
// development CA). Without them it runs plaintext and unauthenticated —
// anyone who reaches its port can act as any host — and so only with
// -insecure, or when -listen is a loopback address (127.0.0.0/8, ::1,
// localhost; it logs that it does). An empty or unspecified listen host
// (":7000", "0.0.0.0:7000") is not loopback.
//
// With -http it serves, on that address, /metrics (Prometheus), /healthz
// (200 while the process runs), /readyz (200 while the node serves:
// joined, its lease live, not draining or stopping; 503 with the reason
// otherwise) and /dashboard/ (a live page of the cluster; package
// actor/admin), and prints the address first on standard output:
//
//	http <address>
//
// When it is serving it prints one line on standard output:
//
//	ready <name> <address>
//
// and when it has stopped gracefully, one more: the moves it was the
// source of and their pauses, in microseconds:
//
//	stats moves=<n> pauses-us=<p1>,<p2>,...
//
// A name whose previous run still holds it in the membership (that run
// crashed, and its lease has not run out yet) is waited for: the node
// logs it and tries again until the lease runs out, for at most
// -name-wait (default: a lease's length and 5 s); a name still held then
// belongs to a live node, which the new one leaves alone, exiting 1.
//
// On SIGTERM or SIGINT the node stops being ready at once (/readyz
// answers 503), then stops gracefully: its objects move to the other
// nodes (Host.Stop drains), it leaves, and it exits 0. If that stop has
// not finished within -stop-timeout (the grace period), or a second
// SIGTERM or SIGINT arrives, the node closes the host (Host.Close; it
// waits for that at most 5 s more, or until a third signal), logs how
// many accepted messages that dropped unrun
// (actor.Stats.DroppedOnClose), and exits 1. A node whose lease ran out
// before it could renew it (its process was paused, or the database was
// out of reach for longer than the lease) closes itself and exits 3: its
// objects may run elsewhere by now; start it again. It logs with
// log/slog, as text, on standard error.
//
// With -admin it serves the admin API (package actor/admin; berth admin
// speaks it) on that address, printing "admin <address>" first: HTTPS
// with the node's certificate, or plain HTTP on loopback or with
// -insecure; every request needs the credential of -admin-token-file (or
// $BERTH_ADMIN_TOKEN), and move and drain need -admin-write. A drain
// through it ends with exit 0, as a SIGTERM's does.
//
// Exit codes: 0 stopped gracefully; 1 could not start (a name held by a
// live node, a database out of reach, bad files), or closed without
// finishing its stop (grace period or second signal); 2 usage; 3 its
// lease ran out.

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/actor/admin"
	"github.com/berthrt/berth/examples/account"
	"github.com/berthrt/berth/examples/counter"
	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/metrics"
	"github.com/berthrt/berth/pgstore"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport/tcp"
)

// Exit codes of berth node.
const (
	nodeExitOK        = 0
	nodeExitFailed    = 1 // could not start, or stopped with an error
	nodeExitUsage     = 2
	nodeExitLeaseLost = 3
)

type nodeConfig struct {
	name, listen, advertise, db, httpAddr string
	stopTimeout, nameWait                 time.Duration
	leaseTTL, leaseRenew                  time.Duration // -lease-ttl, -lease-renew
	tls                                   *tcp.TLS      // nil: insecure
	admin                                 nodeAdmin
}

// nodeAdmin is how a node serves the admin API (package actor/admin).
type nodeAdmin struct {
	addr   string // "": not served
	token  string // the admin credential
	writes bool   // move and drain allowed
}

// nodeSecurity is how a node's transport treats its connections.
type nodeSecurity int

const (
	securityTLS      nodeSecurity = iota // mutual TLS with the -tls-* files
	securityInsecure                     // plaintext, unauthenticated: -insecure
	securityLoopback                     // plaintext, unauthenticated: no flag, listening on loopback
)

// transportSecurity decides how a node listening on listen secures its
// transport, from its -tls-cert, -tls-key, -tls-ca and -insecure flags: TLS
// when all three files are given; insecure with -insecure, or without
// either when listen's host is a loopback address (isLoopbackListen). It
// returns a usage error, to print as it stands, for a partial set of TLS
// files, for -insecure with TLS files, and for no flag at all on any other
// listen address.
func transportSecurity(listen, certFile, keyFile, caFile string, insecure bool) (nodeSecurity, error) {
	files := []struct{ flag, file string }{{"-tls-cert", certFile}, {"-tls-key", keyFile}, {"-tls-ca", caFile}}
	var given, missing []string
	for _, f := range files {
		if f.file != "" {
			given = append(given, f.flag)
		} else {
			missing = append(missing, f.flag)
		}
	}
	switch {
	case insecure && len(given) > 0:
		return 0, fmt.Errorf("berth node: -insecure and %s exclude each other: give -tls-cert, -tls-key and -tls-ca for TLS, or -insecure alone to run without it",
			strings.Join(given, ", "))
	case insecure:
		return securityInsecure, nil
	case len(missing) == 0:
		return securityTLS, nil
	case len(given) > 0:
		return 0, fmt.Errorf("berth node: -tls-cert, -tls-key and -tls-ca go together: %s given without %s",
			strings.Join(given, ", "), strings.Join(missing, ", "))
	case isLoopbackListen(listen):
		return securityLoopback, nil
	default:
		return 0, fmt.Errorf("berth node: -listen %q is not a loopback address, and without TLS anyone who reaches it can act as any host: "+
			"give -tls-cert, -tls-key and -tls-ca (berth certs makes a development CA), or -insecure to run unauthenticated", listen)
	}
}

// isLoopbackListen reports whether the host of the host:port listen is a
// loopback address: an IP in 127.0.0.0/8 or ::1, or "localhost". An empty
// or unspecified host (":7000", "0.0.0.0:7000", "[::]:7000") listens on
// every interface, so it is not; nor is anything that does not parse.
func isLoopbackListen(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func nodeMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg nodeConfig
	fs.StringVar(&cfg.name, "name", "", "the host's name, unique in the cluster (required)")
	fs.StringVar(&cfg.listen, "listen", tcp.DefaultListen, "host:port the node listens on for its peers' TCP connections (port 0: a free port)")
	fs.StringVar(&cfg.advertise, "advertise", "", "the address peers dial to reach this node (default: the address it listens on)")
	fs.StringVar(&cfg.db, "db", "", "Postgres URL of the cluster's Location Store and membership (default $BERTH_DB, else pgx's PG* variables and .pgpass; a password is better kept out of it: it shows in ps)")
	fs.StringVar(&cfg.httpAddr, "http", "", "serve /metrics, /healthz and /readyz on this address (e.g. :9090)")
	fs.StringVar(&cfg.httpAddr, "metrics", "", "the same as -http")
	fs.DurationVar(&cfg.stopTimeout, "stop-timeout", time.Minute, "how long a graceful stop (drain) may take on SIGTERM; past it, or on a second SIGTERM, the node closes the host, dropping what it still holds")
	fs.DurationVar(&cfg.nameWait, "name-wait", 0, "how long to wait for a previous run's lease on the name to run out (it crashed) before giving up (default: the lease's TTL + 5s)")
	fs.DurationVar(&cfg.leaseTTL, "lease-ttl", relocation.LeaseTTL, "the host lease's length, in the Location Store and the membership: a crashed node's objects are taken over about this long after its last renewal; "+
		"a node whose renewals go unanswered this long pauses its objects (jeopardy) until the database answers — it does not exit")
	fs.DurationVar(&cfg.leaseRenew, "lease-renew", relocation.LeaseRenew, "how often the node renews its lease; under half of -lease-ttl")
	certFile := fs.String("tls-cert", "", "PEM `file` of the node's certificate, which names it (-name among its DNS names); with -tls-key and -tls-ca")
	keyFile := fs.String("tls-key", "", "PEM `file` of the certificate's private key")
	caFile := fs.String("tls-ca", "", "PEM `file` of the CA certificates the peers' certificates must chain to")
	insecure := fs.Bool("insecure", false, "run without TLS: plaintext, and a peer is whoever it says it is; needed without the -tls-* flags unless -listen is a loopback address")
	fs.StringVar(&cfg.admin.addr, "admin", "", "serve the admin API (berth admin) on this address: HTTPS with the node's certificate, or plain HTTP on loopback or with -insecure")
	tokenFile := fs.String("admin-token-file", "", "`file` holding the admin credential (at least 16 bytes; default $BERTH_ADMIN_TOKEN)")
	fs.BoolVar(&cfg.admin.writes, "admin-write", false, "allow the admin API's routes that change the cluster (move, drain)")
	if err := fs.Parse(args); err != nil {
		return nodeExitUsage
	}
	db, ok := nodeDatabase(cfg.db, os.Getenv)
	if cfg.name == "" || !ok {
		fmt.Fprintln(stderr, "berth node: -name and a database are required (-db URL, $BERTH_DB, or pgx's PG* variables such as PGHOST)")
		fs.Usage()
		return nodeExitUsage
	}
	cfg.db = db
	if cfg.leaseTTL <= 0 || cfg.leaseRenew <= 0 || cfg.leaseRenew >= cfg.leaseTTL/2 {
		fmt.Fprintf(stderr, "berth node: -lease-renew %v must be positive and under half of -lease-ttl %v: a renewal may be slow or lost once and the lease still hold\n",
			cfg.leaseRenew, cfg.leaseTTL)
		return nodeExitUsage
	}
	if cfg.nameWait == 0 {
		cfg.nameWait = cfg.leaseTTL + 5*time.Second
	}
	security, err := transportSecurity(cfg.listen, *certFile, *keyFile, *caFile, *insecure)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return nodeExitUsage
	}
	if cfg.admin.addr != "" {
		tok, err := adminToken(*tokenFile, os.Getenv)
		if err != nil {
			fmt.Fprintln(stderr, "berth node:", err)
			return nodeExitUsage
		}
		cfg.admin.token = tok
		if security != securityTLS && !*insecure && !isLoopbackListen(cfg.admin.addr) {
			fmt.Fprintf(stderr, "berth node: -admin %q is not a loopback address and the node has no TLS: give the -tls-* flags, or -insecure\n", cfg.admin.addr)
			return nodeExitUsage
		}
	}
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("node", cfg.name)
	switch security {
	case securityTLS:
		if cfg.tls, err = tcp.LoadTLS(*certFile, *keyFile, *caFile); err != nil {
			log.Error("cannot load the TLS files", "err", err)
			return nodeExitFailed
		}
	case securityLoopback:
		log.Warn("no TLS flags: the node runs unauthenticated on loopback (-tls-cert, -tls-key and -tls-ca authenticate its peers)", "listen", cfg.listen)
	case securityInsecure:
		log.Warn("-insecure: the node is unauthenticated; anyone who reaches it can act as any host", "listen", cfg.listen)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	return runNode(context.Background(), cfg, log, stdout, sig)
}

// runNode runs one node until a signal arrives on sig (a graceful stop)
// or the host closes itself, and returns the exit code.
func runNode(ctx context.Context, cfg nodeConfig, log *slog.Logger, stdout io.Writer, sig <-chan os.Signal) int {
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pools, err := pgstore.OpenPools(octx, cfg.db)
	if err != nil {
		log.Error("cannot open the database", "err", err)
		return nodeExitFailed
	}
	defer pools.Close()
	store, err := pgstore.Open(octx, pools.Work, pgstore.Options{LeasePool: pools.Leases, RenewPool: pools.Renewals})
	if err != nil {
		log.Error("cannot open the Location Store", "err", err)
		return nodeExitFailed
	}
	members, err := pgstore.OpenMembership(octx, pools.Leases, pgstore.MembershipOptions{Logger: log, TTL: cfg.leaseTTL, RenewPool: pools.Renewals})
	if err != nil {
		log.Error("cannot open the membership", "err", err)
		return nodeExitFailed
	}
	defer members.Close()
	var obs actor.Observer
	var current atomic.Pointer[actor.Host] // the host, once it started
	var stopping atomic.Bool               // a signal arrived: not ready from then on
	var dashboard atomic.Pointer[http.Handler]
	var m *metrics.Metrics
	if cfg.httpAddr != "" {
		m = metrics.New(prometheus.NewRegistry())
		obs = m
		bound, stop, err := serveNodeHTTP(cfg.httpAddr, m, &dashboard, func() error {
			if stopping.Load() {
				return errors.New("stopping")
			}
			h := current.Load()
			if h == nil {
				return errors.New("starting")
			}
			return h.Ready()
		})
		if err != nil {
			log.Error("cannot serve HTTP", "address", cfg.httpAddr, "err", err)
			return nodeExitFailed
		}
		defer stop()
		log.Info("serving /metrics, /healthz, /readyz and /dashboard/", "http", bound)
		fmt.Fprintf(stdout, "http %s\n", bound)
	}
	host, code := startNodeHost(ctx, cfg, log, store, members, obs, sig)
	if host == nil {
		return code
	}
	current.Store(host)
	if m != nil {
		d, err := admin.Dashboard(admin.DashboardOptions{Host: host, Membership: members, Store: store, Messages: m.Turns})
		if err != nil {
			log.Error("cannot make the dashboard", "err", err)
			_ = host.Close()
			return nodeExitFailed
		}
		d = http.StripPrefix("/dashboard", d)
		dashboard.Store(&d)
	}
	if cfg.admin.addr != "" {
		bound, stop, err := serveNodeAdmin(cfg, log, host, store, members)
		if err != nil {
			log.Error("cannot serve the admin API", "address", cfg.admin.addr, "err", err)
			_ = host.Close()
			return nodeExitFailed
		}
		defer stop()
		log.Info("serving the admin API", "admin", bound, "writes", cfg.admin.writes, "tls", cfg.tls != nil)
		fmt.Fprintf(stdout, "admin %s\n", bound)
	}
	addr := host.Addr()
	log.Info("serving", "address", addr)
	fmt.Fprintf(stdout, "ready %s %s\n", cfg.name, addr)
	select {
	case s := <-sig:
		stopping.Store(true) // /readyz answers 503 from now on
		log.Info("stopping: moving the objects to the other nodes", "signal", s.String())
		sctx, cancel := context.WithTimeout(ctx, cfg.stopTimeout)
		defer cancel()
		go func() {
			select {
			case s := <-sig:
				log.Warn("second signal: closing without finishing the graceful stop", "signal", s.String())
				cancel()
			case <-sctx.Done():
			}
		}()
		if err := host.Stop(sctx); err != nil {
			// Stop leaves the host running when its grace period ends:
			// closing it is the node's decision, and it drops what the
			// host still held.
			log.Error("graceful stop did not finish; closing the host", "err", err, "stop-timeout", cfg.stopTimeout)
			closeNodeHost(host, log, sig)
			return nodeExitFailed
		}
		log.Info("stopped")
		fmt.Fprintln(stdout, nodeStats(host))
		return nodeExitOK
	case <-host.Done():
		if host.Err() == nil && host.DrainState() == actor.Stopped {
			log.Info("drained (through the admin API) and stopped")
			fmt.Fprintln(stdout, nodeStats(host))
			return nodeExitOK
		}
		if errors.Is(host.Err(), actor.ErrLeaseLost) {
			log.Error("the node's lease ran out; exiting so that it can be started again", "err", host.Err())
			return nodeExitLeaseLost
		}
		log.Error("the host closed", "err", host.Err())
		return nodeExitFailed
	}
}

// closeBound bounds how long a node whose graceful stop did not finish
// waits for Host.Close: its transport's graceful close may wait for a
// peer that takes nothing (tcp.Options.CloseTimeout), and a handler that
// ignores its Context holds Close up.
const closeBound = 5 * time.Second

// closeNodeHost closes host, waiting at most closeBound (or until another
// signal), and logs how many accepted messages that dropped unrun.
func closeNodeHost(host *actor.Host, log *slog.Logger, sig <-chan os.Signal) {
	closed := make(chan struct{})
	go func() {
		_ = host.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(closeBound):
		log.Error("closing the host did not finish; exiting all the same", "waited", closeBound)
	case s := <-sig:
		log.Error("another signal while closing the host; exiting", "signal", s.String())
	}
	if n := host.Stats().DroppedOnClose; n > 0 {
		log.Error("closed: accepted messages were dropped unrun", "dropped", n)
	} else {
		log.Info("closed: no accepted message was dropped", "dropped", n)
	}
}

// nameRetry is how often a node whose name a previous run still holds
// asks the membership again.
const nameRetry = 250 * time.Millisecond

// startNodeHost makes and starts the node's host. While the membership
// says a previous run holds the name (membership.ErrNameTaken: it
// crashed, and its lease has not run out), it tries again, for at most
// cfg.nameWait; a name held past that belongs to a live node, left alone.
// A signal meanwhile ends the wait. It returns the started host, or nil
// and the exit code.
func startNodeHost(ctx context.Context, cfg nodeConfig, log *slog.Logger, store *pgstore.Store, members *pgstore.Membership,
	obs actor.Observer, sig <-chan os.Signal) (*actor.Host, int) {
	waitUntil := time.Now().Add(cfg.nameWait)
	for attempt := 1; ; attempt++ {
		host, err := actor.NewHost(actor.Config{
			Name:       cfg.name,
			Transport:  tcp.New(tcp.Options{Listen: cfg.listen, Advertise: cfg.advertise, TLS: cfg.tls, Insecure: cfg.tls == nil, Logger: log}),
			Store:      store,
			Membership: members,
			Logger:     log,
			Observer:   obs,
			LeaseTTL:   cfg.leaseTTL,
			LeaseRenew: cfg.leaseRenew,
		})
		if err != nil {
			log.Error("bad configuration", "err", err)
			return nil, nodeExitFailed
		}
		if err := host.Register(counter.Kind(), account.Kind()); err != nil {
			log.Error("cannot register the counter and account kinds", "err", err)
			return nil, nodeExitFailed
		}
		err = host.Start()
		if err == nil {
			if attempt > 1 {
				log.Info("the previous run's lease ran out; the name is this node's now", "waited", time.Since(waitUntil.Add(-cfg.nameWait)).Round(time.Millisecond))
			}
			return host, nodeExitOK
		}
		_ = host.Close()
		if !errors.Is(err, membership.ErrNameTaken) {
			log.Error("cannot start", "err", err)
			return nil, nodeExitFailed
		}
		if time.Now().After(waitUntil) {
			log.Error("the name is held by a live node, which this one leaves alone; exiting", "name", cfg.name, "waited", cfg.nameWait, "err", err)
			return nil, nodeExitFailed
		}
		if attempt == 1 {
			log.Warn("the name is held by a previous run that did not leave (it crashed?): waiting for its lease to run out",
				"name", cfg.name, "name-wait", cfg.nameWait)
		}
		select {
		case <-time.After(nameRetry):
		case s := <-sig:
			log.Info("signal while waiting for the name; exiting", "signal", s.String())
			return nil, nodeExitOK
		case <-ctx.Done():
			return nil, nodeExitFailed
		}
	}
}

// serveNodeAdmin serves the admin API (actor/admin) of host on
// cfg.admin.addr: over TLS with the node's certificate when it has one.
func serveNodeAdmin(cfg nodeConfig, log *slog.Logger, host *actor.Host, store *pgstore.Store, members *pgstore.Membership) (bound string, stop func(), err error) {
	h, err := admin.New(admin.Options{Host: host, Membership: members, Store: store, Token: cfg.admin.token, AllowWrites: cfg.admin.writes})
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", cfg.admin.addr)
	if err != nil {
		return "", nil, err
	}
	if cfg.tls != nil {
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cfg.tls.Certificate}, MinVersion: tls.VersionTLS13})
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	return ln.Addr().String(), func() {
		// Answers under way get out (the drain's among them: the node
		// exits as soon as the drain has stopped the host), for a while.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
		<-done
	}, nil
}

// adminToken reads the admin credential from file (trailing white space
// trimmed), else $BERTH_ADMIN_TOKEN; it must have at least 16 bytes.
func adminToken(file string, getenv func(string) string) (string, error) {
	tok := getenv("BERTH_ADMIN_TOKEN")
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("the admin token: %w", err)
		}
		tok = strings.TrimSpace(string(b))
	}
	if len(tok) < 16 {
		return "", errors.New("the admin API needs a credential of at least 16 bytes: -admin-token-file, or $BERTH_ADMIN_TOKEN")
	}
	return tok, nil
}

// serveNodeHTTP serves /metrics (m), /healthz (200 while the process
// runs), /readyz (200, or 503 and ready's error) and /dashboard/ (the
// handler dashboard holds, once the host has started) on addr; it returns
// the bound address and a function that ends the server.
func serveNodeHTTP(addr string, m http.Handler, dashboard *atomic.Pointer[http.Handler], ready func() error) (bound string, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /dashboard/", func(w http.ResponseWriter, r *http.Request) {
		d := dashboard.Load()
		if d == nil {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		(*d).ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // http.ErrServerClosed after stop
	}()
	return ln.Addr().String(), func() { _ = srv.Close(); <-done }, nil
}

// pgEnv are the libpq variables pgx reads a connection from when the URL
// is empty (with the password from PGPASSWORD or .pgpass).
var pgEnv = []string{"PGHOST", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE", "PGPASSFILE"}

// nodeDatabase returns the connection string a node opens: the -db flag,
// else $BERTH_DB, else "" when any of pgx's PG* variables is set (pgx
// then reads them, and the password from PGPASSWORD or .pgpass). It
// reports false when none names a database.
func nodeDatabase(flagDB string, getenv func(string) string) (string, bool) {
	if flagDB != "" {
		return flagDB, true
	}
	if db := getenv("BERTH_DB"); db != "" {
		return db, true
	}
	for _, v := range pgEnv {
		if getenv(v) != "" {
			return "", true
		}
	}
	return "", false
}
