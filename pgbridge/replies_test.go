package pgbridge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/payload"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Objects without ObjectOptions.Replies publishes replies through Routed,
// the broker's routes (they used to be dropped); a reply whose type has no
// route is not dropped either: the row's delivery fails, is counted in
// NoRoute and retried. Discard drops replies, by choice.
func TestRoutedIsObjectsDefaultReplyPublisher(t *testing.T) {
	pool, _ := newPool(t)
	in, out := Table{Name: "inbox"}, Table{Name: "replies"}
	migrate(t, pool, in)
	migrate(t, pool, out)
	var mu sync.Mutex
	host := startHost(t, accountKind(&mu, map[string][]int{}))
	for _, c := range []struct {
		name    string
		routes  map[string]Table
		opts    ObjectOptions
		replies int
	}{
		{"routed", map[string]Table{actor.TypeName[Reply](): out}, ObjectOptions{}, 3},
		{"no route", nil, ObjectOptions{}, 0},
		{"discard", map[string]Table{actor.TypeName[Reply](): out}, ObjectOptions{Replies: Discard{}}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := pool.Exec(bg, "TRUNCATE inbox, replies"); err != nil {
				t.Fatal(err)
			}
			b := newBroker(t, Config{Pool: pool, Routes: c.routes})
			for i := range 3 {
				if err := Send(bg, b, pool, Repository{Broker: b, Table: in}, fmt.Sprint("a", i), Balance{Seq: i}); err != nil {
					t.Fatal(err)
				}
			}
			subscribe(t, b, &Subscription{Table: in, PollInterval: 10 * time.Millisecond,
				RetryDelay: func(int) time.Duration { return time.Hour }}, Objects(host, "account", c.opts))
			waitFor(t, "every row settled", func() bool { st := b.Stats(); return st.Acked+st.Retried == 3 })
			b.Close()
			st := b.Stats()
			if n := count(t, pool, "replies"); n != c.replies {
				t.Fatalf("%d replies published, want %d", n, c.replies)
			}
			if c.routes != nil {
				if st.Acked != 3 || count(t, pool, "inbox") != 0 {
					t.Fatalf("stats %+v, %d rows left; want 3 acked, none left", st, count(t, pool, "inbox"))
				}
				return
			}
			var why string
			if err := pool.QueryRow(bg, "SELECT min(last_error) FROM inbox").Scan(&why); err != nil {
				t.Fatal(err)
			}
			if st.Retried != 3 || st.NoRoute != 3 || count(t, pool, "inbox") != 3 || !strings.Contains(why, "no route") {
				t.Fatalf("stats %+v, %d rows left, last_error %q: want every row retried for want of a route", st, count(t, pool, "inbox"), why)
			}
		})
	}
}

// Subscribe refuses row-lock and advisory workers that, with the broker's
// other such subscriptions, would hold every connection of the pool while
// their handlers run: one stays free (for publishes through the pool,
// lease extensions, the fate of a lost commit). Lease-form workers hold
// none while their handlers run.
func TestSubscribeLeavesOneConnectionOfThePoolFree(t *testing.T) {
	pool := smallPool(t, 4)
	migrate(t, pool, Table{Name: "inbox"})
	b := newBroker(t, Config{Pool: pool})
	h := Messages(func(ctx context.Context, d *Delivery, m Job) Outcome { return Ack })
	if err := b.Subscribe(&Subscription{Table: Table{Name: "inbox"}, Workers: 4}, h); !errors.Is(err, payload.InvalidOperation) {
		t.Fatalf("4 row-lock workers on a pool of 4: %v, want InvalidOperation", err)
	}
	if err := b.Subscribe(&Subscription{Table: Table{Name: "inbox"}, Workers: 2}, h); err != nil {
		t.Fatal(err)
	}
	if err := b.Subscribe(&Subscription{Table: Table{Name: "inbox"}, Form: Advisory, Workers: 2}, h); !errors.Is(err, payload.InvalidOperation) {
		t.Fatalf("2 advisory workers beside 2 row-lock ones on a pool of 4: %v, want InvalidOperation", err)
	}
	if err := b.Subscribe(&Subscription{Table: Table{Name: "inbox"}, Form: Advisory, Workers: 1}, h); err != nil {
		t.Fatal(err)
	}
	if err := b.Subscribe(&Subscription{Table: Table{Name: "inbox"}, Form: Lease, Workers: 8}, h); err != nil {
		t.Fatalf("lease workers hold no connection while their handlers run: %v", err)
	}
}

// Advisory form: an Objects reply is published on the connection that
// holds the key's lock. Through the pool, claimers that each hold a
// connection and wait for another to publish their replies used to
// deadlock once the pool had none left — here the one spare is taken.
func TestAdvisoryRepliesArePublishedOnTheClaimsConnection(t *testing.T) {
	pool := smallPool(t, 4)
	in, out := Table{Name: "inbox"}, Table{Name: "replies"}
	migrate(t, pool, in)
	migrate(t, pool, out)
	var mu sync.Mutex
	host := startHost(t, accountKind(&mu, map[string][]int{}))
	b := newBroker(t, Config{Pool: pool, Routes: map[string]Table{actor.TypeName[Reply](): out}})
	const rows = 24
	for i := range rows {
		if err := Send(bg, b, pool, Repository{Broker: b, Table: in}, fmt.Sprint("a", i%6), Balance{Seq: i}); err != nil {
			t.Fatal(err)
		}
	}
	spare, err := pool.Acquire(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer spare.Release()
	subscribe(t, b, &Subscription{Table: in, Form: Advisory, Workers: 3, Batch: 2, PollInterval: 10 * time.Millisecond},
		Objects(host, "account", ObjectOptions{}))
	waitFor(t, "every row acked", func() bool { return b.Stats().Acked == rows })
	b.Close()
	var n int
	if err := spare.QueryRow(bg, "SELECT (SELECT count(*) FROM replies) + (SELECT count(*) FROM inbox) * 1000").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != rows {
		t.Fatalf("replies + 1000 × rows left = %d, want %d replies and no row left", n, rows)
	}
}

// smallPool is a pool of conns connections on a fresh database.
func smallPool(t *testing.T, conns int32) *pgxpool.Pool {
	t.Helper()
	big, _ := newPool(t)
	cfg, err := pgxpool.ParseConfig(big.Config().ConnConfig.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = conns
	pool, err := pgxpool.NewWithConfig(bg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
