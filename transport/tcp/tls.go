package tcp

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math/big"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/transport"
)

// TLS is a host's identity and what it trusts: its certificate (which must
// name the host: an identity URI, see IdentityURI, or for certificates
// without one its member name among the DNS names) and the
// pool of certificate authorities its peers' certificates must chain to.
// Both ends of every connection present a certificate (mutual TLS 1.3).
type TLS struct {
	// Certificate is this host's certificate and key.
	Certificate tls.Certificate
	// CA is the pool the peers' certificates are verified against.
	CA *x509.CertPool
	// Deny lists certificate serial numbers (hexadecimal, as openssl
	// x509 -serial prints them; case and colons do not matter) that are
	// refused whatever signed them: a leaked key's certificate, until it
	// expires. Transport.SetTLS also closes the links on such a
	// certificate.
	Deny []string
}

// normalSerial spells a serial number as Deny's entries are compared:
// lower-case hexadecimal without colons or leading zeros.
func normalSerial(s string) string {
	s = strings.ToLower(strings.ReplaceAll(strings.TrimSpace(s), ":", ""))
	if t := strings.TrimLeft(s, "0"); t != "" || s == "" {
		return t
	}
	return "0"
}

// tlsState is the TLS a transport uses now: what SetTLS swaps.
type tlsState struct {
	c      *TLS
	deny   map[string]bool
	server *tls.Config
}

func newTLSState(c *TLS) *tlsState {
	st := &tlsState{c: c, deny: map[string]bool{}}
	for _, d := range c.Deny {
		if d = normalSerial(d); d != "" {
			st.deny[d] = true
		}
	}
	st.server = c.serverConfig(st.denied)
	return st
}

// denied reports whether cert's serial number is on the deny list.
func (st *tlsState) denied(cert *x509.Certificate) bool {
	return cert != nil && cert.SerialNumber != nil && st.deny[normalSerial(cert.SerialNumber.Text(16))]
}

// errDenied is why a certificate on the deny list is refused.
var errDenied = errors.New("the certificate's serial number is on the deny list")

// LoadDenyList reads a deny list for TLS.Deny: one serial number per line
// (hexadecimal, colons allowed), blank lines and lines starting with #
// skipped. Errors are payload.InvalidOperation naming the file and line.
func LoadDenyList(file string) ([]string, error) {
	const op = "tcp.LoadDenyList"
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, payload.NewError(payload.InvalidOperation, op, err.Error())
	}
	var out []string
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		n := normalSerial(line)
		if _, ok := new(big.Int).SetString(n, 16); !ok {
			return nil, payload.NewError(payload.InvalidOperation, op, file+":"+strconv.Itoa(i+1)+": "+strconv.Quote(line)+" is not a hexadecimal serial number")
		}
		out = append(out, n)
	}
	return out, nil
}

// LoadTLS reads a host's certificate and key and the CA certificates
// (PEM files) into a TLS. Errors are payload.InvalidOperation naming the
// file.
func LoadTLS(certFile, keyFile, caFile string) (*TLS, error) {
	const op = "tcp.LoadTLS"
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, payload.NewError(payload.InvalidOperation, op, "certificate "+certFile+" and key "+keyFile+": "+err.Error())
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, payload.NewError(payload.InvalidOperation, op, "CA file: "+err.Error())
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, payload.NewError(payload.InvalidOperation, op, "CA file "+caFile+" holds no PEM certificate")
	}
	return &TLS{Certificate: cert, CA: pool}, nil
}

// errNotNamed is why a verified certificate is refused: it does not name
// the member the connection is for.
var errNotNamed = errors.New("the certificate does not name the member")

// identity reports whether cert names member exactly, and as which role:
// by its identity URIs (transport.IdentityURI) if it has any — then its
// DNS names, added for hostname checks, name no member — with a gateway's
// role winning if it is named both ways; else by its DNS names, compared
// as they stand (a wildcard name names no member), as a node.
func identity(cert *x509.Certificate, member string) (transport.Role, bool) {
	found, named, role := false, false, transport.RoleNode
	for _, u := range cert.URIs {
		r, name, ok := transport.ParseIdentityURI(u)
		if !ok {
			continue
		}
		found = true
		if name == member {
			named, role = true, max(role, r)
		}
	}
	if found {
		return role, named
	}
	return transport.RoleNode, slices.Contains(cert.DNSNames, member)
}

// names reports whether cert names member exactly (identity).
func names(cert *x509.Certificate, member string) bool {
	_, ok := identity(cert, member)
	return ok
}

// serverConfig is the listener's TLS configuration: TLS 1.3 only, a client
// certificate required and verified against the CA. Which member the
// client is, is checked against its preamble once the handshake is done.
func (c *TLS) serverConfig(denied func(*x509.Certificate) bool) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.Certificate},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    c.CA,
		// A host dials each peer rarely: no resumption, no tickets.
		SessionTicketsDisabled: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) > 0 && denied(cs.PeerCertificates[0]) {
				return errDenied
			}
			return nil
		},
	}
}

// clientConfig is the dialer's TLS configuration for reaching member peer:
// TLS 1.3 only, the listener's certificate verified against the CA and
// required to name peer exactly.
func (st *tlsState) clientConfig(peer string) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{st.c.Certificate},
		RootCAs:      st.c.CA,
		ServerName:   peer,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !names(cs.PeerCertificates[0], peer) {
				return errNotNamed
			}
			if st.denied(cs.PeerCertificates[0]) {
				return errDenied
			}
			return nil
		},
	}
}

// uriList spells a certificate's URIs for an error message.
func uriList(us []*url.URL) string {
	if len(us) == 0 {
		return "none"
	}
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = u.String()
	}
	return strings.Join(out, ", ")
}
