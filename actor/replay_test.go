package actor

import (
	"testing"

	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/transport"
)

// A member that sends the same stamped frame again, as a new link item (a
// replay: the link's own numbering does not catch it), has it run once:
// the second copy is a repeat of a stamp the object's order released
// already, dropped. Before, it ran a second time, as late.
func TestAReplayedFrameRunsOnce(t *testing.T) {
	n := NewNetwork(nil)
	b := startHost(t, n.With(Config{Name: "b", Logger: quietLogger()}), counterKind(newGates()))
	x := rawLink(t, n, "x")
	ref := Ref{"counter", "replayed"}
	hd := payload.Header{Origin: "x", Epoch: 99, Seq: 1}
	sendFrame(t, x, "b", transport.Frame, b, ref, hd)
	waitFor(t, "the first copy to run", func() bool {
		v, err := Ask[Get, int](bg, b, ref, Get{})
		return err == nil && v == 1
	})
	for range 3 {
		sendFrame(t, x, "b", transport.Frame, b, ref, hd)
	}
	hd.Seq = 2 // a fact that the copies before it were taken
	sendFrame(t, x, "b", transport.Frame, b, ref, hd)
	waitFor(t, "the next stamp to run", func() bool {
		v, err := Ask[Get, int](bg, b, ref, Get{})
		return err == nil && v >= 2
	})
	if v, err := Ask[Get, int](bg, b, ref, Get{}); err != nil || v != 2 {
		t.Fatalf("the counter after one frame sent four times and the next once: %d, %v; want 2", v, err)
	}
}
