package devca_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/devca"
)

func newCA(t *testing.T) *devca.CA {
	t.Helper()
	ca, err := devca.New("test CA")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func parseCert(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		t.Fatalf("not a CERTIFICATE PEM block: %q", certPEM)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// verify checks cert against pool for usage (and, for server auth, the
// server name).
func verify(cert *x509.Certificate, pool *x509.CertPool, usage x509.ExtKeyUsage, serverName string) error {
	_, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}, DNSName: serverName})
	return err
}

func TestNewMakesASelfSignedCA(t *testing.T) {
	before := time.Now()
	ca := newCA(t)
	c := parseCert(t, ca.CertPEM())
	if !c.IsCA || !c.BasicConstraintsValid || c.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("IsCA %v, BasicConstraintsValid %v, KeyUsage %b: want a CA that signs certificates", c.IsCA, c.BasicConstraintsValid, c.KeyUsage)
	}
	if c.Subject.CommonName != "test CA" {
		t.Errorf("CN %q", c.Subject.CommonName)
	}
	if err := c.CheckSignatureFrom(c); err != nil {
		t.Errorf("not self-signed: %v", err)
	}
	if c.SerialNumber.Sign() <= 0 || c.SerialNumber.BitLen() > 128 {
		t.Errorf("serial %v: want a positive 128-bit number", c.SerialNumber)
	}
	if pub, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Errorf("public key %T: want ECDSA P-256", c.PublicKey)
	}
	wantFrom, wantTo := before.Add(-time.Hour), before.Add(10*365*24*time.Hour)
	if d := c.NotBefore.Sub(wantFrom).Abs(); d > time.Minute {
		t.Errorf("NotBefore %v, want about %v", c.NotBefore, wantFrom)
	}
	if d := c.NotAfter.Sub(wantTo).Abs(); d > time.Minute {
		t.Errorf("NotAfter %v, want about %v", c.NotAfter, wantTo)
	}
	if b, _ := pem.Decode(ca.KeyPEM()); b == nil || b.Type != "EC PRIVATE KEY" {
		t.Errorf("KeyPEM is not an EC PRIVATE KEY block")
	}
	if _, err := devca.New(""); err == nil {
		t.Error("New(\"\"): no error")
	}
}

func TestAnIssuedCertificateVerifiesForClientAndServerAuth(t *testing.T) {
	ca := newCA(t)
	before := time.Now()
	certPEM, keyPEM, err := ca.Issue("n1", "localhost", "127.0.0.1", "::1", "N1")
	if err != nil {
		t.Fatal(err)
	}
	c := parseCert(t, certPEM)
	if c.Subject.CommonName != "n1" {
		t.Errorf("CN %q, want n1", c.Subject.CommonName)
	}
	if want := []string{"n1", "localhost"}; !slices.Equal(c.DNSNames, want) {
		t.Errorf("DNSNames %q, want %q (the name first, the DNS hosts, no duplicate)", c.DNSNames, want)
	}
	if len(c.IPAddresses) != 2 || !c.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) || !c.IPAddresses[1].Equal(net.IPv6loopback) {
		t.Errorf("IPAddresses %v, want [127.0.0.1 ::1]", c.IPAddresses)
	}
	if len(c.URIs) != 1 || c.URIs[0].String() != "urn:berth:node:n1" || len(c.EmailAddresses) != 0 {
		t.Errorf("URIs %v, emails %v: want the one identity URI urn:berth:node:n1 and no email", c.URIs, c.EmailAddresses)
	}
	if c.IsCA || c.KeyUsage != x509.KeyUsageDigitalSignature {
		t.Errorf("IsCA %v, KeyUsage %b: want a leaf for digital signatures", c.IsCA, c.KeyUsage)
	}
	if !slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}) {
		t.Errorf("ExtKeyUsage %v", c.ExtKeyUsage)
	}
	if d := c.NotBefore.Sub(before.Add(-time.Hour)).Abs(); d > time.Minute {
		t.Errorf("NotBefore %v, want about an hour ago", c.NotBefore)
	}
	if d := c.NotAfter.Sub(before.Add(365 * 24 * time.Hour)).Abs(); d > time.Minute {
		t.Errorf("NotAfter %v, want about a year from now", c.NotAfter)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Errorf("the key is not the certificate's: %v", err)
	}

	pool := ca.Pool()
	if err := verify(c, pool, x509.ExtKeyUsageClientAuth, ""); err != nil {
		t.Errorf("client auth: %v", err)
	}
	for _, server := range []string{"n1", "localhost", "127.0.0.1", "::1"} {
		if err := verify(c, pool, x509.ExtKeyUsageServerAuth, server); err != nil {
			t.Errorf("server auth as %s: %v", server, err)
		}
	}
	if err := verify(c, pool, x509.ExtKeyUsageServerAuth, "n2"); err == nil {
		t.Error("server auth as n2: verified")
	}
	other := parseCert(t, must2(t)(ca.Issue("n2")))
	if c.SerialNumber.Cmp(other.SerialNumber) == 0 {
		t.Errorf("two certificates with serial %v", c.SerialNumber)
	}
}

