package node

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// A node's transport runs TLS with all three -tls-* files (or a
// Config.TLS); plaintext with -insecure, or with no flag when it listens
// on loopback; and refuses to start on a partial set of files, on
// -insecure with TLS, and with no flag on any other address (an empty or
// unspecified host included).
func TestTransportSecurityFollowsTheFlags(t *testing.T) {
	const cert, key, ca = "n1.pem", "n1-key.pem", "ca.pem"
	for _, c := range []struct {
		listen, cert, key, ca string
		haveTLS, insecure     bool
		want                  security
		err                   string // a part of the error; "": none
	}{
		// No flag: loopback only.
		{listen: "127.0.0.1:0", want: securityLoopback},
		{listen: "127.1.2.3:7000", want: securityLoopback},
		{listen: "[::1]:7000", want: securityLoopback},
		{listen: "localhost:7000", want: securityLoopback},
		{listen: "LocalHost:7000", want: securityLoopback},
		{listen: ":7000", err: "not a loopback address"},
		{listen: "0.0.0.0:7000", err: "not a loopback address"},
		{listen: "[::]:7000", err: "not a loopback address"},
		{listen: "10.0.0.5:7000", err: "not a loopback address"},
		{listen: "node1.example:7000", err: "not a loopback address"},
		{listen: "localhost.example:7000", err: "not a loopback address"},
		{listen: "127.0.0.1", err: "not a loopback address"}, // no port: not an address
		// All three files, or a Config.TLS: TLS, wherever it listens.
		{listen: "10.0.0.5:7000", cert: cert, key: key, ca: ca, want: securityTLS},
		{listen: ":7000", cert: cert, key: key, ca: ca, want: securityTLS},
		{listen: "127.0.0.1:0", cert: cert, key: key, ca: ca, want: securityTLS},
		{listen: ":7000", haveTLS: true, want: securityTLS},
		// -insecure: plaintext, wherever it listens.
		{listen: ":7000", insecure: true, want: securityInsecure},
		{listen: "127.0.0.1:0", insecure: true, want: securityInsecure},
		// A partial set of files, on loopback or not.
		{listen: "10.0.0.5:7000", cert: cert, err: "given without -tls-key, -tls-ca"},
		{listen: "10.0.0.5:7000", cert: cert, key: key, err: "given without -tls-ca"},
		{listen: "127.0.0.1:0", ca: ca, err: "given without -tls-cert, -tls-key"},
		{listen: "127.0.0.1:0", key: key, ca: ca, err: "go together"},
		// -insecure with TLS, all files or some; files and a Config.TLS.
		{listen: "10.0.0.5:7000", cert: cert, key: key, ca: ca, insecure: true, err: "exclude each other"},
		{listen: "127.0.0.1:0", ca: ca, insecure: true, err: "exclude each other"},
		{listen: "127.0.0.1:0", haveTLS: true, insecure: true, err: "-insecure and Config.TLS exclude each other"},
		{listen: "127.0.0.1:0", cert: cert, haveTLS: true, err: "Config.TLS and -tls-cert exclude each other"},
	} {
		got, err := transportSecurity(c.listen, c.cert, c.key, c.ca, c.haveTLS, c.insecure)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("transportSecurity(%+v) = %v, %v; want %v", c, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("transportSecurity(%+v) = %v, %v; want an error with %q", c, got, err, c.err)
		}
	}
}

// command runs Command with args and the environment set to env's pairs
// (with no database variable but those given), and returns its exit code
// and output.
func command(t *testing.T, args []string, kv ...string) (code int, stdout, stderr string) {
	t.Helper()
	for _, v := range append([]string{"BERTH_DB", "BERTH_CONFIG", "BERTH_NAME", "BERTH_ADMIN_TOKEN"}, pgEnv...) {
		t.Setenv(v, "")
	}
	for i := 0; i+1 < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
	var out, errb bytes.Buffer
	code = Command(args, &out, &errb)
	return code, out.String(), errb.String()
}

