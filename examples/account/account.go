// Package account is the persistent kind of the berth command's demo: a
// balance that survives the crash of its host. Deposits are numbered per
// sender, so that a deposit sent again after a lost reply applies once.
//
// Invariant: an account's state holds, per sender, the highest deposit
// number it applied; a deposit with the next number applies, one already
// applied changes nothing (and is not written again), and one past the
// next is applied and counted in Holes — a deposit before it was lost.
// Its state is durable (PersistStateJSON): an answered deposit is never
// lost, whatever crashes.
package account

import (
	"fmt"

	"github.com/berthrt/berth/actor"
)

// Name is the kind's name: refer to an account as actor.Ref{Kind: Name, ID: ...}.
const Name = "account"

// Account is an account's state.
type Account struct {
	Balance int64          `json:"balance"`
	Last    map[string]int `json:"last"`    // per sender: the highest deposit number applied
	Applied int            `json:"applied"` // deposits applied
	Holes   int            `json:"holes"`   // deposits applied past a missing one
}

// Deposit adds Amount, once: senders number their deposits to each
// account from 1 and send a deposit again, with its number, until it is
// answered. Answered with the balance (an Ask).
type Deposit struct {
	Sender string
	Seq    int
	Amount int64
}

// Read asks for the account's state (answered with Account).
type Read struct{}

// Kind returns the account kind: Deposit and Read, both requests.
func Kind() *actor.Kind[Account] {
	k := actor.NewKind(Name, func(*actor.Context, string) (*Account, error) {
		return &Account{Last: map[string]int{}}, nil
	})
	actor.HandleRequest(k, func(ctx *actor.Context, a *Account, d Deposit) (int64, error) {
		last := a.Last[d.Sender]
		if d.Seq <= last {
			ctx.StateUnchanged() // sent again after its reply was lost: applied already
			return a.Balance, nil
		}
		if d.Seq > last+1 {
			a.Holes++
		}
		a.Last[d.Sender] = d.Seq
		a.Balance += d.Amount
		a.Applied++
		return a.Balance, nil
	})
	actor.HandleRequest(k, func(ctx *actor.Context, a *Account, _ Read) (Account, error) {
		ctx.StateUnchanged()
		return *a, nil
	})
	k.PersistStateJSON()
	k.Summarize(func(a *Account) string { // berth admin inspect shows it
		return fmt.Sprintf("balance %d after %d deposits from %d senders", a.Balance, a.Applied, len(a.Last))
	})
	return k
}
