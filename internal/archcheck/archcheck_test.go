package archcheck

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fixtureRanks ranks the fixture's parts; "gone" names no type; seam, an
// interface ranked above mid, is there to show that calls through it do
// not count.
var fixtureRanks = map[string]int{"low": 0, "mid": 1, "high": 2, "Root": 3, "gone": 5, "seam": 2, "aux": 1}

var (
	fixtureOnce   sync.Once
	fixtureReport *Report
	fixtureErr    error
)

// fixture analyzes testdata/src/fixture once.
func fixture(t *testing.T) *Report {
	t.Helper()
	fixtureOnce.Do(func() {
		fixtureReport, fixtureErr = Analyze(Config{
			Dir:        filepath.Join("testdata", "src", "fixture"),
			ImportPath: "example.com/fixture",
			Ranks:      fixtureRanks,
			Root:       "Root",
			API:        []string{"Handle"},
			LockDoc:    filepath.Join("testdata", "src", "fixture", "LOCK.md"),
		})
	})
	if fixtureErr != nil {
		t.Fatal(fixtureErr)
	}
	return fixtureReport
}

// whats is the What of each site.
func whats(s []Site) []string {
	out := []string{}
	for _, x := range s {
		out = append(out, x.What)
	}
	return out
}

// The counts of the fixture, each worked out by hand from the comments
// in testdata/src/fixture.
func TestFixtureCounts(t *testing.T) {
	r := fixture(t)
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"Parts", len(r.Parts), 6},
		{"Methods", r.Methods, 13},
		{"HoldRoot", len(r.HoldRoot), 4},
		{"HoldRootTypes", len(r.HoldRootTypes), 3},
		{"HoldRootParts", len(r.HoldRootParts), 2},
		{"RootHops", len(r.RootHops), 18},
		{"RootHopsToParts", r.RootHopsToParts, 12},
		{"RootHopsToMethods", r.RootHopsToMethods, 1},
		{"OwnFields", len(r.OwnFields), 13},
		{"OwnFieldSites", len(r.OwnFieldSites), 28},
		{"ForeignFields", len(r.ForeignFields), 7},
		{"ForeignFieldSites", len(r.ForeignFieldSites), 9},
		{"UpwardFields", len(r.UpwardFields), 2},
		{"UpwardCalls", len(r.UpwardCalls), 3},
		{"ForeignLocks", len(r.ForeignLocks), 5},
		{"ForeignUnlocks", len(r.ForeignUnlocks), 5},
		{"Files", len(r.Files), 5},
		{"Edges", len(r.Edges), 10},
		{"LinkedPairs", r.LinkedPairs, 7},
		{"MutualPairs", r.MutualPairs, 3},
		{"LargestSCC", len(r.LargestSCC), 3},
		{"Mutexes", len(r.Mutexes), 7},
		{"MutexesMissing", len(r.MutexesMissing), 1},
		{"MayCall", len(r.MayCall), 2},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %d, want %d", c.name, c.got, c.want)
		}
	}
}

func TestFixtureSites(t *testing.T) {
	r := fixture(t)
	for _, c := range []struct {
		name      string
		got, want []string
	}{
		{"Parts", r.Parts, []string{"Root", "aux", "high", "low", "mid", "seam"}},
		{"MissingParts", r.MissingParts, []string{"gone"}},
		{"HoldRoot", whats(r.HoldRoot), []string{"mid.r", "high.r", "high.cb", "helper.roots"}},
		{"HoldRootTypes", r.HoldRootTypes, []string{"helper", "high", "mid"}},
		{"ForeignFields", r.ForeignFields, []string{"aux.n", "high.state", "low.mu", "low.n", "mid.count", "mid.mu", "tally.hits"}},
		{"OwnFields", r.OwnFields, []string{"high.r", "high.slots", "high.slots.mu", "high.state", "low.n", "low.shards", "lowShard.m", "lowShard.mu", "mid.count", "mid.hd", "mid.mu", "mid.r", "tally.hits"}},
		{"UpwardFields", whats(r.UpwardFields), []string{"mid(1).peek: high(2) high.state", "mid(1).hits: high(2) tally.hits"}},
		{"UpwardCalls", whats(r.UpwardCalls), []string{"mid(1).work: Root(3).Name", "mid(1).poke: high(2).bump", "mid(1).later: high(2).bump"}},
		{"ForeignLocks", whats(r.ForeignLocks), []string{
			"low.register: registry.mu.Lock()", "low.register: globalMu.Lock()",
			"mid.work: low.mu.Lock()", "mid.lockLife: lifecycle.mu.Lock()", "high.lockMid: mid.mu.Lock()"}},
		{"LargestSCC", r.LargestSCC, []string{"b.go", "c.go", "root.go"}},
		{"MutexesMissing", whats(r.MutexesMissing), []string{"mid.mu"}},
		{"Mutexes", whats(r.Mutexes), []string{"low.mu", "lowShard.mu", "mid.mu", "high.slots.mu", "lifecycle.mu", "registry.mu", "globalMu"}},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s:\n got %q\nwant %q", c.name, c.got, c.want)
		}
	}
	if got, want := r.UpwardCalls[0].Pos, "b.go:"+lineOf(t, "b.go", "_ = h.Name()"); got != want {
		t.Errorf("the first upward call is at %s, want %s", got, want)
	}
	want := []MayCall{
		{File: "b.go", Promise: "low.", Parts: []string{"aux", "mid", "seam"}, Receivers: []string{"mid"}, Uses: []string{"high", "low"}},
		{File: "c.go", Promise: "nothing.", Parts: []string{"high"}, Receivers: []string{"high"}, Uses: []string{"mid"}},
	}
	if !reflect.DeepEqual(r.MayCall, want) {
		t.Errorf("MayCall:\n got %+v\nwant %+v", r.MayCall, want)
	}
}

