package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/pgtest"
	"github.com/berthrt/berth/internal/testutil"
)

// buildBerth builds this command into a temporary directory: the nodes of
// the multi-process demo run it.
func buildBerth(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "berth")
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// The demo across OS processes, small: three `berth node` processes on one
// Postgres, a client host sending numbered messages; one node drains on
// SIGTERM (exit 0, its objects moved), another is SIGKILLed. Every object
// the killed node did not hold shows every accepted message once and in
// order; the killed node's objects start afresh elsewhere and serve again.
func TestDemoAcrossProcesses(t *testing.T) {
	db := pgtest.New(t)
	bin := buildBerth(t)
	var out bytes.Buffer
	rep, err := runProcs(context.Background(), procsConfig{procs: 3, objects: 200, senders: 2, rate: 2000,
		duration: 30 * time.Second, db: db.URL, binary: bin, quiet: true}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		for name, l := range rep.nodeLogs {
			t.Logf("%s:\n%s", name, l.String())
		}
		t.Fatal(err)
	}
	if rep.accepted == 0 || rep.relocations == 0 {
		t.Fatalf("nothing happened: %d accepted, %d relocations", rep.accepted, rep.relocations)
	}
	if rep.lost != 0 || rep.duplicated != 0 || rep.outOfOrder != 0 {
		t.Fatalf("objects the killed node did not hold: %d lost, %d duplicated, %d out of order %v",
			rep.lost, rep.duplicated, rep.outOfOrder, rep.breaks)
	}
	if !strings.Contains(rep.drainExit, "exit status 0") {
		t.Errorf("the SIGTERMed node ended %q, want exit status 0", rep.drainExit)
	}
	if !strings.Contains(rep.killExit, "killed") {
		t.Errorf("the SIGKILLed node ended %q", rep.killExit)
	}
	if rep.killedHandled > rep.killedAccepted {
		t.Errorf("the killed node's objects handled %d messages, more than the %d accepted", rep.killedHandled, rep.killedAccepted)
	}
	testutil.CheckNoGoroutines(t)
}

// berth node refuses to start without a name or a database.
func TestNodeNeedsANameAndADatabase(t *testing.T) {
	var stderr bytes.Buffer
	if code := nodeMain([]string{"-name", "n1"}, &bytes.Buffer{}, &stderr); code != nodeExitUsage {
		t.Fatalf("exit %d, want %d; stderr %s", code, nodeExitUsage, stderr.String())
	}
	if !strings.Contains(stderr.String(), "-name and -db are required") {
		t.Fatalf("stderr %q", stderr.String())
	}
}