// must2 returns the first of two results, failing t on an error.
func must2(t *testing.T) func(a, _ []byte, err error) []byte {
	return func(a, _ []byte, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
}

func TestACertificateFromAnotherCADoesNotVerify(t *testing.T) {
	ca, other := newCA(t), newCA(t) // same name, different keys
	c := parseCert(t, must2(t)(other.Issue("n1")))
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth} {
		err := verify(c, ca.Pool(), usage, "")
		if !errors.As(err, new(x509.UnknownAuthorityError)) {
			t.Errorf("usage %v: err %v, want an x509.UnknownAuthorityError", usage, err)
		}
	}
}

func TestLoadRoundTrips(t *testing.T) {
	ca := newCA(t)
	loaded, err := devca.Load(ca.CertPEM(), ca.KeyPEM())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(loaded.CertPEM(), ca.CertPEM()) || !bytes.Equal(loaded.KeyPEM(), ca.KeyPEM()) {
		t.Error("CertPEM or KeyPEM changed through Load")
	}
	c := parseCert(t, must2(t)(loaded.Issue("n4")))
	if err := verify(c, ca.Pool(), x509.ExtKeyUsageClientAuth, ""); err != nil {
		t.Errorf("a certificate the loaded CA issued does not verify against the original's pool: %v", err)
	}

	// PKCS#8, after an EC PARAMETERS block (as openssl ecparam -genkey
	// writes it).
	b, _ := pem.Decode(ca.KeyPEM())
	key, err := x509.ParseECPrivateKey(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	p8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := append(pem.EncodeToMemory(&pem.Block{Type: "EC PARAMETERS", Bytes: []byte{6, 8, 42, 134, 72, 206, 61, 3, 1, 7}}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8})...)
	if loaded, err := devca.Load(ca.CertPEM(), keyPEM); err != nil {
		t.Errorf("PKCS#8 key: %v", err)
	} else if !bytes.Equal(loaded.KeyPEM(), ca.KeyPEM()) {
		t.Error("PKCS#8 key: another key loaded")
	}
}

func TestLoadRefusesWhatIsNotACAAndItsKey(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	leafCert, leafKey, err := ca.Issue("n1")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name          string
		certPEM, keyP []byte
	}{
		{"another CA's key", ca.CertPEM(), other.KeyPEM()},
		{"a leaf", leafCert, leafKey},
		{"no certificate", ca.KeyPEM(), ca.KeyPEM()},
		{"no key", ca.CertPEM(), ca.CertPEM()},
		{"garbage", []byte("garbage"), []byte("garbage")},
		{"a corrupt certificate", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2, 3}}), ca.KeyPEM()},
		{"a corrupt key", ca.CertPEM(), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte{1, 2, 3}})},
	} {
		if _, err := devca.Load(c.certPEM, c.keyP); err == nil {
			t.Errorf("%s: loaded", c.name)
		}
	}
}

func TestBadNamesAreRefused(t *testing.T) {
	ca := newCA(t)
	label63 := strings.Repeat("a", 63)
	long253 := strings.Repeat(label63+".", 3) + strings.Repeat("b", 61) // 4*63+1 = 253
	for _, good := range []string{"n1", "N1", "node-1.example.com", "svc_a", "1", long253} {
		if _, _, err := ca.Issue(good); err != nil {
			t.Errorf("Issue(%q): %v", good, err)
		}
	}
	for _, bad := range []string{
		"", ".", "..", "../n1", "a/b", `a\b`, "a..b", ".a", "a.", "a b", "a:b", "é", "a*", "*.a",
		"-a", "a-", "a.-b", long253 + "c", label63 + "a",
	} {
		if _, _, err := ca.Issue(bad); err == nil {
			t.Errorf("Issue(%q): no error", bad)
		}
		if _, err := ca.IssueTLS(bad); err == nil {
			t.Errorf("IssueTLS(%q): no error", bad)
		}
		if _, _, err := ca.Issue("n1", bad); err == nil {
			t.Errorf("Issue(n1, host %q): no error", bad)
		}
		dir := t.TempDir()
		if err := devca.WriteFiles(dir, ca, []string{"n1", bad}); err == nil {
			t.Errorf("WriteFiles(%q): no error", bad)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("WriteFiles(%q) failed but wrote %v", bad, ents)
		}
	}
}

