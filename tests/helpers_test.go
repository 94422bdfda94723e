package tests

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/pgstore"
	"github.com/jackc/pgx/v5"
)

func limits(items int) mailbox.Limits { return mailbox.Limits{Items: items, Bytes: 64 << 20} }

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// openPostgres opens the Location Store and the membership on database
// url on the pools a host uses (pgstore.OpenPools); close closes the
// membership and the pools — after the hosts, before a goroutine check.
func openPostgres(tb testing.TB, url string) (store *pgstore.Store, members *pgstore.Membership, close func()) {
	tb.Helper()
	ctx := context.Background()
	pools, err := pgstore.OpenPools(ctx, url)
	if err != nil {
		tb.Fatal(err)
	}
	if store, err = pgstore.Open(ctx, pools.Work, pgstore.Options{LeasePool: pools.Leases, RenewPool: pools.Renewals}); err == nil {
		members, err = pgstore.OpenMembership(ctx, pools.Leases, pgstore.MembershipOptions{RenewPool: pools.Renewals})
	}
	if err != nil {
		pools.Close()
		tb.Fatal(err)
	}
	return store, members, func() { members.Close(); pools.Close() }
}

// startHost starts a host with cfg (its Logger set here, quiet), its
// kinds registered by kinds, closed when the test ends.
func startHost(t testing.TB, cfg actor.Config, kinds func(*actor.Host)) *actor.Host {
	t.Helper()
	cfg.Logger = quietLogger()
	h, err := actor.NewHost(cfg)
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

// startPair starts hosts a and b with cfg (its Name set here; startHost),
// and waits until they know each other.
func startPair(t testing.TB, cfg actor.Config, kinds func(*actor.Host)) (a, b *actor.Host) {
	t.Helper()
	start := func(name string) *actor.Host {
		c := cfg
		c.Name = name
		return startHost(t, c, kinds)
	}
	a, b = start("a"), start("b")
	testutil.WaitFor(t, "the hosts to know each other", func() bool { return len(a.Peers()) == 1 && len(b.Peers()) == 1 })
	return a, b
}

// dbActivity describes, for a failing test's report, what database url is
// doing: its sessions that are not idle (a transaction waiting for its
// client, a statement waiting for a lock: a stalled process holding up
// the others) and the membership's rows, by the database's clock.
func dbActivity(url string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "the database: " + err.Error()
	}
	defer conn.Close(ctx)
	var b strings.Builder
	rows, err := conn.Query(ctx, `SELECT state, coalesce(wait_event_type || '/' || wait_event, '-'),
		coalesce(now() - xact_start, interval '0')::text, left(regexp_replace(query, '\s+', ' ', 'g'), 160)
		FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND state <> 'idle'`)
	if err == nil {
		for rows.Next() {
			var state, wait, age, query string
			if rows.Scan(&state, &wait, &age, &query) == nil {
				fmt.Fprintf(&b, "session %s, waiting %s, transaction %s old: %s\n", state, wait, age, query)
			}
		}
		rows.Close()
	}
	rows, err = conn.Query(ctx, `SELECT name, live, (deadline - now())::text FROM pgstore_members ORDER BY name`)
	if err == nil {
		for rows.Next() {
			var name, left string
			var live bool
			if rows.Scan(&name, &live, &left) == nil {
				fmt.Fprintf(&b, "member %s: live %v, deadline in %s\n", name, live, left)
			}
		}
		rows.Close()
	}
	return b.String()
}
