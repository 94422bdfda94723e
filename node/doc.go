// Package node runs a berth host as a server process with the program's
// own kinds: what `berth node` does, as a library. A program's whole main
// can be
//
//	func main() { node.Main(cart.Kind(), inventory.Kind()) }
//
// and `berth node` is this package hosting the example kinds counter and
// account.
//
// A node joins the cluster whose Location Store and membership live in a
// Postgres database (package pgstore, with the pools of pgstore.OpenPools:
// the renewals on a pool of their own), reaches its peers over
// transport/tcp (each peer's address comes from the membership), and
// hosts the kinds it was given. Every node of a cluster may host other
// kinds: an object activates only on a host of its kind.
//
// # Settings
//
// Config holds the settings; Load reads them from flags, the environment
// and a file, in that order of precedence (see Load). Each flag -x-y has
// the variable $BERTH_X_Y and the file line "x-y = value". Credentials
// are never flags: a database URL with a password on the command line is
// refused (any local user can read a process's arguments); the admin
// credential comes from -admin-token-file or $BERTH_ADMIN_TOKEN.
//
// Its connections to its peers are mutually authenticated TLS 1.3 with
// -tls-cert, -tls-key and -tls-ca (PEM files, all three or none; the
// certificate must name the node: -name among its DNS names; berth certs
// makes a development CA). Without them it runs plaintext and
// unauthenticated — anyone who reaches its port can act as any host — and
// so only with -insecure, or when -listen is a loopback address
// (127.0.0.0/8, ::1, localhost; it logs that it does).
//
// # What it serves
//
// With -http it serves /metrics (Prometheus), /healthz (200 while the
// process runs), /readyz (200 while the node serves: joined, its lease
// live, not draining or stopping; 503 with the reason otherwise) and
// /dashboard/ (a live page of the cluster; package actor/admin). With
// -admin it serves the admin API (package actor/admin; berth admin speaks
// it): HTTPS with the node's certificate, or plain HTTP on loopback or
// with -insecure; every request needs the credential, and move and drain
// need -admin-write.
//
// On Config.Stdout (standard output for Main) a node writes one line per
// event, for the program or the person that started it:
//
//	http <address>                  its HTTP server listens
//	admin <address>                 its admin API listens
//	ready <name> <address>          it serves
//	stats moves=<n> pauses-us=...   it stopped gracefully: the moves it was the source of and their pauses
//
// Its log (log/slog, text or JSON) goes to standard error.
//
// # Life
//
// A name whose previous run still holds it in the membership (that run
// crashed, and its lease has not run out yet) is waited for, for at most
// -name-wait; a name still held then belongs to a live node, which the
// new one leaves alone (ErrNameHeld).
//
// A stall is not a death: a node whose database is slow or out of reach,
// or whose process is starved or paused, pauses its objects while its
// lease is in doubt (jeopardy) and resumes when the database answers. A
// stall past its lease ends its run in the membership: its objects may run
// elsewhere by then, so the node drops them and joins again as a new run.
// Only another run of its name holding the lease makes it close and exit 3
// (ExitLeaseLost).
//
// On SIGTERM or SIGINT (Main, Command) or when Run's Context ends, the
// node stops being ready at once, then stops gracefully: its objects move
// to the other nodes, it leaves, and it exits 0. Past -stop-timeout, or on
// a second signal, it closes the host, logs how many accepted messages
// that dropped unrun, and exits 1. A drain through the admin API ends the
// same way as a signal's. On SIGHUP the node reads its TLS files
// (-tls-cert, -tls-key, -tls-ca, -tls-deny) again: new handshakes use the
// new ones, links on a newly denied certificate close (Node.ReloadTLS).
//
// Exit codes: 0 stopped gracefully; 1 could not start (a name held by a
// live node, a database out of reach, bad files) or closed without
// finishing its stop; 2 a bad configuration; 3 its lease ran out.
//
// Invariants: a node never exits on a stall, only on a signal, a drain, or
// the membership's fact that its run ended; a Node closes what it opened
// exactly once, the admin API first (a drain's answer gets out) and its
// HTTP server last (/healthz answers while the rest closes); a bad
// configuration is refused with ErrConfig before anything is opened.
package node
