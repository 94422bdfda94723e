package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// A node's transport runs TLS with all three -tls-* files; plaintext with
// -insecure, or with no flag when it listens on loopback; and refuses to
// start on a partial set of files, on -insecure with files, and with no
// flag on any other address (an empty or unspecified host included).
func TestTransportSecurityFollowsTheFlags(t *testing.T) {
	const cert, key, ca = "n1.pem", "n1-key.pem", "ca.pem"
	for _, c := range []struct {
		listen, cert, key, ca string
		insecure              bool
		want                  nodeSecurity
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
		// All three files: TLS, wherever it listens.
		{listen: "10.0.0.5:7000", cert: cert, key: key, ca: ca, want: securityTLS},
		{listen: ":7000", cert: cert, key: key, ca: ca, want: securityTLS},
		{listen: "127.0.0.1:0", cert: cert, key: key, ca: ca, want: securityTLS},
		// -insecure: plaintext, wherever it listens.
		{listen: ":7000", insecure: true, want: securityInsecure},
		{listen: "127.0.0.1:0", insecure: true, want: securityInsecure},
		// A partial set of files, on loopback or not.
		{listen: "10.0.0.5:7000", cert: cert, err: "given without -tls-key, -tls-ca"},
		{listen: "10.0.0.5:7000", cert: cert, key: key, err: "given without -tls-ca"},
		{listen: "127.0.0.1:0", ca: ca, err: "given without -tls-cert, -tls-key"},
		{listen: "127.0.0.1:0", key: key, ca: ca, err: "go together"},
		// -insecure with files, all or some.
		{listen: "10.0.0.5:7000", cert: cert, key: key, ca: ca, insecure: true, err: "exclude each other"},
		{listen: "127.0.0.1:0", ca: ca, insecure: true, err: "exclude each other"},
	} {
		got, err := transportSecurity(c.listen, c.cert, c.key, c.ca, c.insecure)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("transportSecurity(%q, %q, %q, %q, %v) = %v, %v; want %v", c.listen, c.cert, c.key, c.ca, c.insecure, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("transportSecurity(%q, %q, %q, %q, %v) = %v, %v; want an error with %q", c.listen, c.cert, c.key, c.ca, c.insecure, got, err, c.err)
		}
	}
}

// berth node exits 2, before it opens anything, on flags that leave its
// transport unauthenticated off loopback or that contradict each other,
// and says what to give instead.
func TestNodeRefusesInsecureOrContradictoryTransportFlags(t *testing.T) {
	base := []string{"-name", "n1", "-db", "postgres://127.0.0.1:1/none"}
	for _, c := range []struct {
		args []string
		want []string // parts of standard error
	}{
		{[]string{"-listen", "0.0.0.0:7000"}, []string{"not a loopback address", "-tls-cert, -tls-key and -tls-ca", "-insecure"}},
		{[]string{"-listen", ":7000"}, []string{"not a loopback address"}},
		{[]string{"-tls-cert", "n1.pem", "-tls-key", "n1-key.pem"}, []string{"go together", "without -tls-ca"}},
		{[]string{"-insecure", "-tls-cert", "n1.pem", "-tls-key", "n1-key.pem", "-tls-ca", "ca.pem"}, []string{"exclude each other"}},
	} {
		var stdout, stderr bytes.Buffer
		code := nodeMain(append(append([]string{}, base...), c.args...), &stdout, &stderr)
		if code != nodeExitUsage {
			t.Errorf("berth node %v: exit %d, want %d; stderr %s", c.args, code, nodeExitUsage, stderr.String())
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("berth node %v: stderr %q, want it to say %q", c.args, stderr.String(), w)
			}
		}
		if stdout.Len() > 0 {
			t.Errorf("berth node %v: stdout %q", c.args, stdout.String())
		}
	}
}

// berth node exits 2, before it opens anything, when its admin API would
// have no credential of 16 bytes, or would be plaintext off loopback.
func TestNodeRefusesAnAdminAPIWithoutACredentialOrPlaintextOffLoopback(t *testing.T) {
	base := []string{"-name", "n1", "-db", "postgres://127.0.0.1:1/none", "-listen", "127.0.0.1:0"}
	for _, c := range []struct {
		token string
		args  []string
		want  string
	}{
		{"", []string{"-admin", "127.0.0.1:0"}, "at least 16 bytes"},
		{"short", []string{"-admin", "127.0.0.1:0"}, "at least 16 bytes"},
		{"a-token-of-enough-bytes", []string{"-admin", "0.0.0.0:0"}, "not a loopback address"},
		{"a-token-of-enough-bytes", []string{"-admin", "127.0.0.1:0", "-admin-token-file", filepath.Join(t.TempDir(), "none")}, "the admin token"},
	} {
		t.Setenv("BERTH_ADMIN_TOKEN", c.token)
		var stdout, stderr bytes.Buffer
		if code := nodeMain(append(append([]string{}, base...), c.args...), &stdout, &stderr); code != nodeExitUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("berth node %v with token %q: exit %d, stderr %q; want %d saying %q", c.args, c.token, code, stderr.String(), nodeExitUsage, c.want)
		}
	}
}

// berth node exits 2, before it opens anything, on a lease its renewals
// cannot keep (-lease-renew at or over half of -lease-ttl, or not
// positive), naming both flags.
func TestNodeRefusesALeaseItsRenewalsCannotKeep(t *testing.T) {
	base := []string{"-name", "n1", "-db", "postgres://127.0.0.1:1/none"}
	for _, args := range [][]string{
		{"-lease-ttl", "2s", "-lease-renew", "1s"},
		{"-lease-ttl", "1s", "-lease-renew", "2s"},
		{"-lease-renew", "0s"},
		{"-lease-ttl", "-1s"},
	} {
		var stdout, stderr bytes.Buffer
		code := nodeMain(append(append([]string{}, base...), args...), &stdout, &stderr)
		if code != nodeExitUsage || !strings.Contains(stderr.String(), "-lease-renew") || !strings.Contains(stderr.String(), "-lease-ttl") {
			t.Errorf("berth node %v: exit %d, stderr %q; want %d naming -lease-renew and -lease-ttl", args, code, stderr.String(), nodeExitUsage)
		}
	}
}
