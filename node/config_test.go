package node

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// env is a getenv of the pairs kv.
func env(kv ...string) func(string) string {
	return func(k string) string {
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == k {
				return kv[i+1]
			}
		}
		return ""
	}
}

// writeFile writes text to a new file in t's temporary directory.
func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A setting comes from its flag, else its variable, else the -config
// file, else its default: each source overrides the ones after it, setting
// by setting.
func TestASettingComesFromItsFlagThenItsVariableThenTheFileThenItsDefault(t *testing.T) {
	file := writeFile(t, "node.conf", `# a node's settings
name = from-file
lease-ttl = 9s
stop-timeout = 2m
listen = 127.0.0.1:7001

log-format = json
admin-write = true
`)
	getenv := env("BERTH_CONFIG", file, "BERTH_LEASE_TTL", "8s", "BERTH_NAME", "from-env", "BERTH_DB", "postgres://db/x")
	c, err := Load([]string{"-name", "from-flag"}, getenv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []struct {
		setting   string
		got, want any
	}{
		{"name (flag over variable and file)", c.Name, "from-flag"},
		{"lease-ttl (variable over file)", c.LeaseTTL, 8 * time.Second},
		{"stop-timeout (file over default)", c.StopTimeout, 2 * time.Minute},
		{"listen (file)", c.Listen, "127.0.0.1:7001"},
		{"log-format (file)", c.LogFormat, "json"},
		{"admin-write (file)", c.AdminWrite, true},
		{"db (variable)", c.Database, "postgres://db/x"},
		{"lease-renew (default)", c.LeaseRenew, Config{}.withDefaults().LeaseRenew},
	} {
		if g.got != g.want {
			t.Errorf("%s: %v, want %v", g.setting, g.got, g.want)
		}
	}
	// -config on the command line wins over $BERTH_CONFIG.
	other := writeFile(t, "other.conf", "name = other\n")
	c, err = Load([]string{"-config", other}, getenv, &bytes.Buffer{})
	if err != nil || c.Name != "from-env" || c.LeaseTTL != 8*time.Second {
		t.Errorf("with -config %s: %+v, %v; want the name from $BERTH_NAME and no line of $BERTH_CONFIG's file", other, c, err)
	}
	c, err = Load([]string{"-config", other}, env("BERTH_DB", "postgres://db/x"), &bytes.Buffer{})
	if err != nil || c.Name != "other" {
		t.Errorf("with -config %s alone: name %q, %v; want other", other, c.Name, err)
	}
}

// Every error of Load is ErrConfig and names the setting and where it came
// from: a flag, a variable, a line of the file.
func TestABadSettingIsAConfigErrorNamingItAndItsSource(t *testing.T) {
	db := "postgres://db/x"
	for _, c := range []struct {
		name   string
		args   []string
		getenv func(string) string
		file   string // the -config file's text; "": none
		want   []string
	}{
		{"bad flag", []string{"-name", "n", "-lease-ttl", "soon"}, env("BERTH_DB", db), "", []string{"lease-ttl", "soon"}},
		{"unknown flag", []string{"-name", "n", "-lease", "1s"}, env("BERTH_DB", db), "", []string{"-lease"}},
		{"argument", []string{"-name", "n", "extra"}, env("BERTH_DB", db), "", []string{`"extra"`}},
		{"bad variable", []string{"-name", "n"}, env("BERTH_DB", db, "BERTH_STOP_TIMEOUT", "1 minute"), "", []string{"$BERTH_STOP_TIMEOUT", "1 minute"}},
		{"bad level", []string{"-name", "n"}, env("BERTH_DB", db, "BERTH_LOG_LEVEL", "loud"), "", []string{"$BERTH_LOG_LEVEL", "loud"}},
		{"bad file value", []string{"-name", "n"}, env("BERTH_DB", db), "\n\nlease-renew = often\n", []string{":3:", "lease-renew", "often"}},
		{"unknown file setting", []string{"-name", "n"}, env("BERTH_DB", db), "# x\nleese-ttl = 1s\n", []string{":2:", `"leese-ttl"`}},
		{"config in the file", []string{"-name", "n"}, env("BERTH_DB", db), "config = other.conf\n", []string{":1:", `"config"`}},
		{"not name = value", []string{"-name", "n"}, env("BERTH_DB", db), "name n2\n", []string{":1:", "name = value"}},
		{"set twice in the file", []string{"-name", "n"}, env("BERTH_DB", db), "listen = :1\nlisten = :2\n", []string{":2:", "first on line 1"}},
		{"missing file", []string{"-name", "n", "-config", "/nonexistent/node.conf"}, env("BERTH_DB", db), "", []string{"-config", "/nonexistent/node.conf"}},
		{"no database", []string{"-name", "n"}, env("PGPASSWORD", "secret"), "", []string{"a database is required", "$BERTH_DB", "PGHOST"}},
		{"password on the command line", []string{"-name", "n", "-db", "postgres://u:secret@db/x"}, env(), "", []string{"-db holds a password", "$BERTH_DB"}},
		{"short token", []string{"-name", "n"}, env("BERTH_DB", db, "BERTH_ADMIN_TOKEN", "short"), "", []string{"at least 16 bytes"}},
		{"missing token file", []string{"-name", "n", "-admin-token-file", "/nonexistent/token"}, env("BERTH_DB", db), "", []string{"the admin token", "/nonexistent/token"}},
	} {
		args := c.args
		if c.file != "" {
			args = append(args, "-config", writeFile(t, "node.conf", c.file))
		}
		_, err := Load(args, c.getenv, &bytes.Buffer{})
		if !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Load(%q) = %v; want ErrConfig", c.name, args, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v; want it to say %s", c.name, err, w)
			}
		}
	}
	if _, err := Load([]string{"-h"}, env(), &bytes.Buffer{}); !errors.Is(err, flag.ErrHelp) || ExitCode(err) != ExitUsage {
		t.Errorf("Load(-h) = %v; want flag.ErrHelp, exit %d", err, ExitUsage)
	}
}

