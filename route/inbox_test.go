package route

import "testing"

// A stamp runs at most once in its sender's current epoch: the same stamp
// arriving again — not marked as sent again (a member replaying a frame
// it carried) — is a repeat, dropped and counted, whether its first copy
// was released or is held. Before, a replayed stamp behind its turn was
// released again as late.
func TestAStampThatComesTwiceRunsOnce(t *testing.T) {
	var in Inbox[string]
	a := []byte("a")
	offer := func(seq uint64) Step {
		step, _ := in.Offer(a, Stamp{Epoch: 7, Seq: seq}, false, false, "m", 0)
		if step == StepAdmit {
			in.Admitted(a, Stamp{Epoch: 7, Seq: seq}, 0)
		}
		return step
	}
	if s := offer(1); s != StepAdmit {
		t.Fatalf("first copy of 1: %v", s)
	}
	if s := offer(1); s != StepRepeat {
		t.Fatalf("second copy of 1 (released): %v, want a repeat", s)
	}
	if s := offer(3); s != StepHeld {
		t.Fatalf("first copy of 3: %v, want held", s)
	}
	if s := offer(3); s != StepRepeat {
		t.Fatalf("second copy of 3 (held): %v, want a repeat", s)
	}
	if s := offer(2); s != StepAdmit {
		t.Fatalf("2: %v", s)
	}
	if got := in.Order().TakeCounts().Repeats; got != 2 {
		t.Fatalf("%d repeats counted, want 2", got)
	}
	// A skip notice for a stamp released already changes nothing and is
	// not a repeat: it runs nothing either way.
	if s, _ := in.Offer(a, Stamp{Epoch: 7, Seq: 1}, true, false, "skip", 0); s != StepSkipped {
		t.Fatalf("a skip notice behind its turn: %v", s)
	}
}