// lineOf is the number of the first line of the fixture's file that
// holds text.
func lineOf(t *testing.T, file, text string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "src", "fixture", file))
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, text) {
			return strconv.Itoa(i + 1)
		}
	}
	t.Fatalf("%s holds no %q", file, text)
	return ""
}

func TestLockDocOptional(t *testing.T) {
	r, err := Analyze(Config{Dir: filepath.Join("testdata", "src", "fixture"), Ranks: fixtureRanks, Root: "Root"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Mutexes) != 7 || r.MutexesMissing != nil {
		t.Errorf("without a lock document: %d mutexes, %d missing; want 7, none", len(r.Mutexes), len(r.MutexesMissing))
	}
	// Without API types, Handle holds the root too.
	if len(r.HoldRoot) != 5 {
		t.Errorf("HoldRoot without API types: %d, want 5", len(r.HoldRoot))
	}
}

func TestNames(t *testing.T) {
	for _, c := range []struct {
		text, name string
		want       bool
	}{
		{"`low.mu` leaf", "low.mu", true},
		{"low.mu", "low.mu", true},
		{"slow.mu", "low.mu", false},
		{"low.mutex", "low.mu", false},
		{"(low.mu)", "low.mu", true},
	} {
		if got := names(c.text, c.name); got != c.want {
			t.Errorf("names(%q, %q) = %v, want %v", c.text, c.name, got, c.want)
		}
	}
}

func TestTarjan(t *testing.T) {
	// 0 -> 1 -> 2 -> 0, 2 -> 3, 3 -> 4 -> 3, 5 alone.
	comps := tarjan([][]int{{1}, {2}, {0, 3}, {4}, {3}, {}})
	sizes := map[int]int{}
	for _, c := range comps {
		sizes[len(c)]++
	}
	if !reflect.DeepEqual(sizes, map[int]int{3: 1, 2: 1, 1: 1}) {
		t.Errorf("components %v", comps)
	}
}

func TestLargestFiles(t *testing.T) {
	root := t.TempDir()
	write := func(path string, lines int, head string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		body := head + "package x\n" + strings.Repeat("//\n", lines-1-strings.Count(head, "\n"))
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.go", 3, "")
	write("sub/c.go", 5, "// Package x.\n")
	write("sub/d.go", 4, "")
	write("b_test.go", 50, "")
	write("gen.go", 60, "// Code generated by hand. DO NOT EDIT.\n\n")
	write("testdata/t.go", 70, "")
	write("vendor/v.go", 80, "")
	write(".git/g.go", 90, "")
	write("notes.txt", 100, "")
	got, err := LargestFiles(root, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []FileSize{{"sub/c.go", 5}, {"sub/d.go", 4}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("LargestFiles(2) = %v, want %v", got, want)
	}
	all, err := LargestFiles(root, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 {
		t.Errorf("LargestFiles(0) = %v, want 3 files", all)
	}
}

func TestRanksFromFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "r.go")
	src := "package x\n\nvar rank = map[string]int{\n\t\"a\": 0, \"b\": 1,\n\t// c\n\t\"c\": 0x2,\n}\n\nvar bad = map[string]int{\"a\": n}\n"
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := RanksFromFile(p, "rank")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"a": 0, "b": 1, "c": 2}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if _, err := RanksFromFile(p, "bad"); err == nil {
		t.Error("a value that is not a literal: no error")
	}
	if _, err := RanksFromFile(p, "none"); err == nil {
		t.Error("no such variable: no error")
	}
}