// A database URL with a password is taken from $BERTH_DB and the file,
// where ps does not show it; the admin credential from its file, else its
// variable; and a node's database may be left to pgx's PG* variables.
func TestSecretsComeFromTheEnvironmentAndFilesNeverTheCommandLine(t *testing.T) {
	withPassword := "postgres://u:secret@db/x"
	c, err := Load([]string{"-name", "n"}, env("BERTH_DB", withPassword), &bytes.Buffer{})
	if err != nil || c.Database != withPassword {
		t.Errorf("$BERTH_DB with a password: %q, %v", c.Database, err)
	}
	c, err = Load([]string{"-name", "n", "-config", writeFile(t, "node.conf", "db = "+withPassword+"\n")}, env(), &bytes.Buffer{})
	if err != nil || c.Database != withPassword {
		t.Errorf("a file's db with a password: %q, %v", c.Database, err)
	}
	c, err = Load([]string{"-name", "n"}, env("PGHOST", "/run/postgresql"), &bytes.Buffer{})
	if err != nil || c.Database != "" {
		t.Errorf("PGHOST alone: %q, %v; want the URL left to pgx", c.Database, err)
	}
	tokenFile := writeFile(t, "token", "a-credential-from-its-file\n")
	c, err = Load([]string{"-name", "n", "-admin-token-file", tokenFile}, env("BERTH_DB", "postgres://db/x", "BERTH_ADMIN_TOKEN", "a-credential-from-the-variable"), &bytes.Buffer{})
	if err != nil || c.AdminToken != "a-credential-from-its-file" {
		t.Errorf("-admin-token-file: %q, %v", c.AdminToken, err)
	}
	c, err = Load([]string{"-name", "n"}, env("BERTH_DB", "postgres://db/x", "BERTH_ADMIN_TOKEN", "a-credential-from-the-variable"), &bytes.Buffer{})
	if err != nil || c.AdminToken != "a-credential-from-the-variable" {
		t.Errorf("$BERTH_ADMIN_TOKEN: %q, %v", c.AdminToken, err)
	}
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	new(Config).Flags(fs)
	fs.VisitAll(func(f *flag.Flag) {
		if (strings.Contains(f.Name, "token") || strings.Contains(f.Name, "password")) && !strings.HasSuffix(f.Name, "-file") {
			t.Errorf("-%s: a credential is never a flag", f.Name)
		}
	})
}

// A program with flags of its own registers the node's beside them: its
// own are parsed from the command line only, the node's from all three
// sources.
func TestAProgramsOwnFlagsSitBesideTheNodes(t *testing.T) {
	fs := flag.NewFlagSet("shop", flag.ContinueOnError)
	var c Config
	c.Flags(fs)
	region := fs.String("region", "eu", "the program's own flag")
	err := LoadFrom(fs, &c, []string{"-lease-ttl", "7s"}, env("BERTH_NAME", "n7", "BERTH_DB", "postgres://db/x", "BERTH_REGION", "ap"))
	if err != nil || *region != "eu" || c.Name != "n7" || c.LeaseTTL != 7*time.Second {
		t.Fatalf("region %q, name %q, lease %v, %v; want eu (not $BERTH_REGION), n7 and 7s", *region, c.Name, c.LeaseTTL, err)
	}
	if err := LoadFrom(fs, &c, []string{"-region", "us"}, env("BERTH_DB", "postgres://db/x")); err != nil || *region != "us" {
		t.Fatalf("-region us: %q, %v", *region, err)
	}
}

