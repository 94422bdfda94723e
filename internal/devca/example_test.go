package devca_test

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log"

	"github.com/berthrt/berth/internal/devca"
)

// A node certificate verifies against the CA's pool for both directions
// of a connection between hosts, and names its member in its first DNS
// SAN.
func ExampleCA_Issue() {
	ca, err := devca.New("berth development CA")
	if err != nil {
		log.Fatal(err)
	}
	certPEM, _, err := ca.Issue("n1", "localhost", "127.0.0.1")
	if err != nil {
		log.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range []struct {
		as    string
		usage x509.ExtKeyUsage
		name  string // the server name a dialling host checks
	}{
		{"client", x509.ExtKeyUsageClientAuth, ""},
		{"server", x509.ExtKeyUsageServerAuth, "n1"},
	} {
		opts := x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{c.usage}, DNSName: c.name}
		chains, err := cert.Verify(opts)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("as %s: verified, member %s\n", c.as, chains[0][0].DNSNames[0])
	}
	fmt.Println("SANs:", cert.DNSNames, cert.IPAddresses)
	// Output:
	// as client: verified, member n1
	// as server: verified, member n1
	// SANs: [n1 localhost] [127.0.0.1]
}
