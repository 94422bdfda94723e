package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// The Dockerfile's build command, run as it stands (with the output in a
// temporary directory), yields a static binary: no interpreter, no shared
// library. Its image runs that binary as a non-root user with berth node
// as the entrypoint, and builds with the Go of go.mod. (No container
// daemon runs here: the image itself is not built.)
func TestTheDockerfileBuildsAStaticBinary(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	df, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(df)
	build := regexp.MustCompile(`(?m)^RUN (CGO_ENABLED=0 go build .* -o )/out/berth( \./cmd/berth)$`).FindStringSubmatch(text)
	if build == nil {
		t.Fatalf("the Dockerfile has no line RUN CGO_ENABLED=0 go build ... -o /out/berth ./cmd/berth:\n%s", text)
	}
	for _, want := range []string{"\nFROM scratch\n", "\nCOPY --from=build /out/berth /berth\n", "\nUSER 65532:65532\n", "\nENTRYPOINT [\"/berth\", \"node\"]\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("the Dockerfile has no line %q", strings.TrimSpace(want))
		}
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(mod)
	if goVersion == nil || !strings.Contains(text, "\nFROM golang:"+string(goVersion[1])+" AS build\n") {
		t.Errorf("the Dockerfile does not build with the Go of go.mod (%s)", goVersion)
	}
	bin := filepath.Join(t.TempDir(), "berth")
	cmd := exec.Command("sh", "-c", build[1]+shellQuote(bin)+build[2])
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(runtime.GOROOT(), "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary has a %v program header: it is not static", p.Type)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs the shared libraries %v", libs)
	}
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
