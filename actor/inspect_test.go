package actor

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/payload"
)

// Inspect answers from the host that runs the object, in a turn of its
// own: its generations, when it activated, the messages it ran (not the
// inspections) and when the last ended, what is queued behind the
// inspection, its moves from that host, and the kind's summary. An
// object that runs nowhere is ErrNotActive, and is not activated.
func TestInspectSaysWhereAnObjectRunsAndHow(t *testing.T) {
	g := newGates()
	kind := func() *Kind[Counter] {
		k := movableKind(g)
		k.Summarize(func(c *Counter) string { return "n=" + strconv.Itoa(c.N) })
		return k
	}
	n := NewNetwork(nil)
	a := startHost(t, n.With(Config{Name: "a", Logger: quietLogger()}), kind())
	b := startHost(t, n.With(Config{Name: "b", Logger: quietLogger()}), kind())
	waitViews(t, a, b)
	ref := Ref{"counter", "inspected"}

	if _, err := b.Inspect(bg, ref); !errors.Is(err, ErrNotActive) {
		t.Fatalf("Inspect of an object never sent to: %v, want ErrNotActive", err)
	}
	if _, err := a.Locate(bg, ref); !errors.Is(err, ErrNotActive) {
		t.Fatalf("after an Inspect, Locate: %v, want ErrNotActive (an inspection activates nothing)", err)
	}

	before := time.Now()
	for range 5 {
		if err := Tell(bg, a, ref, Inc{By: 2}); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := Ask[Get, int](bg, a, ref, Get{}); err != nil || got != 10 {
		t.Fatalf("Get: %d, %v", got, err)
	}
	in, err := b.Inspect(bg, ref)
	if err != nil {
		t.Fatal(err)
	}
	loc, err := b.Locate(bg, ref)
	if err != nil {
		t.Fatal(err)
	}
	if in.Ref != ref || in.Host != "a" || in.ObjectGeneration != loc.ObjectGeneration || in.OwnerGeneration != loc.OwnerGeneration {
		t.Fatalf("inspection %+v; want %v on a at %+v", in, ref, loc)
	}
	if in.Turns != 6 || in.Queued != 0 || in.Summary != "n=10" || len(in.Moves) != 0 {
		t.Fatalf("inspection %+v: want 6 turns, nothing queued, summary n=10, no move", in)
	}
	if in.Since.Before(before.Add(-time.Second)) || in.LastTurn.Before(in.Since) || in.LastTurn.After(time.Now()) {
		t.Fatalf("inspection %+v: want the activation after %v and the last turn between it and now", in, before)
	}
	if again, err := a.Inspect(bg, ref); err != nil || again.Turns != 6 || !again.LastTurn.Equal(in.LastTurn) {
		t.Fatalf("a second inspection: %+v, %v; want the same 6 turns and last turn (inspections are not counted)", again, err)
	}

	// What is queued behind the inspection: a blocked turn, three Incs and
	// the inspection queued, then two more Incs.
	if err := Tell(bg, a, ref, Block{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	g.waitStarted(t, "k")
	for range 3 {
		if err := Tell(bg, a, ref, Inc{By: 1}); err != nil {
			t.Fatal(err)
		}
	}
	o := a.owners.kinds["counter"].local(ref.ID)
	type result struct {
		in  Inspection
		err error
	}
	done := make(chan result, 1)
	go func() {
		in, err := a.Inspect(bg, ref)
		done <- result{in, err}
	}()
	waitFor(t, "the inspection to queue behind three Incs", func() bool { return o.mb.Len(mailbox.Application) == 4 })
	for range 2 {
		if err := Tell(bg, a, ref, Inc{By: 1}); err != nil {
			t.Fatal(err)
		}
	}
	g.release("k")
	r := <-done
	if r.err != nil || r.in.Queued != 2 || r.in.Turns != 10 || r.in.Summary != "n=13" {
		t.Fatalf("inspection behind a blocked turn: %+v, %v; want 2 queued behind it, 10 turns, n=13", r.in, r.err)
	}

	// After a move to b and back, a's inspection lists its move to b.
	for _, to := range []*Host{b, a} {
		from := a
		if to == a {
			from = b
		}
		if err := from.Relocate(bg, ref, to.Name()); err != nil {
			t.Fatal(err)
		}
	}
	in, err = b.Inspect(bg, ref)
	if err != nil {
		t.Fatal(err)
	}
	if in.Host != "a" || in.OwnerGeneration != loc.OwnerGeneration+2 || in.Turns != 0 || in.Summary != "n=15" {
		t.Fatalf("after a move to b and back: %+v; want it on a, owner generation %d, no turn since, n=15", in, loc.OwnerGeneration+2)
	}
	if len(in.Moves) != 1 || in.Moves[0].To != "b" || in.Moves[0].Outcome != MoveDone {
		t.Fatalf("after a move to b and back, a's moves of it: %+v; want its move to b", in.Moves)
	}
}

// A summary longer than MaxSummary is cut at a character boundary.
func TestAnInspectionsSummaryIsCutAtMaxSummary(t *testing.T) {
	long := strings.Repeat("é", MaxSummary) // two bytes each
	got := cutSummary(long)
	if len(got) > MaxSummary || !strings.HasSuffix(got, "…") || !strings.HasPrefix(long, strings.TrimSuffix(got, "…")) {
		t.Fatalf("cut summary: %d bytes, %q…; want at most %d, a prefix of whole characters and …", len(got), got[:8], MaxSummary)
	}
	if s := "short"; cutSummary(s) != s {
		t.Fatalf("a short summary changed: %q", cutSummary(s))
	}
}

// Busiest lists the objects that ran the most messages in its window,
// most first, and counts what all of them ran: an object activated in the
// window counts all it ran; inspections are not counted.
func TestBusiestListsTheObjectsThatRanTheMostMessagesInItsWindow(t *testing.T) {
	n := NewNetwork(nil)
	a := startHost(t, n.With(Config{Name: "a", Logger: quietLogger()}), movableKind(newGates()))
	x, y, z, w := Ref{"counter", "x"}, Ref{"counter", "y"}, Ref{"counter", "z"}, Ref{"counter", "w"}
	for _, r := range []Ref{x, y, z} {
		if _, err := Ask[Get, int](bg, a, r, Get{}); err != nil { // activated before the window
			t.Fatal(err)
		}
	}
	tell := func(r Ref, times int) {
		for range times {
			if err := Tell(bg, a, r, Inc{By: 1}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := Ask[Get, int](bg, a, r, Get{}); err != nil { // they ran
			t.Fatal(err)
		}
	}
	a.windowWait = func(context.Context, time.Duration) error {
		tell(x, 5) // 6 turns
		tell(y, 2) // 3
		tell(w, 1) // 2, activated in the window
		if _, err := a.Inspect(bg, z); err != nil {
			t.Error(err)
		}
		return nil
	}
	top, total, err := a.Busiest(bg, 2, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if total != 11 || len(top) != 2 || top[0].Ref != x || top[0].Messages != 6 || top[1].Ref != y || top[1].Messages != 3 ||
		top[0].PerSecond <= 0 || top[0].Queued != 0 {
		t.Fatalf("Busiest: %+v, %d messages; want x 6, y 3 of 11 (w's 2 counted, z's inspection not)", top, total)
	}
	for _, bad := range []struct {
		n      int
		window time.Duration
	}{{2, 0}, {2, MaxBusiestWindow + 1}, {0, time.Second}} {
		if _, _, err := a.Busiest(bg, bad.n, bad.window); payload.KindOf(err) != payload.InvalidOperation {
			t.Fatalf("Busiest(%d, %v): %v, want InvalidOperation", bad.n, bad.window, err)
		}
	}
}
