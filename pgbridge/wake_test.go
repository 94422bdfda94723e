package pgbridge

import (
	"context"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/testutil"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ListenNotify: a row published in the caller's transaction wakes the
// subscriptions when the transaction commits — not before, when the row
// is not yet visible. Here the publish falls in the cooldown of an earlier
// one, and the commit comes after the cooldown: the cooldown's trailing
// notify (sent on another connection, before the commit) and the direct
// wake of this process's subscription (at the insert) used to come too
// early, and the row waited for the poll (a minute here).
func TestATransactionalPublishWakesSubscriptionsAfterItsCommit(t *testing.T) {
	pool, _ := newPool(t)
	tb := Table{Name: "inbox"}
	migrate(t, pool, tb)
	const cooldown = time.Second
	b := newBroker(t, Config{Pool: pool, ListenNotify: true, NotifyCooldown: cooldown})
	ran := make(chan int, 2)
	subscribe(t, b, &Subscription{Table: tb, PollInterval: time.Minute},
		Messages(func(ctx context.Context, d *Delivery, m Job) Outcome { ran <- m.N; return Ack }))
	repo := Repository{Broker: b, Table: tb}
	waitFor(t, "the listener listening", func() bool {
		// a notification sent on the subscription's channel reaches it
		_, err := pool.Exec(bg, "SELECT pg_notify($1, '')", channelName(tb.Name))
		return err == nil && b.Stats().Wakeups > 0
	})
	// The transactional publish must fall within the cooldown the first
	// publish started; on a machine too slow for that, the round is run
	// again (at most five times).
	for round := 1; ; round++ {
		start := time.Now()
		if err := Send(bg, b, pool, repo, "a", Job{N: 1}); err != nil { // notifies: the cooldown starts
			t.Fatal(err)
		}
		tx, err := pool.Begin(bg)
		if err != nil {
			t.Fatal(err)
		}
		if err := Send(bg, b, tx, repo, "b", Job{N: 2}); err != nil { // within the cooldown
			tx.Rollback(bg)
			t.Fatal(err)
		}
		if time.Since(start) >= cooldown {
			tx.Rollback(bg)
			if round == 5 {
				t.Fatalf("five rounds: a publish and the next took a cooldown (%v) or more", cooldown)
			}
			testutil.WaitForWithin(t, "the first row ran", 20*time.Second, func() bool { return len(ran) == 1 })
			<-ran
			continue
		}
		time.Sleep(time.Until(start.Add(cooldown + 300*time.Millisecond))) // the cooldown ends before the commit
		if err := tx.Commit(bg); err != nil {
			t.Fatal(err)
		}
		break
	}
	testutil.WaitForWithin(t, "both rows ran", 20*time.Second, func() bool { return len(ran) == 2 })
}

// Without ListenNotify: a reply published in a row-lock claim's
// transaction wakes its table's subscriptions when the claim commits. The
// wake used to come at the insert, while the transaction was open: the
// other subscription claimed nothing and slept until its poll.
func TestARowPublishedInAClaimsTransactionWakesSubscriptionsAfterTheCommit(t *testing.T) {
	pool, _ := newPool(t)
	in, out := Table{Name: "inbox"}, Table{Name: "replies"}
	migrate(t, pool, in)
	migrate(t, pool, out)
	b := newBroker(t, Config{Pool: pool})
	ran := make(chan int, 1)
	subscribe(t, b, &Subscription{Table: out, PollInterval: time.Minute},
		Messages(func(ctx context.Context, d *Delivery, m Job) Outcome { ran <- m.N; return Ack }))
	if err := b.Subscribe(&Subscription{Table: in, PollInterval: 10 * time.Millisecond},
		Messages(func(ctx context.Context, d *Delivery, m Job) Outcome {
			if err := Send(ctx, b, d.Tx(), Repository{Broker: b, Table: out}, d.Key, Job{N: m.N + 1}); err != nil {
				t.Error(err)
			}
			time.Sleep(300 * time.Millisecond) // a subscription woken now claims before the commit
			return Ack
		})); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the replies' subscription made its first claim
	if err := Send(bg, b, pool, Repository{Broker: b, Table: in}, "a", Job{N: 1}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitForWithin(t, "the reply ran", 20*time.Second, func() bool { return len(ran) == 1 })
	if n := <-ran; n != 2 {
		t.Fatalf("ran %d, want the reply 2", n)
	}
}

// The listener's connection comes from the pool, made with its hooks
// (here AfterConnect names the session): it used to be dialled from a copy
// of the pool's connection config, without them — a pool that sets a role,
// a search path or credentials in a hook got a listener without.
func TestTheListenerConnectsThroughThePoolsHooks(t *testing.T) {
	big, _ := newPool(t)
	cfg, err := pgxpool.ParseConfig(big.Config().ConnConfig.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET application_name = 'hooked'")
		return err
	}
	pool, err := pgxpool.NewWithConfig(bg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	tb := Table{Name: "inbox"}
	migrate(t, pool, tb)
	b := newBroker(t, Config{Pool: pool, ListenNotify: true})
	subscribe(t, b, &Subscription{Table: tb}, Messages(func(ctx context.Context, d *Delivery, m Job) Outcome { return Ack }))
	var name string
	waitFor(t, "the listener listening", func() bool {
		err := big.QueryRow(bg, "SELECT application_name FROM pg_stat_activity WHERE query LIKE 'LISTEN%' AND datname = current_database()").Scan(&name)
		return err == nil
	})
	b.Close()
	if name != "hooked" {
		t.Fatalf("the listener's session is named %q, want the pool hook's %q", name, "hooked")
	}
}
