package membership_test

import (
	"context"
	"fmt"
	"time"

	"github.com/berthrt/berth/membership"
)

// A host joins, keeps its lease by the local-time rule, and watches its
// peers. Peers are learned only from the membership.
func Example() {
	ctx := context.Background()
	m := membership.NewMemory(membership.Options{}) // real clock, DefaultTTL
	defer m.Close()

	events, err := m.Watch(ctx)
	if err != nil {
		panic(err)
	}
	first := <-events
	fmt.Println(first.Type, len(first.Members))

	self := membership.Member{Name: "host-a", Address: "10.0.0.1:7000", Kinds: []string{"cart"}, LeaseGen: 1}
	sent := time.Now() // read the local clock before sending
	granted, err := m.Join(ctx, self)
	if err != nil {
		panic(err)
	}
	lease := membership.LocalLease{Margin: membership.DefaultMargin}.Renewed(sent, granted)
	ev := <-events
	fmt.Println(ev.Type, ev.Member.Name, ev.Member.State, ev.Member.Kinds)

	// The renew loop, here three quick rounds (a host ticks every
	// DefaultRenew and runs the loop as a service until it stops).
	lease, err = renewLoop(ctx, m, self, lease, time.Millisecond, 3)
	fmt.Println("renewed, may start turns:", lease.Valid(time.Now()), err)

	if _, err := m.SetState(ctx, self.Name, self.LeaseGen, membership.Draining); err != nil {
		panic(err)
	}
	ev = <-events
	fmt.Println(ev.Type, ev.Member.Name, ev.From, "->", ev.Member.State)
	if err := m.Leave(ctx, self.Name, self.LeaseGen); err != nil {
		panic(err)
	}
	ev = <-events
	fmt.Println(ev.Type, ev.Member.Name)
	// Output:
	// sync 0
	// joined host-a serving [cart]
	// renewed, may start turns: true <nil>
	// state changed host-a serving -> draining
	// left host-a
}

// renewLoop renews self's lease every period, rounds times, and returns the
// lease as the host now holds it. Each round dates the lease from the
// local time the renewal was sent, and only if it succeeded; before each
// turn the host checks lease.Valid(time.Now()) and starts no turn past the
// deadline.
func renewLoop(ctx context.Context, m membership.Membership, self membership.Member, lease membership.LocalLease, period time.Duration, rounds int) (membership.LocalLease, error) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for range rounds {
		select {
		case <-ctx.Done():
			return lease, ctx.Err()
		case <-tick.C:
		}
		sent := time.Now()
		granted, err := m.Renew(ctx, self.Name, self.LeaseGen)
		if err != nil {
			// Keep the old lease: it runs out at its deadline on its own.
			// If the store says the lease expired, the host stops and
			// joins again with a new generation.
			return lease, err
		}
		lease = lease.Renewed(sent, granted)
	}
	return lease, nil
}

// The deadline is the local send time plus the TTL minus the margin.
func ExampleLocalLease() {
	sent := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	l := membership.LocalLease{Sent: sent, TTL: membership.DefaultTTL, Margin: membership.DefaultMargin}
	fmt.Println(l.Deadline().Format(time.TimeOnly))
	fmt.Println(l.Valid(sent.Add(2*time.Second)), l.Valid(sent.Add(2500*time.Millisecond)))
	// Output:
	// 12:00:02
	// true false
}
