// Package devca makes a development certificate authority and the node
// and gateway certificates that berth's hosts present to each other over mutually
// authenticated TLS.
//
// It is for development, demos and tests: one command (berth certs) or a
// few calls give every node a certificate and every node the pool to check
// its peers against. Production operators bring their own CA and their own
// issuance; nothing in berth requires certificates made here, only
// certificates that verify against the configured roots.
//
// Invariants:
//
//   - The keys New and Issue make are ECDSA P-256, PEM-encoded as
//     "EC PRIVATE KEY" (SEC 1); Load also reads PKCS#8 "PRIVATE KEY", and
//     ECDSA keys on the other curves Go supports.
//   - The CA certificate is self-signed, IsCA with MaxPathLen 0 (it signs
//     leaves, not intermediate CAs), valid from an hour before it was made
//     (to tolerate clock skew between hosts) to ten years after.
//   - A certificate for member name has subject CN = name, name as its
//     first DNS SAN (for hostname checks), and one identity URI per member
//     it names (transport.IdentityURI: "urn:berth:node:NAME", or
//     "urn:berth:gateway:NAME" from IssueAs with transport.RoleGateway), so
//     a peer reads the member and its role from the verified chain. It is good for both server and client authentication
//     (each host dials and is dialled), valid from an hour before issue to
//     a year after, never past the CA's own NotAfter.
//   - Serial numbers are random 128-bit positive integers.
//   - WriteFiles never overwrites a file: a second run cannot replace a CA
//     (or a node's key) silently.
//
// A CA is immutable once made and safe for concurrent use. The zero CA is
// not usable: its methods panic; make one with New or Load.
package devca

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/berthrt/berth/transport"
)

// Validity periods; backdate tolerates clock skew between the issuing
// machine and the hosts that check the certificate.
const (
	backdate     = time.Hour
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 365 * 24 * time.Hour
)

// Files WriteFiles writes, in its dir.
const (
	caCertFile = "ca.pem"
	caKeyFile  = "ca-key.pem"
)

// CA is a certificate authority: its certificate and its private key.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// New makes a CA with a fresh P-256 key and a self-signed certificate
// whose subject common name is name.
func New(name string) (*CA, error) {
	if name == "" {
		return nil, errors.New("devca: empty CA name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("devca: generating CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("devca: creating CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("devca: parsing CA certificate: %w", err)
	}
	return &CA{cert: cert, key: key}, nil
}

// Load makes a CA from a PEM "CERTIFICATE" block and a PEM private key,
// either "EC PRIVATE KEY" (SEC 1) or "PRIVATE KEY" (PKCS#8) holding an
// ECDSA key. Other PEM blocks (such as "EC PARAMETERS") are skipped. It
// fails if the certificate is not a CA that may sign certificates or the
// key is not the certificate's.
func Load(certPEM, keyPEM []byte) (*CA, error) {
	certDER := findBlock(certPEM, "CERTIFICATE")
	if certDER == nil {
		return nil, errors.New("devca: no CERTIFICATE block in the CA certificate PEM")
	}
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return nil, fmt.Errorf("devca: parsing CA certificate: %w", err)
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("devca: certificate %q is not a CA that may sign certificates", cert.Subject.CommonName)
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, err
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("devca: the key is not the key of CA certificate %q", cert.Subject.CommonName)
	}
	return &CA{cert: cert, key: key}, nil
}

// findBlock returns the bytes of the first PEM block of the type in data,
// or nil.
func findBlock(data []byte, typ string) []byte {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil
		}
		if b.Type == typ {
			return b.Bytes
		}
	}
}

// parseKey reads the first ECDSA private key PEM block in data.
func parseKey(data []byte) (*ecdsa.PrivateKey, error) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, errors.New(`devca: no "EC PRIVATE KEY" or "PRIVATE KEY" block in the key PEM`)
		}
		switch b.Type {
		case "EC PRIVATE KEY":
			key, err := x509.ParseECPrivateKey(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("devca: parsing CA key: %w", err)
			}
			return key, nil
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("devca: parsing CA key: %w", err)
			}
			key, ok := k.(*ecdsa.PrivateKey)
			if !ok {
				return nil, fmt.Errorf("devca: CA key is a %T, not an ECDSA key", k)
			}
			return key, nil
		}
	}
}