// A node refuses, with exit 2 and before it opens anything, a
// configuration it cannot run safely, and says what to give instead: a
// transport unauthenticated off loopback or TLS flags that contradict
// each other; an admin API without a credential of 16 bytes, or plaintext
// off loopback; a lease its renewals cannot keep; no name or no database.
func TestANodeRefusesABadConfigurationBeforeItOpensAnything(t *testing.T) {
	db := "postgres://127.0.0.1:1/none"
	for _, c := range []struct {
		args []string
		kv   []string // variables
		want []string // parts of standard error
	}{
		{[]string{"-listen", "0.0.0.0:7000"}, nil, []string{"not a loopback address", "-tls-cert, -tls-key and -tls-ca", "-insecure"}},
		{[]string{"-listen", ":7000"}, nil, []string{"not a loopback address"}},
		{[]string{"-tls-cert", "n1.pem", "-tls-key", "n1-key.pem"}, nil, []string{"go together", "without -tls-ca"}},
		{[]string{"-insecure", "-tls-cert", "n1.pem", "-tls-key", "n1-key.pem", "-tls-ca", "ca.pem"}, nil, []string{"exclude each other"}},
		{[]string{"-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0"}, nil, []string{"at least 16 bytes"}},
		{[]string{"-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0"}, []string{"BERTH_ADMIN_TOKEN", "short"}, []string{"at least 16 bytes"}},
		{[]string{"-listen", "127.0.0.1:0", "-admin", "0.0.0.0:0"}, []string{"BERTH_ADMIN_TOKEN", "a-token-of-enough-bytes"}, []string{"not a loopback address"}},
		{[]string{"-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-admin-token-file", filepath.Join(t.TempDir(), "none")},
			[]string{"BERTH_ADMIN_TOKEN", "a-token-of-enough-bytes"}, []string{"the admin token"}},
		{[]string{"-lease-ttl", "2s", "-lease-renew", "1s"}, nil, []string{"-lease-renew", "-lease-ttl"}},
		{[]string{"-lease-ttl", "1s", "-lease-renew", "2s"}, nil, []string{"-lease-renew", "-lease-ttl"}},
		{[]string{"-lease-renew", "0s"}, nil, []string{"-lease-renew", "-lease-ttl"}},
		{[]string{"-lease-ttl", "-1s"}, nil, []string{"-lease-renew", "-lease-ttl"}},
		{[]string{"-log-format", "xml"}, nil, []string{"-log-format", "xml"}},
	} {
		code, stdout, stderr := command(t, append([]string{"-name", "n1"}, c.args...), append([]string{"BERTH_DB", db}, c.kv...)...)
		if code != ExitUsage {
			t.Errorf("berth node %v: exit %d, want %d; stderr %s", c.args, code, ExitUsage, stderr)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("berth node %v: stderr %q, want it to say %q", c.args, stderr, w)
			}
		}
		if stdout != "" {
			t.Errorf("berth node %v: stdout %q", c.args, stdout)
		}
	}
	if code, _, stderr := command(t, nil, "BERTH_DB", db); code != ExitUsage || !strings.Contains(stderr, "-name is required") {
		t.Errorf("no name: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := command(t, []string{"-name", "n1"}); code != ExitUsage || !strings.Contains(stderr, "a database is required") {
		t.Errorf("no database: exit %d, stderr %q", code, stderr)
	}
}

// A node that cannot reach its database exits 1 and logs why.
func TestANodeThatCannotOpenItsDatabaseExits1(t *testing.T) {
	code, stdout, stderr := command(t, []string{"-name", "n1", "-listen", "127.0.0.1:0"}, "BERTH_DB", "postgres://127.0.0.1:1/none?connect_timeout=5")
	if code != ExitFailed || !strings.Contains(stderr, "cannot open the") || !strings.Contains(stderr, "127.0.0.1:1") || stdout != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want %d and the log saying it cannot open the database at 127.0.0.1:1", code, stdout, stderr, ExitFailed)
	}
}
