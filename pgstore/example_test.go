package pgstore_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/berthrt/berth/internal/pgtest"
	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/pgstore"
	"github.com/berthrt/berth/relocation"
	"github.com/jackc/pgx/v5/pgxpool"
)

// examplePool returns a pool on a fresh database and a function that
// closes it and drops the database.
func examplePool() (*pgxpool.Pool, func()) {
	url, drop, err := pgtest.NewDatabase()
	if err != nil {
		panic(err)
	}
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		panic(err)
	}
	return pool, func() { pool.Close(); drop() }
}

// A host renews its lease, activates an object (Reserve, Commit), and a
// second host moves it (NewOwner); a stale move finds a newer owner.
func ExampleOpen() {
	pool, done := examplePool()
	defer done()
	ctx := context.Background()
	s, err := pgstore.Open(ctx, pool, pgstore.Options{})
	if err != nil {
		panic(err)
	}
	for _, host := range []string{"A", "B"} {
		if _, err := s.RenewLease(ctx, host, 1, 0); err != nil {
			panic(err)
		}
	}
	obj := relocation.Object{Kind: "cart", ID: "42"}
	r, err := s.Reserve(ctx, obj, "A")
	if err != nil {
		panic(err)
	}
	r, err = s.Commit(ctx, obj, r.Ownership)
	if err != nil {
		panic(err)
	}
	fmt.Println(r.State, r.Host, r.OwnerGen, r.Version)
	moved, err := s.NewOwner(ctx, obj, r.Ownership, "B")
	if err != nil {
		panic(err)
	}
	fmt.Println(moved.State, moved.Host, moved.OwnerGen, moved.Version)
	_, err = s.NewOwner(ctx, obj, r.Ownership, "A")
	var ce *relocation.ConflictError
	fmt.Println(errors.As(err, &ce), ce.NewerOwner, ce.Current.Host)
	// Output:
	// active A 1 2
	// active B 2 3
	// true true B
}

// Leases run out by the database's clock; a test steps it with a manual
// clock instead of sleeping.
func ExampleStore_Advance() {
	pool, done := examplePool()
	defer done()
	ctx := context.Background()
	s, err := pgstore.Open(ctx, pool, pgstore.Options{ManualClock: true})
	if err != nil {
		panic(err)
	}
	if _, err := s.RenewLease(ctx, "A", 1, 0); err != nil {
		panic(err)
	}
	s.Advance(relocation.LeaseTTL)
	_, err = s.Reserve(ctx, relocation.Object{Kind: "cart", ID: "1"}, "A")
	fmt.Println(errors.Is(err, relocation.ErrLeaseExpired))
	// Output:
	// true
}

// Migrate ahead of a deployment; running it again does nothing.
func ExampleMigrate() {
	pool, done := examplePool()
	defer done()
	ctx := context.Background()
	for range 2 {
		if err := pgstore.Migrate(ctx, pool); err != nil {
			panic(err)
		}
	}
	var v int
	if err := pool.QueryRow(ctx, "SELECT max(version) FROM pgstore_schema_version").Scan(&v); err != nil {
		panic(err)
	}
	fmt.Println(v == pgstore.SchemaVersion())
	// Output:
	// true
}

// A host joins and watches; the watch starts with a Sync and then carries
// every change.
func ExampleOpenMembership() {
	pool, done := examplePool()
	defer done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, err := pgstore.OpenMembership(ctx, pool, pgstore.MembershipOptions{})
	if err != nil {
		panic(err)
	}
	defer m.Close()
	events, err := m.Watch(ctx)
	if err != nil {
		panic(err)
	}
	first := <-events
	fmt.Println(first.Type, len(first.Members))
	self := membership.Member{Name: "host-a", Address: "10.0.0.1:7000", Kinds: []string{"cart"}, LeaseGen: 1}
	granted, err := m.Join(ctx, self)
	if err != nil {
		panic(err)
	}
	fmt.Println(granted.Name, granted.TTL)
	ev := <-events
	fmt.Println(ev.Type, ev.Member.Name, ev.Member.Kinds)
	if _, err := m.SetState(ctx, self.Name, self.LeaseGen, membership.Draining); err != nil {
		panic(err)
	}
	ev = <-events
	fmt.Println(ev.Type, ev.From, "->", ev.Member.State)
	if err := m.Leave(ctx, self.Name, self.LeaseGen); err != nil {
		panic(err)
	}
	ev = <-events
	fmt.Println(ev.Type, ev.Member.Name)
	// Output:
	// sync 0
	// host-a 3.5s
	// joined host-a [cart]
	// state changed serving -> draining
	// left host-a
}

// Expiry is found by the sweep, by the database's clock (here a manual
// one, stepped past the TTL) — while the store hears from its hosts: here
// host-b renews as a live host does, and host-a does not. (A store that
// hears from nobody expires nobody: see membership, "Silences".)
func ExampleMembership_Advance() {
	pool, done := examplePool()
	defer done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, err := pgstore.OpenMembership(ctx, pool, pgstore.MembershipOptions{ManualClock: true})
	if err != nil {
		panic(err)
	}
	defer m.Close()
	for _, name := range []string{"host-a", "host-b"} {
		if _, err := m.Join(ctx, membership.Member{Name: name, LeaseGen: 1}); err != nil {
			panic(err)
		}
	}
	events, err := m.Watch(ctx)
	if err != nil {
		panic(err)
	}
	<-events // the Sync
	for range 5 {
		m.Advance(membership.DefaultTTL / 4)
		if _, err := m.Renew(ctx, "host-b", 1); err != nil {
			panic(err)
		}
	}
	ev := <-events
	fmt.Println(ev.Type, ev.Member.Name)
	_, err = m.Renew(ctx, "host-a", 1)
	fmt.Println(errors.Is(err, membership.ErrLeaseExpired))
	// Output:
	// expired host-a
	// true
}

// A host on Postgres opens three pools: the store's work on one, the lease
// checks and the membership on another, which that work cannot hold up,
// and its renewals on a third, which nothing else uses.
func ExampleOpenPools() {
	url, drop, err := pgtest.NewDatabase()
	if err != nil {
		panic(err)
	}
	defer drop()
	ctx := context.Background()
	pools, err := pgstore.OpenPools(ctx, url)
	if err != nil {
		panic(err)
	}
	defer pools.Close()
	s, err := pgstore.Open(ctx, pools.Work, pgstore.Options{LeasePool: pools.Leases, RenewPool: pools.Renewals})
	if err != nil {
		panic(err)
	}
	m, err := pgstore.OpenMembership(ctx, pools.Leases, pgstore.MembershipOptions{RenewPool: pools.Renewals})
	if err != nil {
		panic(err)
	}
	defer m.Close()
	if _, err := s.RenewLease(ctx, "host-a", 1, 0); err != nil {
		panic(err)
	}
	granted, err := m.Join(ctx, membership.Member{Name: "host-a", Address: "10.0.0.1:7000", LeaseGen: 1})
	if err != nil {
		panic(err)
	}
	if _, err := m.Renew(ctx, "host-a", 1); err != nil {
		panic(err)
	}
	fmt.Println(granted.Name, pools.Leases.Config().MaxConns == pgstore.LeasePoolConns,
		pools.Renewals.Stat().AcquireCount()) // the store's renewal and the membership's
	// Output:
	// host-a true 2
}
