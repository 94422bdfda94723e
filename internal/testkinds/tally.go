// Package testkinds holds the object kind that berth's integration suites
// (tests, tests/schedule, and the child processes of the tests across OS
// processes) run: a tally of numbered messages per sender, which records
// every order violation it sees.
//
// Invariants: a Tally's Last only grows per sender; a message that is not
// the next number of its sender is recorded in Bad, whatever else it does.
package testkinds

import (
	"bytes"
	"fmt"
	"sync/atomic"

	"github.com/berthrt/berth/actor"
)

// Tally is a relocating object's state: per sender, the last sequence
// number it ran and how many messages it ran, and every order violation.
type Tally struct {
	Last  map[string]int `json:"last"`
	Count map[string]int `json:"count"`
	Bad   []string       `json:"bad"`
}

// Numbered is one message of a sender, numbered per object from 1.
type Numbered struct {
	Sender string
	Seq    int
}

// NumberedAsk is a numbered message sent as a request; the reply is the
// sequence number the object ran.
type NumberedAsk struct {
	Sender string
	Seq    int
}

// ReadTally asks for the Tally.
type ReadTally struct{}

// HangAsk is a request whose handler never replies: it runs until its
// host closes (or its process dies). Hanging counts the ones running.
type HangAsk struct{}

// Hanging is how many HangAsk handlers run in this process.
var Hanging atomic.Int64

// Padded is a numbered message carrying bytes besides its number (the
// tests of large messages): Pad is Padding(Seq, len(Pad)).
type Padded struct {
	Sender string
	Seq    int
	Pad    []byte
}

// Padding is the pad of Padded message seq, n bytes (each message's own,
// so that one delivered in another's place shows).
func Padding(seq, n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 997 {
		b[i] = byte(seq + i)
	}
	return b
}

func (t *Tally) run(sender string, seq int) {
	if seq != t.Last[sender]+1 {
		t.Bad = append(t.Bad, fmt.Sprintf("%s: %d after %d", sender, seq, t.Last[sender]))
	}
	if seq > t.Last[sender] {
		t.Last[sender] = seq
	}
	t.Count[sender]++
}

// TallyKind returns the kind "tally" of Tally objects, whose state is
// preserved across moves (JSON).
func TallyKind() *actor.Kind[Tally] {
	k := actor.NewKind("tally", func(*actor.Context, string) (*Tally, error) {
		return &Tally{Last: map[string]int{}, Count: map[string]int{}}, nil
	})
	actor.Handle(k, func(ctx *actor.Context, t *Tally, m Numbered) error { t.run(m.Sender, m.Seq); return nil })
	actor.HandleRequest(k, func(ctx *actor.Context, t *Tally, m NumberedAsk) (int, error) {
		t.run(m.Sender, m.Seq)
		return m.Seq, nil
	})
	actor.HandleRequest(k, func(ctx *actor.Context, t *Tally, _ ReadTally) (Tally, error) { return *t, nil })
	actor.HandleRequest(k, func(ctx *actor.Context, t *Tally, _ HangAsk) (int, error) {
		Hanging.Add(1)
		defer Hanging.Add(-1)
		<-ctx.Done()
		return 0, ctx.Err()
	})
	actor.Handle(k, func(ctx *actor.Context, t *Tally, m Padded) error {
		if !bytes.Equal(m.Pad, Padding(m.Seq, len(m.Pad))) {
			t.Bad = append(t.Bad, fmt.Sprintf("%s: %d: %d bytes, not as sent", m.Sender, m.Seq, len(m.Pad)))
		}
		t.run(m.Sender, m.Seq)
		return nil
	})
	k.PreserveStateJSON()
	return k
}
