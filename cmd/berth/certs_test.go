package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/berthrt/berth/internal/devca"
)

// certsRun runs berth certs with args and returns its exit code, stdout
// and stderr.
func certsRun(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := certsMain(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCertsMakesACAAndNodeCertificatesAndAddsNodesLater(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	code, out, errOut := certsRun("-dir", dir, "-hosts", "localhost, 127.0.0.1", "n1", "n2", "n3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	wrote := func(files ...string) string {
		var b strings.Builder
		for _, f := range files {
			b.WriteString("wrote " + filepath.Join(dir, f) + "\n")
		}
		return b.String()
	}
	if want := wrote("ca.pem", "ca-key.pem", "n1.pem", "n1-key.pem", "n2.pem", "n2-key.pem", "n3.pem", "n3-key.pem"); out != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out, want)
	}
	read := func(name string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	caCert, caKey := read("ca.pem"), read("ca-key.pem")
	ca, err := devca.Load(caCert, caKey)
	if err != nil {
		t.Fatal(err)
	}
	checkNode := func(name string) {
		t.Helper()
		pair, err := tls.X509KeyPair(read(name+".pem"), read(name+"-key.pem"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		leaf := pair.Leaf
		if leaf.DNSNames[0] != name || !slices.Contains(leaf.DNSNames, "localhost") || len(leaf.IPAddresses) != 1 {
			t.Errorf("%s: DNSNames %q, IPAddresses %v", name, leaf.DNSNames, leaf.IPAddresses)
		}
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth} {
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{usage}, DNSName: name}); err != nil {
				t.Errorf("%s, usage %v: %v", name, usage, err)
			}
		}
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		checkNode(n)
	}

	// A fourth node later: the CA is reused, not replaced.
	code, out, errOut = certsRun("-dir", dir, "-hosts", "localhost,127.0.0.1", "n4")
	if code != 0 {
		t.Fatalf("adding n4: exit %d: %s", code, errOut)
	}
	if want := wrote("n4.pem", "n4-key.pem"); out != want {
		t.Errorf("adding n4: stdout:\n%s\nwant:\n%s", out, want)
	}
	if !bytes.Equal(read("ca.pem"), caCert) || !bytes.Equal(read("ca-key.pem"), caKey) {
		t.Error("adding n4 changed the CA files")
	}
	checkNode("n4")

	// A name that has its files already is refused, naming the file, and
	// nothing is written for the other names of that run.
	n2Cert := read("n2.pem")
	code, out, errOut = certsRun("-dir", dir, "n5", "n2")
	if code != 1 || out != "" || !strings.Contains(errOut, filepath.Join(dir, "n2.pem")) {
		t.Errorf("repeating n2: exit %d, stdout %q, stderr %q: want 1, nothing, an error naming n2.pem", code, out, errOut)
	}
	if !bytes.Equal(read("n2.pem"), n2Cert) {
		t.Error("repeating n2 replaced n2.pem")
	}
	if _, err := os.Stat(filepath.Join(dir, "n5.pem")); !os.IsNotExist(err) {
		t.Errorf("n5.pem after the refused run: %v", err)
	}
	// So is a name given twice.
	if code, _, errOut := certsRun("-dir", dir, "n6", "n6"); code != 1 || !strings.Contains(errOut, "n6.pem") {
		t.Errorf("n6 twice: exit %d, stderr %q", code, errOut)
	}
}

func TestCertsRefusesBadUsage(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args     []string
		code     int
		mentions string
	}{
		{[]string{"-dir", dir}, 2, "node name"},
		{[]string{"n1"}, 2, "-dir"},
		{[]string{"-dir", dir, "bad/name"}, 1, "bad/name"},
		{[]string{"-dir", dir, "-hosts", "a b", "n1"}, 1, "a b"},
		{[]string{"-bogus"}, 2, "bogus"},
		{[]string{"-h"}, 0, "usage: berth certs"},
	} {
		code, out, errOut := certsRun(c.args...)
		if code != c.code || out != "" || !strings.Contains(errOut, c.mentions) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q: want exit %d and a message with %q", c.args, code, out, errOut, c.code, c.mentions)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the refused runs wrote %v", ents)
	}

	// Half a CA is not replaced by a new one.
	if err := os.WriteFile(filepath.Join(dir, "ca-key.pem"), []byte("key"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := certsRun("-dir", dir, "n1")
	if code != 1 || !strings.Contains(errOut, filepath.Join(dir, "ca-key.pem")+" exists without") {
		t.Errorf("half a CA: exit %d, stderr %q", code, errOut)
	}
}

// berth certs -gateway gives the names it lists a gateway's certificate
// and the others a node's: each names its member and role in its one
// identity URI, and -hosts names are DNS names only (no member). A
// -gateway name that is not among the names is refused, writing nothing.
func TestCertsGivesGatewaysTheirRole(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if code, _, errOut := certsRun("-dir", dir, "-hosts", "n2", "-gateway", "c1", "n1", "c1"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for name, want := range map[string]string{"n1": "urn:berth:node:n1", "c1": "urn:berth:gateway:c1"} {
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		if us := pair.Leaf.URIs; len(us) != 1 || us[0].String() != want {
			t.Errorf("%s: URIs %v, want [%s]", name, us, want)
		}
		if !slices.Contains(pair.Leaf.DNSNames, "n2") {
			t.Errorf("%s: DNS names %v lack the -hosts name", name, pair.Leaf.DNSNames)
		}
	}
	dir2 := filepath.Join(t.TempDir(), "certs")
	code, _, errOut := certsRun("-dir", dir2, "-gateway", "c9", "n1")
	if code == 0 || !strings.Contains(errOut, `gateway "c9" is not among the names`) {
		t.Fatalf("a -gateway name not among the names: exit %d, %s", code, errOut)
	}
	if _, err := os.Stat(dir2); err == nil {
		t.Fatal("files were written for a refused run")
	}
}

// berth certs -also makes one certificate name several members (the pods
// of a StatefulSet sharing one), each in an identity URI of its role.
func TestCertsAlsoNamesFurtherMembers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if code, _, errOut := certsRun("-dir", dir, "-also", "berth-1,berth-2", "berth-0"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "berth-0.pem"), filepath.Join(dir, "berth-0-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range pair.Leaf.URIs {
		got = append(got, u.String())
	}
	if want := []string{"urn:berth:node:berth-0", "urn:berth:node:berth-1", "urn:berth:node:berth-2"}; !slices.Equal(got, want) {
		t.Fatalf("URIs %q, want %q", got, want)
	}
}
