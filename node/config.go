package node

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/berthrt/berth/internal/token"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport/tcp"
)

// ErrConfig is the kind of every error that a bad configuration gives:
// a flag, variable or file line that does not parse, a setting out of
// range, or settings that exclude each other. The message names the
// setting and where it came from. The node has not started.
var ErrConfig = errors.New("node: bad configuration")

// Config is a node's configuration. Its zero value is not usable: Name is
// required, and a database (Database, or pgx's PG* variables). Load makes
// one from flags, the environment and a file; a program may also fill one
// in itself. A zero duration means that setting's default.
type Config struct {
	// Name is the host's name, unique in the cluster (-name). A TLS
	// certificate must name it among its DNS names.
	Name string
	// Listen is the host:port the node listens on for its peers (-listen;
	// default tcp.DefaultListen; port 0: a free port).
	Listen string
	// Advertise is the address peers dial to reach the node (-advertise;
	// default: the address it listens on).
	Advertise string
	// Database is the Postgres URL of the cluster's Location Store and
	// membership (-db, $BERTH_DB). Empty: pgx reads libpq's PG*
	// variables and .pgpass. Load refuses a password in -db on the
	// command line, where any local user can read it.
	Database string

	// HTTP is the address of /metrics, /healthz, /readyz and /dashboard/
	// (-http; "": not served). On loopback they ask for no credential; a
	// non-loopback address needs HTTPPublic.
	HTTP string
	// HTTPPublic allows HTTP on an address other than loopback
	// (-http-public): for a Prometheus scraper or a Kubernetes probe that
	// reaches the node over the network. There /metrics and /dashboard/
	// need an admin credential (AdminToken or AdminWriteToken, as a
	// Bearer token or HTTP Basic's password) unless HTTPOpen; /healthz
	// and /readyz never do.
	HTTPPublic bool
	// HTTPOpen serves /metrics and /dashboard/ off loopback without a
	// credential (-http-open): for a network whose own controls keep
	// strangers out. The dashboard shows member addresses and object
	// names.
	HTTPOpen bool
	// Admin is the address of the admin API (-admin; "": not served).
	Admin string
	// AdminToken is the admin API's credential, at least 16 bytes; Load
	// reads it from -admin-token-file or $BERTH_ADMIN_TOKEN, never from
	// the command line. Required with Admin.
	AdminToken string
	// AdminWrite allows the admin API's routes that change the cluster:
	// move and drain (-admin-write).
	AdminWrite bool
	// AdminWriteToken, when set, is the credential those routes need
	// (at least 16 bytes, not AdminToken): AdminToken then only reads.
	// Load reads it from -admin-write-token-file or
	// $BERTH_ADMIN_WRITE_TOKEN, never from the command line. Needs
	// AdminWrite.
	AdminWriteToken string

	// TLSCert, TLSKey and TLSCA are PEM files: the node's certificate,
	// its key, and the CA its peers' certificates chain to (-tls-cert,
	// -tls-key, -tls-ca; all three or none).
	TLSCert, TLSKey, TLSCA string
	// TLSDeny is a file of certificate serial numbers the node refuses
	// whatever signed them (-tls-deny; tcp.LoadDenyList's format). The
	// node reads the three TLS files and this one again on SIGHUP
	// (Node.ReloadTLS).
	TLSDeny string
	// TLS, when set, is used instead of the three files.
	TLS *tcp.TLS
	// Insecure runs the transport without TLS: plaintext, and a peer is
	// whoever it says it is (-insecure). Without TLS and without
	// Insecure, Listen must be a loopback address.
	Insecure bool

	// StopTimeout bounds a graceful stop, the drain (-stop-timeout;
	// default one minute). Past it the node closes its host, dropping
	// what it still holds, and says how much.
	StopTimeout time.Duration
	// NameWait bounds how long the node waits for a previous run's lease
	// on its name to run out (that run crashed) before it gives up
	// (-name-wait; default LeaseTTL + 5 s).
	NameWait time.Duration
	// LeaseTTL is the host lease's length, in the Location Store and the
	// membership (-lease-ttl; default relocation.LeaseTTL).
	LeaseTTL time.Duration
	// LeaseRenew is how often the node renews its lease, under half of
	// LeaseTTL (-lease-renew; default relocation.LeaseRenew).
	LeaseRenew time.Duration

	// AppVersion is the application version the node runs (-app-version;
	// default: the main module's version in the binary's build
	// information, else its VCS revision, else none). While the nodes of
	// a cluster run several — a rolling upgrade — new objects are placed
	// and drains move objects onto the newest only, so that each object
	// moves once per rollout (actor.Config.AppVersion).
	AppVersion string

	// LogFormat is "text" (the default) or "json" (-log-format): the
	// format of the log the node writes on Stderr when Logger is nil.
	LogFormat string
	// LogLevel is the least level logged (-log-level; default info).
	// At debug the node logs detail per object.
	LogLevel slog.Level
	// Logger, when set, receives the node's log instead; LogFormat,
	// LogLevel and Stderr are then unused.
	Logger *slog.Logger

	// Stdout receives the node's lines for the program that started it,
	// one per event: "http <address>", "admin <address>", "ready <name>
	// <address>" and, after a graceful stop, "stats moves=<n>
	// pauses-us=<p1>,...". Nil: none.
	Stdout io.Writer
	// Stderr receives the log when Logger is nil. Nil: os.Stderr.
	Stderr io.Writer

	// configFile, tokenFile and writeTokenFile are where Load found the
	// -config file and the admin credentials' files.
	configFile, tokenFile, writeTokenFile string
}