func TestWriteFilesWritesTheCAAndNodesAndNeverOverwrites(t *testing.T) {
	ca := newCA(t)
	dir := filepath.Join(t.TempDir(), "certs")
	if err := devca.WriteFiles(dir, ca, []string{"n1", "n2"}, "localhost"); err != nil {
		t.Fatal(err)
	}
	mode := func(name string) fs.FileMode {
		t.Helper()
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode()
	}
	if m := mode(""); !m.IsDir() || m.Perm() != 0o700 {
		t.Errorf("dir mode %v, want drwx------", m)
	}
	for _, f := range []string{"ca-key.pem", "n1-key.pem", "n2-key.pem"} {
		if m := mode(f).Perm(); m != 0o600 {
			t.Errorf("%s mode %v, want 0600", f, m)
		}
	}
	for _, f := range []string{"ca.pem", "n1.pem", "n2.pem"} {
		if m := mode(f).Perm(); m&0o022 != 0 || m&0o600 != 0o600 {
			t.Errorf("%s mode %v, want 0644 less the umask", f, m)
		}
	}
	read := func(name string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if !bytes.Equal(read("ca.pem"), ca.CertPEM()) || !bytes.Equal(read("ca-key.pem"), ca.KeyPEM()) {
		t.Error("ca.pem or ca-key.pem does not hold the CA")
	}
	for _, n := range []string{"n1", "n2"} {
		if _, err := tls.X509KeyPair(read(n+".pem"), read(n+"-key.pem")); err != nil {
			t.Errorf("%s: %v", n, err)
		}
		c := parseCert(t, read(n+".pem"))
		if err := verify(c, ca.Pool(), x509.ExtKeyUsageServerAuth, "localhost"); err != nil || c.DNSNames[0] != n {
			t.Errorf("%s: %v, DNSNames %q", n, err, c.DNSNames)
		}
	}
	entries := func() []string {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}
	want := []string{"ca-key.pem", "ca.pem", "n1-key.pem", "n1.pem", "n2-key.pem", "n2.pem"}
	if got := entries(); !slices.Equal(got, want) {
		t.Errorf("files %q, want %q", got, want)
	}

	// The same CA, loaded from its files: it adds a node, leaving the CA
	// files as they are.
	loaded, err := devca.Load(read("ca.pem"), read("ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if err := devca.WriteFiles(dir, loaded, []string{"n3"}); err != nil {
		t.Fatalf("adding n3 with the loaded CA: %v", err)
	}
	want = append(want, "n3-key.pem", "n3.pem")
	if got := entries(); !slices.Equal(got, want) {
		t.Errorf("files %q, want %q", got, want)
	}

	before := map[string][]byte{}
	for _, f := range want {
		before[f] = read(f)
	}
	for _, c := range []struct {
		what     string
		ca       *devca.CA
		names    []string
		mentions string
	}{
		{"an existing node", ca, []string{"n4", "n2"}, "n2.pem"},
		{"another CA", newCA(t), []string{"n4"}, "ca.pem"},
		{"a name twice", ca, []string{"n4", "n4"}, "n4.pem"},
		{"names that differ in case", ca, []string{"n4", "N4"}, "N4.pem"},
		{"a name that is the CA's file", ca, []string{"ca"}, "ca.pem"},
		{"a name that is another's key file", ca, []string{"n4-key", "n4"}, "n4-key.pem"},
	} {
		err := devca.WriteFiles(dir, c.ca, c.names)
		if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, c.mentions)) {
			t.Errorf("%s: err %v, want one naming %s", c.what, err, c.mentions)
		}
		if got := entries(); !slices.Equal(got, want) {
			t.Errorf("%s: files %q after the error, want %q", c.what, got, want)
		}
	}
	if err := devca.WriteFiles(dir, ca, []string{"n2"}); !errors.Is(err, fs.ErrExist) {
		t.Errorf("an existing node: err %v, want fs.ErrExist", err)
	}
	for f, b := range before {
		if !bytes.Equal(read(f), b) {
			t.Errorf("%s changed", f)
		}
	}

	// A CA key without its certificate (or the reverse) is refused.
	half := t.TempDir()
	if err := os.WriteFile(filepath.Join(half, "ca-key.pem"), ca.KeyPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := devca.WriteFiles(half, ca, []string{"n1"}); err == nil || !strings.Contains(err.Error(), "ca-key.pem") {
		t.Errorf("ca-key.pem alone: err %v, want one naming it", err)
	}
}

// handshake runs a TLS 1.3 handshake over net.Pipe between a server
// with serverCert that requires and verifies a client certificate from
// pool, and a client with clientCert (none if nil) that dials serverName.
// It returns the member name the server read from the client's verified
// chain, and the server's error.
func handshake(t *testing.T, pool *x509.CertPool, serverCert tls.Certificate, clientCert *tls.Certificate, serverName string) (string, error) {
	t.Helper()
	sc, cc := net.Pipe()
	deadline := time.Now().Add(10 * time.Second)
	sc.SetDeadline(deadline)
	cc.SetDeadline(deadline)
	server := tls.Server(sc, &tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	})
	ccfg := &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS13}
	if clientCert != nil {
		ccfg.Certificates = []tls.Certificate{*clientCert}
	}
	client := tls.Client(cc, ccfg)

	type result struct {
		peer string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		defer server.Close()
		if err := server.Handshake(); err != nil {
			done <- result{err: err}
			return
		}
		st := server.ConnectionState()
		if st.Version != tls.VersionTLS13 {
			done <- result{err: errors.New("not TLS 1.3")}
			return
		}
		leaf := st.VerifiedChains[0][0]
		if !slices.Contains(st.PeerCertificates[0].DNSNames, leaf.DNSNames[0]) {
			done <- result{err: errors.New("PeerCertificates[0] is not the verified leaf")}
			return
		}
		peer := leaf.DNSNames[0]
		_, err := io.WriteString(server, "hello "+peer)
		done <- result{peer: peer, err: err}
	}()
	// In TLS 1.3 the client's handshake ends before the server has
	// checked its certificate: the server's verdict comes with the first
	// read.
	clientErr := client.Handshake()
	var got []byte
	if clientErr == nil {
		got, clientErr = io.ReadAll(client)
	}
	client.Close()
	r := <-done
	if r.err == nil {
		if clientErr != nil {
			t.Errorf("server done, client: %v", clientErr)
		} else if string(got) != "hello "+r.peer {
			t.Errorf("client read %q", got)
		}
	}
	return r.peer, r.err
}

