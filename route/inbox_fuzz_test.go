package route

import (
	"fmt"
	"testing"
)

// FuzzInbox drives an Inbox with arbitrary arrivals, as a peer's frames
// would bring them (any of three senders, any order, skip notices),
// interleaved with freezes, thaws, snapshot round trips (moves), shuts
// and gap closes, with or without failure facts. Each (sender, number) is
// sent at most once, as a message or a skip notice — and a message may
// come again, marked as sent again (a sender's new run). Whatever the
// input, nothing panics, no message vanishes (each offered one is
// admitted, ended, held or kept), and without a failure fact each
// sender's messages are admitted in strictly increasing order — none
// twice —, nothing is given up on and nothing runs late.
func FuzzInbox(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 0, 3, 0, 0, 2, 5, 6, 0}, false)
	f.Add([]byte{0, 1, 2, 3, 0, 0, 0, 1, 5, 4, 0, 0, 5, 9, 9, 0, 1, 1}, true)
	f.Add([]byte{0, 3, 1, 8, 3, 1, 0, 0, 1, 8, 0, 1, 8, 3, 1, 6, 0, 0, 8, 3, 1}, false)
	f.Fuzz(func(t *testing.T, ops []byte, facts bool) {
		newInbox := func() *Inbox[string] {
			in := &Inbox[string]{}
			in.Order().MaxHeld = 3
			return in
		}
		in := newInbox()
		type arrival struct {
			sender string
			seq    uint64
			skip   bool
			again  bool
		}
		name := func(a arrival) string { return fmt.Sprintf("%v/%s/%d/%v", a.skip, a.sender, a.seq, a.again) }
		byName := map[string]arrival{}
		sent := map[string]bool{}
		last := map[string]uint64{}
		var kept []arrival
		var hostFacts []Fact
		offered, admitted, ended := 0, 0, 0
		now := int64(0)
		admit := func(it string) {
			a := byName[it]
			if a.skip { // a skip notice whose turn came: the driver ends it
				ended++
				return
			}
			admitted++
			if !facts && a.seq <= last[a.sender] {
				if a.again {
					t.Fatalf("%s admitted again after %d without a failure fact: it ran twice", it, last[a.sender])
				}
				t.Fatalf("%s admitted after %d without a failure fact", it, last[a.sender])
			}
			last[a.sender] = max(last[a.sender], a.seq)
		}
		drain := func() {
			for it, ok := in.Next(); ok; it, ok = in.Next() {
				admit(it)
			}
		}
		offer := func(a arrival) {
			it := name(a)
			byName[it] = a
			st := Stamp{Epoch: 1, Seq: a.seq}
			switch step, _ := in.Offer([]byte(a.sender), st, a.skip, a.again, it, now); step {
			case StepAdmit:
				admit(it)
				in.Admitted([]byte(a.sender), st, now)
			case StepKeep:
				kept = append(kept, a)
			case StepSkipped, StepRefuse, StepRepeat:
				ended++
			case StepHeld:
			default:
				t.Fatalf("step %v for %s", step, it)
			}
			drain()
		}
		for i := 0; i+2 < len(ops); i += 3 {
			now += int64(ops[i+2])
			switch ops[i] % 9 {
			case 0, 1, 2: // a message, or (2) a skip notice
				a := arrival{sender: string(rune('a' + ops[i+1]%3)), seq: 1 + uint64(ops[i+1]/3%24), skip: ops[i]%9 == 2}
				if k := fmt.Sprint(a.sender, a.seq); !sent[k] {
					sent[k] = true
					offered++
					offer(a)
				}
			case 8: // a message sent before comes again, marked
				a := arrival{sender: string(rune('a' + ops[i+1]%3)), seq: 1 + uint64(ops[i+1]/3%24), again: true}
				if k := fmt.Sprint(a.sender, a.seq); sent[k] && !byName[name(arrival{sender: a.sender, seq: a.seq, skip: true})].skip {
					offered++
					offer(a)
				}
			case 3:
				in.Freeze()
			case 4: // thaw, then offer what was kept, in arrival order
				in.Thaw()
				k := kept
				kept = nil
				for _, a := range k {
					offer(a)
				}
			case 5:
				if facts {
					hostFacts = append(hostFacts, Fact{At: now, Window: int64(ops[i+1]), Wait: int64(ops[i+2])})
				}
				in.CloseGaps(now, hostFacts)
				drain()
			case 6: // a move: the order state through its encoding
				if in.State() != Open {
					continue
				}
				dec, err := DecodeSnapshot(AppendSnapshot(nil, in.Order().Snapshot(now, func(s string) []byte { return []byte(s) })))
				if err != nil {
					t.Fatal(err)
				}
				in = newInbox()
				in.Order().Restore(dec, now, func(_ uint64, b []byte) (string, bool) { return string(b), true })
			case 7:
				if ops[i+1] == 0xff {
					ended += len(in.Shut())
				}
			}
		}
		c := in.Order().TakeCounts()
		if !facts && (c.GapsClosed != 0 || c.Late != 0) {
			t.Fatalf("without a failure fact: %d gaps closed, %d late", c.GapsClosed, c.Late)
		}
		if got := admitted + ended + in.Held() + len(kept); got != offered {
			t.Fatalf("offered %d; admitted %d + ended %d + held %d + kept %d = %d", offered, admitted, ended, in.Held(), len(kept), got)
		}
	})
}
