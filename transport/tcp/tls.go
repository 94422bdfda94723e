package tcp

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"slices"

	"github.com/berthrt/berth/payload"
)

// TLS is a host's identity and what it trusts: its certificate (which must
// name the host: its member name among the certificate's DNS names) and the
// pool of certificate authorities its peers' certificates must chain to.
// Both ends of every connection present a certificate (mutual TLS 1.3).
type TLS struct {
	// Certificate is this host's certificate and key.
	Certificate tls.Certificate
	// CA is the pool the peers' certificates are verified against.
	CA *x509.CertPool
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

// names reports whether cert names member exactly: the member name is one
// of its DNS names, compared as they stand (a wildcard name names no
// member).
func names(cert *x509.Certificate, member string) bool {
	return slices.Contains(cert.DNSNames, member)
}

// serverConfig is the listener's TLS configuration: TLS 1.3 only, a client
// certificate required and verified against the CA. Which member the
// client is, is checked against its preamble once the handshake is done.
func (c *TLS) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.Certificate},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    c.CA,
		// A host dials each peer rarely: no resumption, no tickets.
		SessionTicketsDisabled: true,
	}
}

// clientConfig is the dialer's TLS configuration for reaching member peer:
// TLS 1.3 only, the listener's certificate verified against the CA and
// required to name peer exactly.
func (c *TLS) clientConfig(peer string) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.Certificate},
		RootCAs:      c.CA,
		ServerName:   peer,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !names(cs.PeerCertificates[0], peer) {
				return errNotNamed
			}
			return nil
		},
	}
}
