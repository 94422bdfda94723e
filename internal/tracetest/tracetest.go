// Package tracetest runs data-driven trace scripts, in the style of
// etcd-io/raft's interaction tests: each testdata file is one scenario of
// blocks
//
//	command args...
//	----
//	expected output lines
//
// separated by blank lines; a line starting with '#' before a command is a
// comment, kept when the file is rewritten. A test feeds each command to
// its own world and compares what it returns with the expected lines; with
// rewrite it writes the actual output back instead (regenerate only when
// you understand the diff, and read every changed trace).
package tracetest

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Block is one command of a script with its expected output.
type Block struct {
	Comments []string
	Cmd      string
	Want     []string
}

// Parse reads the script at path; a malformed script fails t.
func Parse(t testing.TB, path string) []Block {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []Block
	var cur Block
	state := 0 // 0: before command, 1: after command, 2: in output
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case state == 0 && strings.HasPrefix(line, "#"):
			cur.Comments = append(cur.Comments, line)
		case state == 0 && strings.TrimSpace(line) == "":
			if len(cur.Comments) > 0 {
				cur.Comments = append(cur.Comments, "")
			}
		case state == 0:
			cur.Cmd = line
			state = 1
		case state == 1:
			if line != "----" {
				t.Fatalf("%s: expected ---- after %q, got %q", path, cur.Cmd, line)
			}
			state = 2
		case state == 2 && line == "":
			blocks = append(blocks, cur)
			cur, state = Block{}, 0
		default:
			cur.Want = append(cur.Want, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if state == 2 {
		blocks = append(blocks, cur)
	} else if state == 1 {
		t.Fatalf("%s: command %q has no ----", path, cur.Cmd)
	}
	return blocks
}

// Run replays the script at path: exec runs one command and returns its
// output lines. Each mismatch is an error of t; with rewrite the file gets
// the actual output instead.
func Run(t *testing.T, path string, rewrite bool, exec func(cmd string) []string) {
	t.Helper()
	var out strings.Builder
	for _, b := range Parse(t, path) {
		got := exec(b.Cmd)
		for _, c := range b.Comments {
			out.WriteString(c + "\n")
		}
		out.WriteString(b.Cmd + "\n----\n")
		for _, l := range got {
			out.WriteString(l + "\n")
		}
		out.WriteString("\n")
		if !rewrite && strings.Join(got, "\n") != strings.Join(b.Want, "\n") {
			t.Errorf("%s: %s\n got:\n\t%s\nwant:\n\t%s", path, b.Cmd, strings.Join(got, "\n\t"), strings.Join(b.Want, "\n\t"))
		}
	}
	if rewrite {
		if err := os.WriteFile(path, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Each runs every script matching pattern as a subtest named after the
// file, with run.
func Each(t *testing.T, pattern string, run func(t *testing.T, path string)) {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("no trace scripts match %s: %v", pattern, err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { run(t, f) })
	}
}