// check panics if c was not made by New or Load.
func (c *CA) check() {
	if c == nil || c.cert == nil || c.key == nil {
		panic("devca: CA not made by New or Load")
	}
}

// CertPEM returns the CA certificate, PEM-encoded as a "CERTIFICATE"
// block. The slice is the caller's.
func (c *CA) CertPEM() []byte {
	c.check()
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.cert.Raw})
}

// KeyPEM returns the CA's private key, PEM-encoded as an "EC PRIVATE KEY"
// block. The slice is the caller's; it is a secret.
func (c *CA) KeyPEM() []byte {
	c.check()
	p, err := encodeKey(c.key)
	if err != nil {
		// A key New generated or Load parsed always marshals.
		panic("devca: marshalling the CA key: " + err.Error())
	}
	return p
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// Pool returns a new certificate pool holding only the CA certificate:
// the RootCAs of a dialling host's tls.Config and the ClientCAs of an
// accepting one. The pool is the caller's.
func (c *CA) Pool() *x509.CertPool {
	c.check()
	p := x509.NewCertPool()
	p.AddCert(c.cert)
	return p
}

// Issue makes a node certificate for the member name, signed by the CA,
// with a fresh P-256 key, and returns both PEM-encoded ("CERTIFICATE",
// "EC PRIVATE KEY"). It names the member in its one identity URI
// (transport.IdentityURI: "urn:berth:node:NAME"), so it names that member
// and no other. Its DNS SANs, for hostname checks only, are name followed
// by the hosts that are DNS names; hosts that are IP literals become IP
// SANs. Name and the DNS hosts must be label sequences of letters,
// digits, '-' and '_' separated by '.', at most 253 bytes; Issue fails
// otherwise, and if the CA has expired.
func (c *CA) Issue(name string, hosts ...string) (certPEM, keyPEM []byte, err error) {
	return c.IssueAs(transport.RoleNode, name, hosts...)
}

// IssueAs is Issue for a member of role: a gateway's certificate
// ("urn:berth:gateway:NAME") lets its holder send messages and asks and
// take replies, and nothing a node does (transport.RoleGateway).
func (c *CA) IssueAs(role transport.Role, name string, hosts ...string) (certPEM, keyPEM []byte, err error) {
	return c.IssueMembers(role, []string{name}, hosts...)
}

// IssueMembers is IssueAs for one certificate naming several members of
// role, each in an identity URI (the pods of a StatefulSet sharing one
// certificate, say): names[0] is its subject and first DNS name.
func (c *CA) IssueMembers(role transport.Role, names []string, hosts ...string) (certPEM, keyPEM []byte, err error) {
	c.check()
	if len(names) == 0 {
		return nil, nil, errors.New("devca: no member name")
	}
	for _, n := range names {
		if err := checkName(n); err != nil {
			return nil, nil, fmt.Errorf("devca: member name: %w", err)
		}
	}
	name := names[0]
	uris := make([]*url.URL, 0, len(names))
	for _, n := range names {
		uris = append(uris, transport.IdentityURI(role, n))
	}
	dnsHosts, ips, err := splitHosts(hosts)
	if err != nil {
		return nil, nil, err
	}
	dnsNames := []string{name}
	for _, h := range dnsHosts {
		if !containsFold(dnsNames, h) {
			dnsNames = append(dnsNames, h)
		}
	}
	now := time.Now()
	notBefore, notAfter := now.Add(-backdate), now.Add(leafValidity)
	if notBefore.Before(c.cert.NotBefore) {
		notBefore = c.cert.NotBefore
	}
	if notAfter.After(c.cert.NotAfter) {
		notAfter = c.cert.NotAfter
	}
	if !now.Before(notAfter) {
		return nil, nil, fmt.Errorf("devca: CA %q expired at %v", c.cert.Subject.CommonName, c.cert.NotAfter)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("devca: generating key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		DNSNames:              dnsNames,
		IPAddresses:           ips,
		URIs:                  uris,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, nil, fmt.Errorf("devca: creating certificate for %q: %w", name, err)
	}
	kp, err := encodeKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("devca: marshalling key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), kp, nil
}

// IssueTLS is Issue, returning the certificate and key as a
// tls.Certificate (with Leaf set) for a tls.Config's Certificates.
func (c *CA) IssueTLS(name string, hosts ...string) (tls.Certificate, error) {
	return c.IssueTLSAs(transport.RoleNode, name, hosts...)
}

// IssueTLSAs is IssueTLS for a member of role (IssueAs).
func (c *CA) IssueTLSAs(role transport.Role, name string, hosts ...string) (tls.Certificate, error) {
	certPEM, keyPEM, err := c.IssueAs(role, name, hosts...)
	if err != nil {
		return tls.Certificate{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("devca: %w", err)
	}
	return cert, nil
}

// WriteFiles writes the CA to dir/ca.pem and dir/ca-key.pem and, for each
// of names, a certificate issued by Issue(name, hosts...) to dir/NAME.pem
// and its key to dir/NAME-key.pem. Key files have mode 0600, certificates
// 0644 (both less the umask). It creates dir, mode 0700, if it is
// missing.
//
// It never overwrites a file: if any file it would write exists, it
// returns an error naming it (errors.Is(err, fs.ErrExist)) before writing
// anything. The one exception is the CA pair: when dir/ca.pem and
// dir/ca-key.pem both exist and hold ca itself (the CA Load made from
// them), they are left as they are, so that more names can be added to a
// directory later. It also checks every name and host before writing
// anything. A failure to write (a full disk) can leave the files written
// before it.
func WriteFiles(dir string, ca *CA, names []string, hosts ...string) error {
	return WriteFilesFor(dir, ca, names, Spec{Hosts: hosts})
}

// Spec is what WriteFilesFor puts in the certificates besides their names.
type Spec struct {
	// Gateways are the names, among the names, that get a gateway's
	// certificate (IssueAs with transport.RoleGateway); the others get a
	// node's.
	Gateways []string
	// Also are further member names every certificate names besides its
	// own (IssueMembers): one certificate for several hosts.
	Also []string
	// Hosts are DNS names and IP addresses added to every certificate for
	// hostname checks (they name no member).
	Hosts []string
}

// WriteFilesFor is WriteFiles with gateways, further member names and
// hosts as sp says. A name in sp.Gateways that is not among names is an
// error.
func WriteFilesFor(dir string, ca *CA, names []string, sp Spec) error {
	ca.check()
	hosts := sp.Hosts
	for _, g := range sp.Gateways {
		if !slices.Contains(names, g) {
			return fmt.Errorf("devca: gateway %q is not among the names %q", g, names)
		}
	}
	for _, n := range sp.Also {
		if err := checkName(n); err != nil {
			return fmt.Errorf("devca: member name: %w", err)
		}
	}
	if dir == "" {
		return errors.New("devca: empty directory")
	}
	if _, _, err := splitHosts(hosts); err != nil {
		return err
	}
	// Names are case-folded: "n1" and "N1" are one member to DNS, and
	// one file on a case-insensitive file system.
	seen := map[string]bool{caCertFile: true, caKeyFile: true}
	var targets []string
	for _, n := range names {
		if err := checkName(n); err != nil {
			return fmt.Errorf("devca: member name: %w", err)
		}
		for _, f := range []string{n + ".pem", n + "-key.pem"} {
			k := strings.ToLower(f)
			if seen[k] {
				return fmt.Errorf("devca: %s would be written twice (names %q)", filepath.Join(dir, f), names)
			}
			seen[k] = true
			targets = append(targets, f)
		}
	}
	haveCA, err := holdsCA(dir, ca)
	if err != nil {
		return err
	}
	if !haveCA {
		targets = append(targets, caCertFile, caKeyFile)
	}
	for _, f := range targets {
		p := filepath.Join(dir, f)
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("devca: %s exists; not overwriting it: %w", p, fs.ErrExist)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("devca: %w", err)
		}
	}

	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("devca: %w", err)
	}
	if !haveCA {
		if err := writeNew(filepath.Join(dir, caCertFile), ca.CertPEM(), 0o644); err != nil {
			return err
		}
		if err := writeNew(filepath.Join(dir, caKeyFile), ca.KeyPEM(), 0o600); err != nil {
			return err
		}
	}
	for _, n := range names {
		role := transport.RoleNode
		if slices.Contains(sp.Gateways, n) {
			role = transport.RoleGateway
		}
		members := []string{n}
		for _, a := range sp.Also {
			if !slices.Contains(members, a) {
				members = append(members, a)
			}
		}
		certPEM, keyPEM, err := ca.IssueMembers(role, members, hosts...)
		if err != nil {
			return err
		}
		if err := writeNew(filepath.Join(dir, n+".pem"), certPEM, 0o644); err != nil {
			return err
		}
		if err := writeNew(filepath.Join(dir, n+"-key.pem"), keyPEM, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// holdsCA reports whether dir/ca.pem and dir/ca-key.pem both exist and
// hold ca. It returns false, nil if neither exists, and an error naming
// the file if only one does or they hold another CA.
func holdsCA(dir string, ca *CA) (bool, error) {
	certPath, keyPath := filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile)
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	switch {
	case errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist):
		return false, nil
	case errors.Is(certErr, fs.ErrNotExist):
		return false, fmt.Errorf("devca: %s exists without %s; not overwriting it: %w", keyPath, certPath, fs.ErrExist)
	case errors.Is(keyErr, fs.ErrNotExist):
		return false, fmt.Errorf("devca: %s exists without %s; not overwriting it: %w", certPath, keyPath, fs.ErrExist)
	case certErr != nil:
		return false, fmt.Errorf("devca: %w", certErr)
	case keyErr != nil:
		return false, fmt.Errorf("devca: %w", keyErr)
	}
	there, err := Load(certPEM, keyPEM)
	if err != nil || !bytes.Equal(there.cert.Raw, ca.cert.Raw) || !there.key.Equal(ca.key) {
		return false, fmt.Errorf("devca: %s exists and holds another CA; not overwriting it: %w", certPath, fs.ErrExist)
	}
	return true, nil
}

// writeNew creates the file at path, which must not exist, with data.
// On failure it removes what it created.
func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("devca: %s exists; not overwriting it: %w", path, err)
		}
		return fmt.Errorf("devca: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("devca: writing %s: %w", path, err)
	}
	return nil
}

// checkName reports whether s is a sequence of non-empty labels of
// letters, digits, '-' and '_', separated by '.', at most 253 bytes, each
// label at most 63 bytes and neither starting nor ending with '-'. ('_'
// is outside RFC 1123 host names but common in service names; Go's TLS
// stack accepts it.)
func checkName(s string) error {
	if s == "" {
		return errors.New("empty")
	}
	if len(s) > 253 {
		return fmt.Errorf("%.20q... is %d bytes, over 253", s, len(s))
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" {
			return fmt.Errorf("%q has an empty label", s)
		}
		if len(label) > 63 {
			return fmt.Errorf("%q has a label over 63 bytes", s)
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("%q has a label that starts or ends with '-'", s)
		}
		for i := 0; i < len(label); i++ {
			b := label[i]
			if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '-' || b == '_') {
				return fmt.Errorf("%q has %q: only letters, digits, '-', '_' and '.' are allowed", s, b)
			}
		}
	}
	return nil
}

// splitHosts checks hosts and splits them into DNS names and IP
// addresses.
func splitHosts(hosts []string) (dnsNames []string, ips []net.IP, err error) {
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
			continue
		}
		if err := checkName(h); err != nil {
			return nil, nil, fmt.Errorf("devca: host: %w", err)
		}
		dnsNames = append(dnsNames, h)
	}
	return dnsNames, ips, nil
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// newSerial returns a random positive 128-bit serial number.
func newSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	for {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return nil, fmt.Errorf("devca: generating serial number: %w", err)
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}