// withDefaults returns c with each zero setting that has a default set to
// it.
func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = tcp.DefaultListen
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = time.Minute
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = relocation.LeaseTTL
	}
	if c.LeaseRenew == 0 {
		c.LeaseRenew = relocation.LeaseRenew
	}
	if c.NameWait == 0 {
		c.NameWait = c.LeaseTTL + 5*time.Second
	}
	if c.LogFormat == "" {
		c.LogFormat = "text"
	}
	if c.AppVersion == "" {
		c.AppVersion = buildVersion()
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	if c.Stdout == nil {
		c.Stdout = io.Discard
	}
	return c
}

// security is how a node's transport treats its connections.
type security int

const (
	securityTLS      security = iota // mutual TLS
	securityInsecure                 // plaintext, unauthenticated: Insecure
	securityLoopback                 // plaintext, unauthenticated: no TLS, listening on loopback
)

// check returns an ErrConfig error for the first setting of c (defaults
// applied) that is out of range or excluded by another, and how the
// transport is secured.
func (c Config) check() (security, error) {
	if c.Name == "" {
		return 0, configErr("-name is required: the host's name, unique in the cluster")
	}
	if c.LeaseTTL < 0 || c.LeaseRenew < 0 || c.LeaseRenew >= c.LeaseTTL/2 {
		return 0, configErr("-lease-renew %v must be positive and under half of -lease-ttl %v: a renewal may be slow or lost once and the lease still hold",
			c.LeaseRenew, c.LeaseTTL)
	}
	if c.StopTimeout < 0 || c.NameWait < 0 {
		return 0, configErr("-stop-timeout %v and -name-wait %v may not be negative", c.StopTimeout, c.NameWait)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return 0, configErr("-log-format %q: text or json", c.LogFormat)
	}
	sec, err := transportSecurity(c.Listen, c.TLSCert, c.TLSKey, c.TLSCA, c.TLS != nil, c.Insecure)
	if err != nil {
		return 0, err
	}
	if c.HTTP != "" && !c.HTTPPublic && !isLoopback(c.HTTP) {
		return 0, configErr("-http %q is not a loopback address: give -http-public to serve /metrics, /healthz, /readyz and /dashboard/ there (/metrics and /dashboard/ then need the admin credential, unless -http-open)", c.HTTP)
	}
	if c.HTTP != "" && !isLoopback(c.HTTP) && !c.HTTPOpen && c.AdminToken == "" && c.AdminWriteToken == "" {
		return 0, configErr("-http %q is not a loopback address: /metrics and /dashboard/ there need the admin credential (-admin-token-file or $BERTH_ADMIN_TOKEN), or -http-open to serve them to whoever reaches the address", c.HTTP)
	}
	if c.AdminWriteToken != "" {
		switch {
		case !c.AdminWrite || c.Admin == "":
			return 0, configErr("a write credential (-admin-write-token-file or $BERTH_ADMIN_WRITE_TOKEN) needs -admin and -admin-write")
		case len(c.AdminWriteToken) < token.MinLen:
			return 0, configErr("the write credential needs at least %d bytes", token.MinLen)
		case c.AdminWriteToken == c.AdminToken:
			return 0, configErr("the write credential must differ from the admin (read) credential")
		}
	}
	if c.Admin != "" {
		if len(c.AdminToken) < token.MinLen {
			return 0, configErr("-admin needs a credential of at least %d bytes: -admin-token-file, or $BERTH_ADMIN_TOKEN", token.MinLen)
		}
		if sec != securityTLS && !c.Insecure && !isLoopback(c.Admin) {
			return 0, configErr("-admin %q is not a loopback address and the node has no TLS: give the -tls-* flags, or -insecure", c.Admin)
		}
	}
	return sec, nil
}

func configErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
}

// transportSecurity decides how a node listening on listen secures its
// transport: TLS when the three files are given (or a tcp.TLS, haveTLS);
// insecure with insecure, or without either when listen's host is a
// loopback address. It returns an ErrConfig error for a partial set of
// files, for insecure with TLS, and for no TLS at all on any other
// address.
func transportSecurity(listen, certFile, keyFile, caFile string, haveTLS, insecure bool) (security, error) {
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
	case insecure && (len(given) > 0 || haveTLS):
		what := strings.Join(given, ", ")
		if haveTLS {
			what = "Config.TLS"
		}
		return 0, configErr("-insecure and %s exclude each other: give -tls-cert, -tls-key and -tls-ca for TLS, or -insecure alone to run without it", what)
	case insecure:
		return securityInsecure, nil
	case haveTLS && len(given) > 0:
		return 0, configErr("Config.TLS and %s exclude each other", strings.Join(given, ", "))
	case haveTLS || len(missing) == 0:
		return securityTLS, nil
	case len(given) > 0:
		return 0, configErr("-tls-cert, -tls-key and -tls-ca go together: %s given without %s",
			strings.Join(given, ", "), strings.Join(missing, ", "))
	case isLoopback(listen):
		return securityLoopback, nil
	default:
		return 0, configErr("-listen %q is not a loopback address, and without TLS anyone who reaches it can act as any host: "+
			"give -tls-cert, -tls-key and -tls-ca (berth certs makes a development CA), or -insecure to run unauthenticated", listen)
	}
}

// isLoopback reports whether the host of the host:port addr is a loopback
// address: an IP in 127.0.0.0/8 or ::1, or "localhost". An empty or
// unspecified host (":7000", "0.0.0.0:7000", "[::]:7000") listens on
// every interface, so it is not; nor is anything that does not parse.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// buildVersion is the version of the running binary's main module when
// it is a release (go install module@version), else the commit time and
// revision of its VCS checkout ("2026-12-07T11:04:05Z+0123456789ab":
// builds order by the time of their commit), else "" (not stated).
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, at string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		}
	}
	if at == "" {
		return ""
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	return at + "+" + rev
}