// -http on loopback needs nothing more; on any other address (every
// interface included) it needs -http-public, from a flag or the file:
// New refuses the settings otherwise, with an ErrConfig naming it.
func TestHTTPOffLoopbackNeedsHTTPPublic(t *testing.T) {
	const tok = "an-admin-token-of-enough-bytes"
	for _, c := range []struct {
		args []string
		file string
		tok  bool
		ok   bool
		name string // the setting the refusal names
	}{
		{[]string{"-http", "127.0.0.1:9090"}, "", false, true, ""},
		{[]string{"-http", "localhost:9090"}, "", false, true, ""},
		{[]string{"-http", "[::1]:9090"}, "", false, true, ""},
		{[]string{"-http", ":9090"}, "", true, false, "-http-public"},
		{[]string{"-http", "0.0.0.0:9090"}, "", true, false, "-http-public"},
		{[]string{"-http", "10.0.0.7:9090"}, "", true, false, "-http-public"},
		{[]string{"-http", ":9090", "-http-public"}, "", true, true, ""},
		{nil, "http = :9090\nhttp-public = true\n", true, true, ""},
		{nil, "http = :9090\n", true, false, "-http-public"},
		// Off loopback, /metrics and /dashboard/ need the admin
		// credential, or -http-open.
		{[]string{"-http", ":9090", "-http-public"}, "", false, false, "-http-open"},
		{[]string{"-http", ":9090", "-http-public", "-http-open"}, "", false, true, ""},
	} {
		args := append([]string{"-name", "n"}, c.args...)
		if c.file != "" {
			args = append(args, "-config", writeFile(t, "node.conf", c.file))
		}
		vars := []string{"BERTH_DB", "postgres://db/x"}
		if c.tok {
			vars = append(vars, EnvAdminToken, tok)
		}
		cfg, err := Load(args, env(vars...), &bytes.Buffer{})
		if err == nil {
			_, err = cfg.check() // as New does
		}
		if c.ok && err != nil {
			t.Errorf("Load(%q, file %q) = %v; want it taken", c.args, c.file, err)
		}
		if !c.ok && (!errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.name)) {
			t.Errorf("Load(%q, file %q) = %v; want ErrConfig naming %s", c.args, c.file, err, c.name)
		}
	}
}

// A write credential needs -admin and -admin-write, and must differ from
// the admin credential; it comes from its file or its variable, never a
// flag.
func TestAWriteCredentialNeedsAdminWriteAndDiffersFromTheReadOne(t *testing.T) {
	const read, write = "an-admin-token-of-enough-bytes", "a-write-token-of-enough-bytes"
	for _, c := range []struct {
		args []string
		vars []string
		ok   bool
	}{
		{[]string{"-admin", "127.0.0.1:0", "-admin-write"}, []string{EnvAdminToken, read, EnvAdminWriteToken, write}, true},
		{[]string{"-admin", "127.0.0.1:0", "-admin-write", "-admin-write-token-file", writeFile(t, "w", write+"\n")}, []string{EnvAdminToken, read}, true},
		{[]string{"-admin", "127.0.0.1:0"}, []string{EnvAdminToken, read, EnvAdminWriteToken, write}, false},
		{[]string{"-admin", "127.0.0.1:0", "-admin-write"}, []string{EnvAdminToken, read, EnvAdminWriteToken, read}, false},
		{[]string{"-admin", "127.0.0.1:0", "-admin-write"}, []string{EnvAdminToken, read, EnvAdminWriteToken, "short"}, false},
	} {
		cfg, err := Load(append([]string{"-name", "n"}, c.args...), env(append(c.vars, "BERTH_DB", "postgres://db/x")...), &bytes.Buffer{})
		if err == nil {
			_, err = cfg.check()
		}
		if c.ok != (err == nil) {
			t.Errorf("Load(%q, %q) = %v; want ok %v", c.args, c.vars, err, c.ok)
		}
		if c.ok && cfg.AdminWriteToken != write {
			t.Errorf("Load(%q): the write credential %q", c.args, cfg.AdminWriteToken)
		}
		if !c.ok && !errors.Is(err, ErrConfig) {
			t.Errorf("Load(%q, %q) = %v; want ErrConfig", c.args, c.vars, err)
		}
	}
}
