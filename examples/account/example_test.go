package account_test

import (
	"context"
	"fmt"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/examples/account"
	"github.com/berthrt/berth/relocation"
)

// An account's balance outlives its host: the next host on the same store
// activates it with its last durable state.
func Example() {
	ctx := context.Background()
	store := relocation.NewMemoryStore(nil) // also the state store
	ref := actor.Ref{Kind: account.Name, ID: "alice"}

	first, _ := actor.NewHost(actor.Config{Name: "first", Store: store})
	_ = first.Register(account.Kind())
	_ = first.Start()
	for seq := 1; seq <= 3; seq++ {
		_, _ = actor.Ask[account.Deposit, int64](ctx, first, ref, account.Deposit{Sender: "me", Seq: seq, Amount: 10})
	}
	_ = first.Stop(ctx)
	_ = first.Close()

	second, _ := actor.NewHost(actor.Config{Name: "second", Store: store})
	_ = second.Register(account.Kind())
	_ = second.Start()
	defer second.Close()
	// Deposit 3 again (its reply was lost, say): it applies once.
	bal, _ := actor.Ask[account.Deposit, int64](ctx, second, ref, account.Deposit{Sender: "me", Seq: 3, Amount: 10})
	fmt.Println("balance", bal)
	// Output: balance 30
}
