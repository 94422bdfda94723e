// Package counter is the kind of object the berth command's demos and
// `berth node` host: a counter of numbered messages per sender, which
// notices any message that runs out of order. A program that sends to a
// cluster of `berth node` processes registers Kind on its own host (a
// gateway, Config.Gateway) for the message types.
//
// Invariant: an object's state counts, per sender, every Add it ran and
// the highest sequence number among them; an Add whose number is not one
// more than the sender's last is counted in OutOfOrder. Its state moves
// with it (PreserveStateJSON).
package counter

import (
	"fmt"

	"github.com/berthrt/berth/actor"
)

// Name is the kind's name: refer to an object as actor.Ref{Kind: Name, ID: ...}.
const Name = "counter"

// Counter is an object's state: per sender, the last sequence number it ran
// and how many messages it ran, and how often the order was broken.
type Counter struct {
	Last       map[string]int `json:"last"`
	Count      map[string]int `json:"count"`
	OutOfOrder int            `json:"ooo"`
	Breaks     []string       `json:"breaks,omitempty"` // the first few order breaks
}

// Add is one numbered message from a sender: senders number their
// messages to each object from 1.
type Add struct {
	Sender string
	Seq    int
}

// Read asks for the counter's state (a request: answered with Counter).
type Read struct{}

// Kind returns the counter kind: Add (a Tell) and Read (an Ask).
func Kind() *actor.Kind[Counter] {
	k := actor.NewKind(Name, func(*actor.Context, string) (*Counter, error) {
		return &Counter{Last: map[string]int{}, Count: map[string]int{}}, nil
	})
	actor.Handle(k, func(ctx *actor.Context, c *Counter, a Add) error {
		if a.Seq != c.Last[a.Sender]+1 {
			c.OutOfOrder++
			if len(c.Breaks) < 4 {
				c.Breaks = append(c.Breaks, fmt.Sprintf("%s: %d after %d", a.Sender, a.Seq, c.Last[a.Sender]))
			}
		}
		if a.Seq > c.Last[a.Sender] {
			c.Last[a.Sender] = a.Seq
		}
		c.Count[a.Sender]++
		return nil
	})
	actor.HandleRequest(k, func(ctx *actor.Context, c *Counter, _ Read) (Counter, error) { return *c, nil })
	k.PreserveStateJSON()                 // the state moves with the object
	k.Summarize(func(c *Counter) string { // berth admin inspect shows it
		total := 0
		for _, n := range c.Count {
			total += n
		}
		return fmt.Sprintf("%d adds from %d senders, %d out of order", total, len(c.Count), c.OutOfOrder)
	})
	return k
}