// Flags registers the node's settings on fs, each writing its field of c.
// Their defaults are c's values. Load uses it; a program with flags of its
// own may call it on its own FlagSet and then LoadFrom.
func (c *Config) Flags(fs *flag.FlagSet) {
	d := c.withDefaults()
	fs.StringVar(&c.Name, "name", c.Name, "the host's name, unique in the cluster (required)")
	fs.StringVar(&c.Listen, "listen", d.Listen, "host:port the node listens on for its peers' TCP connections (port 0: a free port)")
	fs.StringVar(&c.Advertise, "advertise", c.Advertise, "the address peers dial to reach this node (default: the address it listens on)")
	fs.StringVar(&c.Database, "db", c.Database, "Postgres `URL` of the cluster's Location Store and membership (default: pgx's PG* variables and .pgpass); "+
		"a password in it is refused on the command line, where ps shows it: give it in $BERTH_DB or the -config file")
	fs.StringVar(&c.HTTP, "http", c.HTTP, "serve /metrics, /healthz, /readyz and /dashboard/ on this address (e.g. :9090)")
	fs.StringVar(&c.HTTP, "metrics", c.HTTP, "the same as -http")
	fs.BoolVar(&c.HTTPPublic, "http-public", c.HTTPPublic, "allow -http on an address other than loopback; there /metrics and /dashboard/ need the admin credential (Bearer, or HTTP Basic's password), unless -http-open")
	fs.BoolVar(&c.HTTPOpen, "http-open", c.HTTPOpen, "serve /metrics and /dashboard/ off loopback without a credential (the dashboard shows member addresses and object names): only behind your network's controls")
	fs.StringVar(&c.Admin, "admin", c.Admin, "serve the admin API (berth admin) on this address: HTTPS with the node's certificate, or plain HTTP on loopback or with -insecure")
	fs.BoolVar(&c.AdminWrite, "admin-write", c.AdminWrite, "allow the admin API's routes that change the cluster (move, drain)")
	fs.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, "PEM `file` of the node's certificate, which names it (an identity URI urn:berth:node:NAME, as berth certs makes, or -name among its DNS names); with -tls-key and -tls-ca; read again on SIGHUP")
	fs.StringVar(&c.TLSDeny, "tls-deny", c.TLSDeny, "`file` of certificate serial numbers (hexadecimal, one per line) refused whatever signed them; read again on SIGHUP, when links on a newly denied certificate close")
	fs.StringVar(&c.TLSKey, "tls-key", c.TLSKey, "PEM `file` of the certificate's private key")
	fs.StringVar(&c.TLSCA, "tls-ca", c.TLSCA, "PEM `file` of the CA certificates the peers' certificates must chain to")
	fs.BoolVar(&c.Insecure, "insecure", c.Insecure, "run without TLS: plaintext, and a peer is whoever it says it is; needed without the -tls-* flags unless -listen is a loopback address")
	fs.DurationVar(&c.StopTimeout, "stop-timeout", d.StopTimeout, "how long a graceful stop (drain) may take on SIGTERM; past it, or on a second SIGTERM, the node closes the host, dropping what it still holds")
	fs.DurationVar(&c.NameWait, "name-wait", c.NameWait, "how long to wait for a previous run's lease on the name to run out (it crashed) before giving up (default: -lease-ttl + 5s)")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", d.LeaseTTL, "the host lease's length, in the Location Store and the membership: a crashed node's objects are taken over about this long after its last renewal; "+
		"a node whose renewals go unanswered this long pauses its objects (jeopardy) until the database answers — it does not exit")
	fs.DurationVar(&c.LeaseRenew, "lease-renew", d.LeaseRenew, "how often the node renews its lease; under half of -lease-ttl")
	fs.StringVar(&c.AppVersion, "app-version", d.AppVersion, "the application version this node runs: while nodes run several (a rolling upgrade), new objects and drains go to the newest only, so each object moves once (default: from the binary's build information)")
	fs.StringVar(&c.LogFormat, "log-format", d.LogFormat, "the log's format on standard error: text or json")
	fs.TextVar(&c.LogLevel, "log-level", c.LogLevel, "the least level logged: debug, info, warn or error (debug adds detail per object)")
	fs.StringVar(&c.configFile, "config", "", "`file` of settings, one \"name = value\" per line (default $BERTH_CONFIG); flags and variables override it")
	fs.StringVar(&c.tokenFile, "admin-token-file", "", "`file` holding the admin credential (at least 16 bytes; default $BERTH_ADMIN_TOKEN)")
	fs.StringVar(&c.writeTokenFile, "admin-write-token-file", "", "`file` holding the admin API's write credential: with it, the routes that change the cluster need it, and the admin credential only reads (default $BERTH_ADMIN_WRITE_TOKEN)")
}

// The settings Load reads outside the flags: the file of -config, and the
// credentials, which are never flags.
const (
	// EnvPrefix prefixes the environment variable of each flag: -lease-ttl
	// is $BERTH_LEASE_TTL.
	EnvPrefix = "BERTH_"
	// EnvAdminToken holds the admin credential itself (-admin-token-file
	// names a file holding it instead).
	EnvAdminToken = "BERTH_ADMIN_TOKEN"
	// EnvAdminWriteToken holds the admin API's write credential itself
	// (-admin-write-token-file names a file holding it instead).
	EnvAdminWriteToken = "BERTH_ADMIN_WRITE_TOKEN"
)

// Load makes a Config from the command-line arguments args (without the
// program's name), the environment (getenv; nil: os.Getenv) and the file
// that -config or $BERTH_CONFIG names. A setting comes from the first of:
//
//  1. its flag in args (-lease-ttl 5s);
//  2. its environment variable: EnvPrefix and the flag's name in upper
//     case, dashes as underscores ($BERTH_LEASE_TTL=5s);
//  3. its line in the file (lease-ttl = 5s);
//  4. its default.
//
// The file has one setting per line, "name = value" (the flag's name;
// blank lines and lines starting with # are skipped). The admin
// credential is read from -admin-token-file (a file holding it, trailing
// white space trimmed), else $BERTH_ADMIN_TOKEN: never from a flag.
//
// Every error is ErrConfig, naming the setting and where it came from,
// except flag.ErrHelp for -h. Its usage text has gone to output.
func Load(args []string, getenv func(string) string, output io.Writer) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	fs.SetOutput(output)
	c.Flags(fs)
	return c, LoadFrom(fs, &c, args, getenv)
}

