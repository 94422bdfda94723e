package pgbridge

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/payload"
)

type Reply struct{ Text string }

func TestRoutedPublishesByTypeNameAndNoRoute(t *testing.T) {
	pool, _ := newPool(t)
	out := Table{Name: "outbox"}
	migrate(t, pool, out)
	b := newBroker(t, Config{Pool: pool, Routes: map[string]Table{actor.TypeName[Reply](): out}})
	if err := Send(bg, b, pool, Routed{Broker: b}, "k", Reply{Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	var typ, ct, body string
	if err := pool.QueryRow(bg, "SELECT type, content_type, convert_from(payload, 'UTF8') FROM outbox").Scan(&typ, &ct, &body); err != nil {
		t.Fatal(err)
	}
	if typ != actor.TypeName[Reply]() || ct != "application/json" || body != `{"Text":"hi"}` {
		t.Errorf("row %q %q %q", typ, ct, body)
	}
	err := Send(bg, b, pool, Routed{Broker: b}, "k", Job{N: 1})
	if !errors.Is(err, ErrNoRoute) || !errors.Is(err, payload.NotFound) {
		t.Fatalf("unrouted type: %v, want ErrNoRoute", err)
	}
	if b.Stats().NoRoute != 1 {
		t.Errorf("NoRoute %d", b.Stats().NoRoute)
	}
}

func TestPublishAfterCloseIsClosed(t *testing.T) {
	pool, _ := newPool(t)
	tb := Table{Name: "inbox"}
	migrate(t, pool, tb)
	b := newBroker(t, Config{Pool: pool})
	b.Close()
	err := Send(bg, b, pool, Repository{Broker: b, Table: tb}, "k", Job{})
	if !errors.Is(err, ErrClosed) || !errors.Is(err, payload.ShuttingDown) {
		t.Fatalf("publish after Close: %v, want ErrClosed", err)
	}
	if n := count(t, pool, "inbox"); n != 0 {
		t.Errorf("%d rows inserted after Close", n)
	}
}

func TestPublishHeadersNeedAHeadersColumn(t *testing.T) {
	pool, _ := newPool(t)
	if _, err := pool.Exec(bg, `CREATE TABLE plain (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, key text NOT NULL,
		type text NOT NULL, content_type text NOT NULL, payload bytea, attempt int NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	b := newBroker(t, Config{Pool: pool})
	tb := Table{Name: "plain", Columns: Columns{Headers: "-", Priority: "-", LockedUntil: "-", LastError: "-"}}
	repo := Repository{Broker: b, Table: tb}
	err := repo.Publish(bg, pool, Outgoing{Key: "k", Type: "t", ContentType: "application/json", Body: []byte(`{}`), Headers: map[string]string{"a": "b"}})
	if payload.KindOf(err) != payload.CapacityExceeded {
		t.Fatalf("headers into a table without a headers column: %v, want CapacityExceeded", err)
	}
	if err := repo.Publish(bg, pool, Outgoing{Key: "k", Type: "t", ContentType: "application/json", Body: []byte(`{}`)}); err != nil {
		t.Fatalf("no headers: %v", err)
	}
	if n := count(t, pool, "plain"); n != 1 {
		t.Errorf("%d rows, want 1", n)
	}
}

func TestTransactionalPublishCommitsWithCallersTx(t *testing.T) {
	pool, _ := newPool(t)
	tb := Table{Name: "inbox"}
	migrate(t, pool, tb)
	b := newBroker(t, Config{Pool: pool})
	repo := Repository{Broker: b, Table: tb}
	for _, commit := range []bool{false, true} {
		tx, err := pool.Begin(bg)
		if err != nil {
			t.Fatal(err)
		}
		if err := Send(bg, b, tx, repo, "k", Job{N: 1}); err != nil {
			t.Fatal(err)
		}
		if n := count(t, pool, "inbox"); n != 0 {
			t.Fatalf("row visible before commit")
		}
		if commit {
			err = tx.Commit(bg)
		} else {
			err = tx.Rollback(bg)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, pool, "inbox"); n != 1 {
		t.Fatalf("%d rows, want only the committed one", n)
	}
}

func TestHeadersParsedOnFirstRead(t *testing.T) {
	pool, _ := newPool(t)
	tb := Table{Name: "inbox"}
	migrate(t, pool, tb)
	b := newBroker(t, Config{Pool: pool})
	repo := Repository{Broker: b, Table: tb}
	if err := repo.Publish(bg, pool, Outgoing{Key: "a", Type: actor.TypeName[Job](), ContentType: "application/json", Body: []byte(`{"N":1}`), Headers: map[string]string{"trace": "t1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(bg, `INSERT INTO inbox (key, type, payload, headers) VALUES ('b', $1, '{"N":2}', '["not", "an object"]')`, actor.TypeName[Job]()); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 2)
	subscribe(t, b, &Subscription{Table: tb, Batch: 2, PollInterval: 10 * time.Millisecond},
		Messages(func(ctx context.Context, d *Delivery, m Job) Outcome {
			h, err := d.Headers()
			switch m.N {
			case 1:
				if err != nil || h["trace"] != "t1" {
					t.Errorf("headers %v, %v", h, err)
				}
			case 2:
				if payload.KindOf(err) != payload.ProtocolError {
					t.Errorf("malformed headers: %v, want ProtocolError", err)
				}
			}
			got <- d.Key
			return Ack
		}))
	<-got
	<-got
}

// TestListenNotifyWakesSubscriptions: with a poll interval far longer than
// the test, a row published through the broker (in this process) and one
// published by another broker (through pg_notify and the listener) are
// both handled at once — for a table whose name makes a channel past
// Postgres's 63 bytes too (its channel is shortened with a hash: pg_notify
// refused the long one, failing every publish whose notify was due).
func TestListenNotifyWakesSubscriptions(t *testing.T) {
	for _, name := range []string{"inbox", "inbox_" + strings.Repeat("x", 50)} {
		t.Run(strconv.Itoa(len(name))+"-byte name", func(t *testing.T) { listenNotifyWakes(t, name) })
	}
}

func listenNotifyWakes(t *testing.T, name string) {
	pool, _ := newPool(t)
	tb := Table{Name: name}
	migrate(t, pool, tb)
	b := newBroker(t, Config{Pool: pool, ListenNotify: true})
	other := newBroker(t, Config{Pool: pool, ListenNotify: true})
	got := make(chan int, 4)
	subscribe(t, b, &Subscription{Table: tb, PollInterval: time.Hour},
		Messages(func(ctx context.Context, d *Delivery, m Job) Outcome { got <- m.N; return Ack }))
	// The first claim (at start) found nothing; now only a wake-up helps.
	waitFor(t, "the listener listening", func() bool { return b.Stats().Claimed == 0 && listening(t, b, channelName(name)) })
	if err := Send(bg, b, pool, Repository{Broker: b, Table: tb}, "k", Job{N: 1}); err != nil {
		t.Fatal(err)
	}
	if n := <-got; n != 1 {
		t.Fatal(n)
	}
	if err := Send(bg, other, pool, Repository{Broker: other, Table: tb}, "k", Job{N: 2}); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-got:
		if n != 2 {
			t.Fatal(n)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a row published by another broker did not wake the subscription")
	}
	// The notification reaches b's listener whether or not b's claimer,
	// still looping after row 1, found row 2 first.
	waitFor(t, "the other broker's notification counted", func() bool { return b.Stats().Wakeups > 0 })
}

// Every table's channel fits Postgres's limit in whole characters; a short
// name's is berth_inbox_ and the name, as it always was; long names that
// share a prefix get channels of their own.
func TestChannelNamesFitPostgresLimit(t *testing.T) {
	if got := channelName("app.inbox"); got != "berth_inbox_app_inbox" {
		t.Fatalf("channelName(app.inbox) = %q", got)
	}
	seen := map[string]string{}
	for _, r := range []string{"x", "ü", "語"} {
		for n := 1; n <= 80; n++ {
			name := "inbox_" + strings.Repeat(r, n)
			c := channelName(name)
			if len(c) > maxChannel || !utf8.ValidString(c) || !strings.HasPrefix(c, "berth_inbox_inbox_") {
				t.Fatalf("channelName(%q) = %q: %d bytes", name, c, len(c))
			}
			if other, ok := seen[c]; ok {
				t.Fatalf("%q and %q share channel %q", name, other, c)
			}
			seen[c] = name
		}
	}
}

// listening reports whether a backend of b's database listens on ch.
func listening(t *testing.T, b *Broker, ch string) bool {
	var n int
	err := b.pool.QueryRow(bg, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'`).Scan(&n)
	return err == nil && n > 0
}

func TestSubscribeConfigurationErrors(t *testing.T) {
	pool, _ := newPool(t)
	b := newBroker(t, Config{Pool: pool})
	h := Messages(func(ctx context.Context, d *Delivery, m Job) Outcome { return Ack })
	rows := Rows(func(ctx context.Context, d *Delivery, r *Row) Outcome { return Ack })
	cases := []struct {
		name string
		s    *Subscription
		h    Handler
		kind payload.Kind
	}{
		{"max attempts without dead letter", &Subscription{Table: Table{Name: "inbox"}, MaxAttempts: 3}, h, payload.NotConfigured},
		{"dead-letter decode policy without dead letter", &Subscription{Table: Table{Name: "inbox"}, DecodePolicy: DecodeDeadLetter}, h, payload.NotConfigured},
		{"no table", &Subscription{}, h, payload.InvalidOperation},
		{"row mode on a payload table", &Subscription{Table: Table{Name: "inbox"}}, rows, payload.InvalidOperation},
		{"payload mode without payload", &Subscription{Table: Table{Name: "inbox", Columns: Columns{Payload: "-"}}}, h, payload.InvalidOperation},
		{"lease without locked_until", &Subscription{Form: Lease, Table: Table{Name: "inbox", Columns: Columns{LockedUntil: "-"}}}, h, payload.InvalidOperation},
	}
	for _, c := range cases {
		if err := b.Subscribe(c.s, c.h); payload.KindOf(err) != c.kind {
			t.Errorf("%s: %v, want kind %v", c.name, err, c.kind)
		}
	}
}

func TestRowModeHandsTheRowAsRead(t *testing.T) {
	pool, _ := newPool(t)
	if _, err := pool.Exec(bg, `CREATE TABLE events (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, key text NOT NULL,
		attempt int NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now(), locked_until timestamptz,
		amount int NOT NULL, note text)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(bg, `INSERT INTO events (key, amount, note) VALUES ('a', 5, 'five'), ('b', 7, NULL)`); err != nil {
		t.Fatal(err)
	}
	b := newBroker(t, Config{Pool: pool})
	tb := Table{Name: "events", RowColumns: []string{"amount", "note"},
		Columns: Columns{Type: "-", ContentType: "-", Payload: "-", Headers: "-", Priority: "-", LastError: "-"}}
	type seen struct {
		key    string
		amount int32
		note   *string
	}
	got := make(chan seen, 2)
	for _, form := range []Form{RowLock} {
		err := b.Subscribe(&Subscription{Table: tb, Form: form, PollInterval: 10 * time.Millisecond},
			Rows(func(ctx context.Context, d *Delivery, r *Row) Outcome {
				var s seen
				s.key = r.Key
				if err := r.Scan(0, &s.amount); err != nil {
					t.Error(err)
				}
				if err := r.Scan(1, &s.note); err != nil {
					t.Error(err)
				}
				got <- s
				return Ack
			}))
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	a, c := <-got, <-got
	if a.key != "a" || a.amount != 5 || a.note == nil || *a.note != "five" {
		t.Errorf("row a: %+v", a)
	}
	if c.key != "b" || c.amount != 7 || c.note != nil {
		t.Errorf("row b: %+v", c)
	}
	waitFor(t, "rows settled", func() bool { return count(t, pool, "events") == 0 })
}

// TestRepliesPublishDuringGracefulStop: a delivery finishing while Stop
// waits for it still publishes (its reply is part of its settlement);
// after Stop returns, publishing is ErrClosed.
func TestRepliesPublishDuringGracefulStop(t *testing.T) {
	pool, _ := newPool(t)
	tb, out := Table{Name: "inbox"}, Table{Name: "outbox"}
	migrate(t, pool, tb)
	migrate(t, pool, out)
	b := newBroker(t, Config{Pool: pool})
	if err := Send(bg, b, pool, Repository{Broker: b, Table: tb}, "k", Job{N: 1}); err != nil {
		t.Fatal(err)
	}
	inside := make(chan struct{})
	stopping := make(chan struct{})
	pubErr := make(chan error, 1)
	err := b.Subscribe(&Subscription{Table: tb, PollInterval: 10 * time.Millisecond},
		Messages(func(ctx context.Context, d *Delivery, m Job) Outcome {
			close(inside)
			<-stopping
			err := Send(ctx, b, d.Tx(), Repository{Broker: b, Table: out}, d.Key, Reply{Text: "done"})
			pubErr <- err
			if err != nil {
				return RetryAfter(time.Hour, err.Error())
			}
			return Ack
		}))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	<-inside
	stopped := make(chan error, 1)
	go func() { stopped <- b.Stop(bg) }()
	waitFor(t, "Stop began", func() bool { return b.closed.Load() })
	close(stopping)
	if err := <-pubErr; err != nil {
		t.Fatalf("publish while Stop waits for the delivery: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, "outbox"); n != 1 {
		t.Fatalf("%d replies, want 1", n)
	}
	if n := count(t, pool, "inbox"); n != 0 {
		t.Fatalf("the row was not settled")
	}
	if err := Send(bg, b, pool, Repository{Broker: b, Table: out}, "k", Reply{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("publish after Stop returned: %v, want ErrClosed", err)
	}
}

// TestNotifyAtMostOncePerCooldown: a burst of inserts into one table sends
// at most one pg_notify per cooldown on its channel, plus one trailing
// notify after the burst (so no listener waits for its poll).
func TestNotifyAtMostOncePerCooldown(t *testing.T) {
	pool, _ := newPool(t)
	tb := Table{Name: "inbox"}
	migrate(t, pool, tb)
	const cooldown = time.Second
	b := newBroker(t, Config{Pool: pool, ListenNotify: true, NotifyCooldown: cooldown})
	start := time.Now()
	const burst = 20
	for i := 0; i < burst; i++ {
		if err := Send(bg, b, pool, Repository{Broker: b, Table: tb}, "k", Job{N: i}); err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	bound := uint64(elapsed/cooldown) + 1
	if n := b.Stats().Notifies; n < 1 || n > bound {
		t.Fatalf("%d notifies for a burst of %d in %v, want 1..%d", n, burst, elapsed, bound)
	}
	waitFor(t, "the trailing notify", func() bool { return b.Stats().Notifies == uint64(elapsed/cooldown)+2 })
}
