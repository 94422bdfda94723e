package main

// berth certs: a development CA and node certificates for mutual TLS
// between hosts (internal/devca). Production operators bring their own.
//
//	berth certs -dir DIR [-hosts h1,h2] [-gateway c1,c2] [-also m1,m2] name1 name2 ...
//
// makes DIR/ca.pem and DIR/ca-key.pem, unless both exist already (then it
// loads that CA), and for each name DIR/NAME.pem and DIR/NAME-key.pem: a
// node's certificate, or a gateway's for the names -gateway lists. It
// never overwrites a file, so adding a node later is one more run with
// the new name.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/berthrt/berth/internal/devca"
)

// certsCAName is the subject common name of the CA berth certs makes.
const certsCAName = "berth development CA"

func certsMain(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("certs", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.Usage = func() {
		fmt.Fprintln(stderr, "usage: berth certs -dir DIR [-hosts h1,h2] [-gateway c1,c2] [-also m1,m2] name1 name2 ...")
		fmt.Fprintln(stderr, "Makes a development CA in DIR (or loads DIR/ca.pem and DIR/ca-key.pem if they exist)")
		fmt.Fprintln(stderr, "and a certificate and key for each name. It never overwrites a file.")
		fmt.Fprintln(stderr, "Each certificate names its member and role in a URI (urn:berth:node:NAME or")
		fmt.Fprintln(stderr, "urn:berth:gateway:NAME; -also adds members), and acts as those members only.")
		fmt.Fprintln(stderr, "A node's may do everything a member does; a gateway's may send messages and asks")
		fmt.Fprintln(stderr, "and take replies, and nothing else: nodes refuse its relocation records, route")
		fmt.Fprintln(stderr, "hints, pauses and relocation requests, place no object on it, and a host with it")
		fmt.Fprintln(stderr, "does not start with kinds.")
		flags.PrintDefaults()
	}
	dir := flags.String("dir", "", "directory for the files, made (mode 0700) if missing (required)")
	hosts := flags.String("hosts", "", "comma-separated DNS names and IP addresses added to every certificate for hostname checks (the admin listener's, say), e.g. localhost,127.0.0.1; they name no member")
	also := flags.String("also", "", "comma-separated further member names every certificate of this run names besides its own: one certificate for several hosts (the pods of a StatefulSet)")
	gateways := flags.String("gateway", "", "comma-separated names, among the names given, that get a gateway's certificate (a client of the cluster: a program's host with actor.Config.Gateway)")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *dir == "" || flags.NArg() == 0 {
		fmt.Fprintln(stderr, "berth certs: -dir and at least one node name are required")
		flags.Usage()
		return 2
	}
	written, err := runCerts(*dir, flags.Args(), devca.Spec{Hosts: list(*hosts), Gateways: list(*gateways), Also: list(*also)})
	for _, p := range written {
		fmt.Fprintln(stdout, "wrote", p)
	}
	if err != nil {
		fmt.Fprintln(stderr, "berth certs:", err)
		return 1
	}
	return 0
}

// runCerts loads the CA in dir, or makes one if dir holds neither of its
// files, and writes a certificate for each of names. It returns the paths
// it wrote, in order.
func runCerts(dir string, names []string, sp devca.Spec) ([]string, error) {
	caCert, caKey := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	certPEM, certErr := os.ReadFile(caCert)
	keyPEM, keyErr := os.ReadFile(caKey)
	var ca *devca.CA
	var written []string
	switch {
	case certErr == nil && keyErr == nil:
		var err error
		if ca, err = devca.Load(certPEM, keyPEM); err != nil {
			return nil, fmt.Errorf("loading the CA from %s and %s: %w", caCert, caKey, err)
		}
	case errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist):
		var err error
		if ca, err = devca.New(certsCAName); err != nil {
			return nil, err
		}
		written = append(written, caCert, caKey)
	case errors.Is(certErr, fs.ErrNotExist):
		return nil, fmt.Errorf("%s exists without %s: restore it, or remove %s to make a new CA (its certificates will no longer verify)", caKey, caCert, caKey)
	case errors.Is(keyErr, fs.ErrNotExist):
		return nil, fmt.Errorf("%s exists without %s: restore it, or remove %s to make a new CA (its certificates will no longer verify)", caCert, caKey, caCert)
	case certErr != nil:
		return nil, certErr
	default:
		return nil, keyErr
	}
	// WriteFiles checks every name and file before it writes any; so on
	// its error nothing is written, unless the disk failed half way.
	if err := devca.WriteFilesFor(dir, ca, names, sp); err != nil {
		return nil, err
	}
	for _, n := range names {
		written = append(written, filepath.Join(dir, n+".pem"), filepath.Join(dir, n+"-key.pem"))
	}
	return written, nil
}

// list splits a comma-separated flag, dropping empty entries.
func list(s string) []string {
	var out []string
	for v := range strings.SplitSeq(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