// LoadFrom is Load on a FlagSet on which c.Flags registered the node's
// settings, beside the program's own flags, which it parses too (flags
// only: they have no variables or file lines).
func LoadFrom(fs *flag.FlagSet, c *Config, args []string, getenv func(string) string) error {
	if getenv == nil {
		getenv = os.Getenv
	}
	own := settings()
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if fs.NArg() > 0 {
		return configErr("unexpected argument %q: every setting is a flag", fs.Arg(0))
	}
	set := map[string]string{} // flag name: where its value came from
	fs.Visit(func(f *flag.Flag) { set[f.Name] = "flag" })
	if u, err := url.Parse(c.Database); set["db"] != "" && err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			return configErr("-db holds a password, which any local user can read on the command line: give the URL in $BERTH_DB or the -config file, or the password in $PGPASSWORD or .pgpass")
		}
	}
	if set["config"] == "" {
		c.configFile = getenv(EnvVar("config"))
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || !own[f.Name] || set[f.Name] != "" {
			return
		}
		if v := getenv(EnvVar(f.Name)); v != "" {
			if e := fs.Set(f.Name, v); e != nil {
				err = configErr("$%s=%q: %v", EnvVar(f.Name), v, e)
			}
			set[f.Name] = "$" + EnvVar(f.Name)
		}
	})
	if err != nil {
		return err
	}
	if c.configFile != "" {
		if err := loadFile(fs, own, set, c.configFile); err != nil {
			return err
		}
	}
	tok, err := token.Read(c.tokenFile, getenv)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	c.AdminToken = tok
	wtok, err := token.ReadFrom(c.writeTokenFile, EnvAdminWriteToken, getenv)
	if err != nil {
		return fmt.Errorf("%w: the write credential: %v", ErrConfig, err)
	}
	c.AdminWriteToken = wtok
	// The flags' defaults are the settings' defaults: a zero here was
	// given, and means none, not the default.
	if c.LeaseTTL <= 0 || c.LeaseRenew <= 0 || c.StopTimeout <= 0 {
		return configErr("-lease-ttl %v, -lease-renew %v and -stop-timeout %v must be positive", c.LeaseTTL, c.LeaseRenew, c.StopTimeout)
	}
	if c.Database == "" && !slices.ContainsFunc(pgEnv, func(v string) bool { return getenv(v) != "" }) {
		return configErr("a database is required: -db URL, $BERTH_DB, the -config file, or pgx's PG* variables such as PGHOST")
	}
	return nil
}

// pgEnv are the libpq variables pgx reads a connection from when the URL
// is empty (with the password from PGPASSWORD or .pgpass).
var pgEnv = []string{"PGHOST", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE", "PGPASSFILE"}

// EnvVar is the environment variable of the flag name: EnvPrefix and the
// name in upper case, dashes as underscores. A variable set to "" counts
// as unset.
func EnvVar(name string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// settings are the names of the node's flags that a variable or a line of
// the -config file may set too: those of Config.Flags but the alias
// -metrics, and -config itself (its variable is read first).
func settings() map[string]bool {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	new(Config).Flags(fs)
	own := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { own[f.Name] = f.Name != "metrics" && f.Name != "config" })
	return own
}

// loadFile sets, from the file at path, each of the node's flags (own) not
// set already (set).
func loadFile(fs *flag.FlagSet, own map[string]bool, set map[string]string, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return configErr("-config: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	seen := map[string]int{}
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		name, value, ok := strings.Cut(text, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || name == "" {
			return configErr("%s:%d: want \"name = value\", got %q", path, line, text)
		}
		if !own[name] {
			return configErr("%s:%d: no setting %q (the settings are the flags of berth node -h)", path, line, name)
		}
		if prev, dup := seen[name]; dup {
			return configErr("%s:%d: %q is set again (first on line %d)", path, line, name, prev)
		}
		seen[name] = line
		if set[name] != "" {
			continue // a flag or a variable overrides the file
		}
		if err := fs.Set(name, value); err != nil {
			return configErr("%s:%d: %s = %q: %v", path, line, name, value, err)
		}
	}
	if err := sc.Err(); err != nil {
		return configErr("-config %s: %v", path, err)
	}
	return nil
}
