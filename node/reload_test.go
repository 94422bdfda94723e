package node

import (
	"crypto/tls"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/examples/counter"
	"github.com/berthrt/berth/internal/devca"
	"github.com/berthrt/berth/internal/pgtest"
	"github.com/berthrt/berth/internal/testutil"
)

// On SIGHUP a running node reads its TLS files again: new handshakes on
// its transport and its admin listener present the new certificate, and
// a certificate put on the deny list is refused; files that do not load
// (a certificate for another name) leave the ones in use.
func TestSIGHUPReloadsTheTLSFilesAndTheDenyList(t *testing.T) {
	db := pgtest.New(t)
	dir := t.TempDir()
	ca, err := devca.New("reload")
	if err != nil {
		t.Fatal(err)
	}
	if err := devca.WriteFiles(dir, ca, []string{"n1", "x"}); err != nil {
		t.Fatal(err)
	}
	deny := filepath.Join(dir, "deny")
	if err := os.WriteFile(deny, []byte("# none yet\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	xCert, err := tls.LoadX509KeyPair(filepath.Join(dir, "x.pem"), filepath.Join(dir, "x-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut testutil.Buffer
	args := []string{"-name", "n1", "-listen", "127.0.0.1:0", "-db", db.URL, "-admin", "127.0.0.1:0",
		"-tls-cert", filepath.Join(dir, "n1.pem"), "-tls-key", filepath.Join(dir, "n1-key.pem"), "-tls-ca", filepath.Join(dir, "ca.pem"),
		"-tls-deny", deny}
	cfg, err := Load(args, env(EnvAdminToken, "an-admin-token-of-enough-bytes"), &errOut)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Stdout, cfg.Stderr = &out, &errOut
	sig, hup := make(chan os.Signal, 1), make(chan os.Signal, 1)
	code := make(chan int, 1)
	go func() { code <- run(cfg, sig, hup, []actor.Registrable{counter.Kind()}) }()
	addr := func(prefix string) string {
		var a string
		testutil.WaitFor(t, "the node's "+prefix+" line", func() bool {
			for _, line := range strings.Split(out.String(), "\n") {
				if f := strings.Fields(line); len(f) >= 2 && f[0] == prefix {
					a = f[len(f)-1]
					return true
				}
			}
			return false
		})
		return a
	}
	listen, adminAddr := addr("ready"), addr("admin")
	// serial returns the serial of the certificate a handshake with addr
	// sees, as member x (the transport then refuses x, an unknown peer,
	// after the handshake: the certificate was seen).
	serial := func(addr string) (*big.Int, error) {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "n1", Certificates: []tls.Certificate{xCert}, MinVersion: tls.VersionTLS13})
		if err != nil {
			return nil, err
		}
		defer c.Close()
		// x's preamble to n1: the node closes the connection at once
		// (x is no member); a denied certificate is told as it reads.
		_, _ = c.Write([]byte("berth/tcp/2\n\x01x\x02n1"))
		var one [1]byte
		_, rerr := c.Read(one[:])
		if rerr != nil && strings.Contains(rerr.Error(), "certificate") {
			return nil, rerr
		}
		return c.ConnectionState().PeerCertificates[0].SerialNumber, nil
	}
	first, err := serial(listen)
	if err != nil {
		t.Fatal(err)
	}
	// A new certificate for n1, in place of the old files.
	certPEM, keyPEM, err := ca.Issue("n1")
	if err != nil {
		t.Fatal(err)
	}
	for f, b := range map[string][]byte{"n1.pem": certPEM, "n1-key.pem": keyPEM} {
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	hup <- syscall.SIGHUP
	testutil.WaitFor(t, "the reload's log line", func() bool { return strings.Contains(errOut.String(), "reloaded the TLS files") })
	for _, a := range []string{listen, adminAddr} {
		got, err := serial(a)
		if err != nil || got.Cmp(first) == 0 {
			t.Fatalf("%s after SIGHUP: serial %v, %v; want a new one (the old: %x)", a, got, err, first)
		}
	}
	// x on the deny list.
	if err := os.WriteFile(deny, []byte(xCert.Leaf.SerialNumber.Text(16)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hup <- syscall.SIGHUP
	testutil.WaitFor(t, "the second reload", func() bool { return strings.Count(errOut.String(), "reloaded the TLS files") == 2 })
	if _, err := serial(listen); err == nil {
		t.Fatal("x's certificate, on the deny list, was taken")
	}
	// Files that name another host: refused, the ones in use stay.
	other, otherKey, _ := ca.Issue("n2")
	_ = os.WriteFile(filepath.Join(dir, "n1.pem"), other, 0o600)
	_ = os.WriteFile(filepath.Join(dir, "n1-key.pem"), otherKey, 0o600)
	hup <- syscall.SIGHUP
	testutil.WaitFor(t, "the refused reload's log line", func() bool { return strings.Contains(errOut.String(), "cannot reload the TLS files") })
	sig <- syscall.SIGTERM
	if c := <-code; c != ExitOK {
		t.Fatalf("exit %d: %s", c, errOut.String())
	}
}
