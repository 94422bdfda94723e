package route

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

var seed = flag.Uint64("seed", 0, "seed of the random order tests (0: from the clock)")

func TestOrderReleaseInSequenceAllocatesNothing(t *testing.T) {
	var o Order[string]
	sender := []byte("host-a")
	st := Stamp{Epoch: 7, Seq: 1}
	o.Released(sender, st, 0) // the sender is known from here on
	st.Seq++
	allocs := testing.AllocsPerRun(1000, func() {
		if v := o.Check(sender, st); v != Release {
			t.Fatalf("verdict %v for %v", v, st)
		}
		o.Released(sender, st, 1)
		if _, ok := o.Next(); ok {
			t.Fatal("something ready")
		}
		st.Seq++
	})
	if allocs != 0 {
		t.Errorf("Check+Released for an in-order message allocates %v times, want 0", allocs)
	}
}

func TestStreamsNextToAllocatesNothing(t *testing.T) {
	s := NewStreams(1, 1, int64(time.Minute))
	obj := Object{Kind: "k", ID: "x"}
	to := Hand{Host: "b", Run: 7}
	failed := func(Hand) bool { return false }
	s.NextTo(obj, 0, to, failed)
	allocs := testing.AllocsPerRun(1000, func() { s.NextTo(obj, 1, to, failed) })
	if allocs != 0 {
		t.Errorf("Streams.NextTo for a known object and host allocates %v times, want 0", allocs)
	}
}

func TestStreamsNextAllocatesNothing(t *testing.T) {
	s := NewStreams(1, 1, int64(time.Minute))
	o := Object{Kind: "counter", ID: "42"}
	s.Next(o, 0)
	var now int64
	allocs := testing.AllocsPerRun(1000, func() {
		now++
		if st := s.Next(o, now); st.Epoch != 1 {
			t.Fatalf("stamp %v", st)
		}
	})
	if allocs != 0 {
		t.Errorf("Streams.Next for a known object allocates %v times, want 0", allocs)
	}
}

// TestOrderRandomPermutations delivers the messages 1..N of three senders,
// some of them replaced by skip notices, in random orders: every message
// runs exactly once, each sender's in sequence order, and nothing is left
// held.
func TestOrderRandomPermutations(t *testing.T) {
	s := *seed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -seed %d)", s, s)
	rng := rand.New(rand.NewPCG(s, s>>32))
	senders := []string{"a", "b", "c"}
	type event struct {
		sender string
		seq    uint64
		skip   bool
	}
	for round := 0; round < 300; round++ {
		n := 1 + rng.IntN(40)
		var events []event
		skips := 0
		for _, snd := range senders {
			for seq := uint64(1); seq <= uint64(n); seq++ {
				skip := rng.IntN(5) == 0
				if skip {
					skips++
				}
				events = append(events, event{snd, seq, skip})
			}
		}
		rng.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })

		var o Order[string]
		if rng.IntN(2) == 0 {
			o.MaxHeld = 1 + rng.IntN(4) // the bound gives nothing up
		}
		ran := map[string][]uint64{}
		dropped := 0
		take := func(item string) {
			if strings.HasPrefix(item, "skip") {
				dropped++
				return
			}
			var snd string
			var seq uint64
			if _, err := fmt.Sscanf(item, "%1s%d", &snd, &seq); err != nil {
				t.Fatalf("item %q: %v", item, err)
			}
			ran[snd] = append(ran[snd], seq)
		}
		drain := func() {
			for it, ok := o.Next(); ok; it, ok = o.Next() {
				take(it)
			}
		}
		for i, e := range events {
			now := int64(i)
			st := Stamp{Epoch: 1, Seq: e.seq}
			item := fmt.Sprintf("%s%d", e.sender, e.seq)
			if e.skip {
				o.Skip([]byte(e.sender), st, "skip"+item, now)
				drain()
				continue
			}
			switch v := o.Check([]byte(e.sender), st); v {
			case Release:
				take(item)
				o.Released([]byte(e.sender), st, now)
			case Hold:
				o.Hold([]byte(e.sender), st, item, now)
			default:
				t.Fatalf("seed %d round %d: verdict %v for %s", s, round, v, item)
			}
			drain()
		}
		for _, snd := range senders {
			var want []uint64
			for _, e := range events {
				if e.sender == snd && !e.skip {
					want = append(want, e.seq)
				}
			}
			slices.Sort(want)
			if fmt.Sprint(ran[snd]) != fmt.Sprint(want) {
				t.Fatalf("seed %d round %d: sender %s ran %v, want %v", s, round, snd, ran[snd], want)
			}
			if _, next := o.Expected(snd); next != uint64(n)+1 {
				t.Fatalf("seed %d round %d: sender %s expects %d, want %d", s, round, snd, next, n+1)
			}
		}
		if o.Held() != 0 {
			t.Fatalf("seed %d round %d: %d still held", s, round, o.Held())
		}
		c := o.TakeCounts()
		if c.GapsClosed != 0 || c.Late != 0 || c.Skipped != uint64(skips) {
			t.Fatalf("seed %d round %d: counts %+v, %d held notices dropped, %d skips", s, round, c, dropped, skips)
		}
	}
}