func TestMutualTLSBetweenIssuedCertificates(t *testing.T) {
	ca := newCA(t)
	n1, err := ca.IssueTLS("n1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	n2, err := ca.IssueTLS("n2")
	if err != nil {
		t.Fatal(err)
	}
	if n2.Leaf == nil || n2.Leaf.DNSNames[0] != "n2" {
		t.Fatalf("IssueTLS: Leaf %v", n2.Leaf)
	}
	peer, err := handshake(t, ca.Pool(), n1, &n2, "n1")
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	if peer != "n2" {
		t.Errorf("server read the client as %q, want n2", peer)
	}

	stranger, err := newCA(t).IssueTLS("n3")
	if err != nil {
		t.Fatal(err)
	}
	if peer, err := handshake(t, ca.Pool(), n1, &stranger, "n1"); !errors.As(err, new(*tls.CertificateVerificationError)) {
		t.Errorf("a client with another CA's certificate: peer %q, err %v, want a tls.CertificateVerificationError", peer, err)
	}
	if peer, err := handshake(t, ca.Pool(), n1, nil, "n1"); err == nil || !strings.Contains(err.Error(), "client didn't provide a certificate") {
		t.Errorf("a client without a certificate: peer %q, err %v", peer, err)
	}
	if _, err := handshake(t, ca.Pool(), n1, &n2, "n9"); err == nil || !strings.Contains(err.Error(), "bad certificate") {
		t.Errorf("a client dialling n9: server err %v, want the client's bad certificate alert", err)
	}
}

func TestTheZeroCAPanics(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.HasPrefix(r.(string), "devca: ") {
			t.Errorf("recovered %v, want a devca: panic", r)
		}
	}()
	new(devca.CA).Pool()
}

// Issue never signs past the CA's own expiry; an expired CA issues
// nothing.
func TestIssueStaysWithinTheCAsValidity(t *testing.T) {
	for _, c := range []struct {
		name     string
		notAfter time.Duration // from now
		wantErr  bool
	}{
		{"a CA with a month left", 30 * 24 * time.Hour, false},
		{"an expired CA", -time.Minute, true},
	} {
		ca := caUntil(t, time.Now().Add(c.notAfter))
		certPEM, _, err := ca.Issue("n1")
		if (err != nil) != c.wantErr {
			t.Errorf("%s: err %v", c.name, err)
			continue
		}
		if err == nil {
			caCert := parseCert(t, ca.CertPEM())
			if leaf := parseCert(t, certPEM); leaf.NotAfter.After(caCert.NotAfter) {
				t.Errorf("%s: leaf NotAfter %v is past the CA's %v", c.name, leaf.NotAfter, caCert.NotAfter)
			}
		}
	}
}

// caUntil makes, by hand, a CA valid until notAfter and loads it.
func caUntil(t *testing.T, notAfter time.Time) *devca.CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		NotBefore:             notAfter.Add(-365 * 24 * time.Hour),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := devca.Load(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return ca
}
