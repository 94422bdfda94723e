package tcp_test

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berthrt/berth/internal/devca"
	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/transport"
	"github.com/berthrt/berth/transport/tcp"
)

// twoWithCerts starts a and b on certificates of the tests' CA, each a
// peer of the other, and returns them with their certificates.
func twoWithCerts(t *testing.T) (a, b *tcp.Transport, sa, sb *sink, ca, cb tls.Certificate) {
	t.Helper()
	t.Cleanup(func() { testutil.CheckNoGoroutines(t) })
	var err error
	if ca, err = testCA().IssueTLS("a"); err != nil {
		t.Fatal(err)
	}
	if cb, err = testCA().IssueTLS("b"); err != nil {
		t.Fatal(err)
	}
	sa, sb = newSink(), newSink()
	start := func(name string, cert tls.Certificate, s *sink) *tcp.Transport {
		opts := testOptions()
		opts.TLS = &tcp.TLS{Certificate: cert, CA: testCA().Pool()}
		tr, err := tcp.Listen(name, s, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close(true) })
		return tr
	}
	a, b = start("a", ca, sa), start("b", cb, sb)
	if err := a.AddPeer("b", b.Addr()); err != nil {
		t.Fatal(err)
	}
	if err := b.AddPeer("a", a.Addr()); err != nil {
		t.Fatal(err)
	}
	return a, b, sa, sb, ca, cb
}

// A certificate put on a host's deny list (SetTLS) is refused from then
// on, whatever signed it: the links on it close at once (counted), its
// holder's handshakes are refused, and the link comes back, carrying
// items, once the list no longer names it.
func TestACertificateOnTheDenyListIsRefusedAndItsLinksClosed(t *testing.T) {
	a, b, sa, sb, ca, cb := twoWithCerts(t)
	checkExchange(t, a, b, sa, sb, "before", 5)
	refused := a.Stats().Refused
	serial := cb.Leaf.SerialNumber.Text(16)
	if err := a.SetTLS(&tcp.TLS{Certificate: ca, CA: testCA().Pool(), Deny: []string{strings.ToUpper(serial)}}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "b's links closed and its handshakes refused", func() bool { return a.Stats().Refused >= refused+2 })
	if c, err := dialRaw(t, a, testCA(), &cb, "b"); err == nil {
		_ = c.Close()
		t.Fatal("a handshake on the denied certificate was accepted")
	}
	if err := a.SetTLS(&tcp.TLS{Certificate: ca, CA: testCA().Pool()}); err != nil {
		t.Fatal(err)
	}
	checkExchange(t, a, b, sa, sb, "after", 5)
}

// SetTLS's certificate is what new handshakes present, while the links
// made before go on; a certificate that does not name the host, or names
// it in another role, is refused, changing nothing.
func TestANewCertificateIsPresentedAfterSetTLS(t *testing.T) {
	a, b, sa, sb, ca, cb := twoWithCerts(t)
	checkExchange(t, a, b, sa, sb, "before", 3)
	fresh, err := testCA().IssueTLS("a")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := testCA().IssueTLS("z")
	gw, _ := testCA().IssueTLSAs(transport.RoleGateway, "a")
	for name, c := range map[string]tls.Certificate{"another host's": other, "a gateway's": gw} {
		if err := a.SetTLS(&tcp.TLS{Certificate: c, CA: testCA().Pool()}); !errors.Is(err, payload.InvalidOperation) {
			t.Fatalf("SetTLS with %s certificate: %v, want InvalidOperation", name, err)
		}
	}
	if err := a.SetTLS(&tcp.TLS{Certificate: fresh, CA: testCA().Pool()}); err != nil {
		t.Fatal(err)
	}
	c, err := dialRaw(t, a, testCA(), &cb, "b")
	if err != nil {
		t.Fatal(err)
	}
	got := c.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber
	_ = c.Close()
	if got.Cmp(fresh.Leaf.SerialNumber) != 0 || got.Cmp(ca.Leaf.SerialNumber) == 0 {
		t.Fatalf("a handshake after SetTLS saw serial %x, want the new %x", got, fresh.Leaf.SerialNumber)
	}
	checkExchange(t, a, b, sa, sb, "after", 3)
}

// A deny list file holds one serial number per line, colons allowed,
// with blank and # lines skipped; a line that is no hexadecimal number is
// an error naming the file and line.
func TestADenyListFileIsReadOneSerialPerLine(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "deny")
	if err := os.WriteFile(good, []byte("# leaked\n0A:1B:2c\n\n00ff\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := tcp.LoadDenyList(good)
	if err != nil || len(got) != 2 || got[0] != "a1b2c" || got[1] != "ff" {
		t.Fatalf("LoadDenyList: %q, %v", got, err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("ff\nnot-hex\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := tcp.LoadDenyList(bad); !errors.Is(err, payload.InvalidOperation) || !strings.Contains(err.Error(), bad+":2") {
		t.Fatalf("LoadDenyList of a bad line: %v", err)
	}
}

// ExampleTransport_SetTLS: a host takes a new certificate and a deny list
// while it runs — a leaked key's certificate, by its serial number.
func ExampleTransport_SetTLS() {
	ca, _ := devca.New("example CA")
	cert, _ := ca.IssueTLS("a")
	a, err := tcp.Listen("a", newSink(), tcp.Options{TLS: &tcp.TLS{Certificate: cert, CA: ca.Pool()}})
	if err != nil {
		panic(err)
	}
	defer a.Close(true)
	leaked, _ := ca.IssueTLS("b")
	fresh, _ := ca.IssueTLS("a")
	err = a.SetTLS(&tcp.TLS{Certificate: fresh, CA: ca.Pool(), Deny: []string{leaked.Leaf.SerialNumber.Text(16)}})
	fmt.Println(err)
	// Output: <nil>
}
