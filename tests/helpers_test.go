package tests

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/pgstore"
	"github.com/jackc/pgx/v5/pgxpool"
)

func limits(items int) mailbox.Limits { return mailbox.Limits{Items: items, Bytes: 64 << 20} }

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// openPostgres opens the Location Store and the membership on database
// url (pgstore, one pool); close closes the membership and the pool —
// after the hosts, before a goroutine check.
func openPostgres(tb testing.TB, url string) (store *pgstore.Store, members *pgstore.Membership, close func()) {
	tb.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		tb.Fatal(err)
	}
	if store, err = pgstore.Open(ctx, pool, pgstore.Options{}); err == nil {
		members, err = pgstore.OpenMembership(ctx, pool, pgstore.MembershipOptions{})
	}
	if err != nil {
		pool.Close()
		tb.Fatal(err)
	}
	return store, members, func() { members.Close(); pool.Close() }
}

// startPair starts hosts a and b with cfg (its Name and Logger set
// here), their kinds registered by kinds, closed when the test ends, and
// waits until they know each other.
func startPair(t testing.TB, cfg actor.Config, kinds func(*actor.Host)) (a, b *actor.Host) {
	t.Helper()
	start := func(name string) *actor.Host {
		c := cfg
		c.Name, c.Logger = name, quietLogger()
		h, err := actor.NewHost(c)
		if err != nil {
			t.Fatal(err)
		}
		kinds(h)
		if err := h.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		return h
	}
	a, b = start("a"), start("b")
	testutil.WaitFor(t, "the hosts to know each other", func() bool { return len(a.Peers()) == 1 && len(b.Peers()) == 1 })
	return a, b
}
