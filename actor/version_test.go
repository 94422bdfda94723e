package actor

import (
	"strconv"
	"testing"
)

// Versions compare part by part, numbers as numbers; "" is the oldest.
func TestVersionsCompareNumbersAsNumbers(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"v1.9.2", "v1.10.0", -1},
		{"1.2", "1.2.1", -1},
		{"v2", "v2", 0},
		{"", "v0.0.1", -1},
		{"v1.2.0-rc1", "v1.2.0-rc2", -1},
		{"2026.12.01", "2026.9.30", 1},
		{"abc", "abd", -1},
	} {
		if got := compareVersions(c.a, c.b); got != c.want {
			t.Errorf("compareVersions(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := compareVersions(c.b, c.a); got != -c.want {
			t.Errorf("compareVersions(%q, %q) = %d, want %d", c.b, c.a, got, -c.want)
		}
	}
}

// During a rolling upgrade new objects go to hosts of the newest version
// only — sent from an older host too (PlaceLocal) — and a drain moves
// objects onto the newest version only, so that none moves twice; a move
// to an older version is refused.
func TestWhileVersionsAreMixedObjectsGoToTheNewestAndMoveOnce(t *testing.T) {
	n := NewNetwork(nil)
	start := func(name, version string) *Host {
		return startHost(t, n.With(Config{Name: name, Logger: quietLogger(), AppVersion: version}), movableKind(newGates()))
	}
	old1, old2 := start("old1", "v1.9.0"), start("old2", "v1.9.0")
	waitViews(t, old1, old2)
	for i := range 20 {
		if err := Tell(bg, old1, Ref{"counter", "a" + strconv.Itoa(i)}, Inc{By: 1}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "old1's objects to activate there", func() bool { return old1.Stats().OwnersActive == 20 })
	new1, new2 := start("new1", "v1.10.0"), start("new2", "v1.10.0")
	waitViews(t, old1, old2, new1, new2)
	// A new object sent to from old2 is placed on a new host.
	for i := range 10 {
		ref := Ref{"counter", "b" + strconv.Itoa(i)}
		if _, err := Ask[Get, int](bg, old2, ref, Get{}); err != nil {
			t.Fatal(err)
		}
		if loc, err := old2.Locate(bg, ref); err != nil || (loc.Host != "new1" && loc.Host != "new2") {
			t.Fatalf("%v sent to from old2 lives on %+v (%v), want a host of v1.10.0", ref, loc, err)
		}
	}
	// old1 drains: its objects go to the new hosts, not to old2.
	if err := old1.Drain(bg); err != nil {
		t.Fatal(err)
	}
	if in := countOf(old2, EventMovedIn, "old1"); in != 0 {
		t.Fatalf("old2 took %d of old1's objects during a rollout, want 0", in)
	}
	for i := range 20 {
		ref := Ref{"counter", "a" + strconv.Itoa(i)}
		if got, err := Ask[Get, int](bg, new1, ref, Get{}); err != nil || got != 1 {
			t.Fatalf("%v after old1's drain = %d, %v; want its state", ref, got, err)
		}
		if loc, _ := new1.Locate(bg, ref); loc.Host != "new1" && loc.Host != "new2" {
			t.Fatalf("%v after old1's drain lives on %s, want a host of v1.10.0", ref, loc.Host)
		}
	}
	// A move from the newest version to an older one is refused.
	ref := Ref{"counter", "a0"}
	loc, _ := new1.Locate(bg, ref)
	from := map[string]*Host{"new1": new1, "new2": new2}[loc.Host]
	if err := from.Relocate(bg, ref, "old2"); err == nil {
		t.Fatalf("a move from %s (v1.10.0) to old2 (v1.9.0) was not refused", loc.Host)
	}
}
