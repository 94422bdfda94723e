package pgbridge

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthrt/berth/actor"
)

// Account is a test object: it keeps the sequence numbers it applied.
type Account struct {
	Applied []int
}

type Deposit struct {
	Seq    int
	Amount int
}

type Balance struct{ Seq int }

var errRefused = errors.New("refused")

func accountKind(mu *sync.Mutex, applied map[string][]int) *actor.Kind[Account] {
	k := actor.NewKind("account", func(ctx *actor.Context, id string) (*Account, error) { return &Account{}, nil })
	actor.Handle(k, func(ctx *actor.Context, a *Account, m Deposit) error {
		if m.Amount < 0 {
			return errRefused
		}
		mu.Lock()
		applied[ctx.Self().ID] = append(applied[ctx.Self().ID], m.Seq)
		mu.Unlock()
		return nil
	})
	actor.HandleRequest(k, func(ctx *actor.Context, a *Account, m Balance) (Reply, error) {
		return Reply{Text: fmt.Sprintf("%s:%d", ctx.Self().ID, m.Seq)}, nil
	})
	return k
}

func startHost(t *testing.T, items ...actor.Registrable) *actor.Host {
	t.Helper()
	h, err := actor.NewHost(actor.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Register(items...); err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// TestObjectsRunRowsInKeyOrderWithRepliesRouted: rows become messages to
// the object their key names; each object applies its rows in id order;
// a request handler's reply is published through Routed; each row's
// payload is copied once into the host's pool and decoded there.
func TestObjectsRunRowsInKeyOrderWithRepliesRouted(t *testing.T) {
	for _, form := range []Form{RowLock, Lease, Advisory} {
		t.Run(form.String(), func(t *testing.T) {
			pool, _ := newPool(t)
			in, out := Table{Name: "inbox"}, Table{Name: "replies"}
			migrate(t, pool, in)
			migrate(t, pool, out)
			var mu sync.Mutex
			applied := map[string][]int{}
			host := startHost(t, accountKind(&mu, applied))
			b := newBroker(t, Config{Pool: pool, Routes: map[string]Table{actor.TypeName[Reply](): out}})
			const keys, per = 8, 25
			repo := Repository{Broker: b, Table: in}
			for i := 0; i < per; i++ {
				for k := 0; k < keys; k++ {
					if err := Send(bg, b, pool, repo, fmt.Sprint("acct", k), Deposit{Seq: i, Amount: 1}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := Send(bg, b, pool, repo, "acct0", Balance{Seq: 99}); err != nil {
				t.Fatal(err)
			}
			before := host.PayloadStats()
			subscribe(t, b, &Subscription{Table: in, Form: form, Ordered: true, Workers: 3, Batch: 8, PollInterval: 10 * time.Millisecond},
				Objects(host, "account", ObjectOptions{Replies: Routed{Broker: b}}))
			waitFor(t, "inbox drained", func() bool { return count(t, pool, "inbox") == 0 })
			if err := b.Stop(bg); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			for k := 0; k < keys; k++ {
				got := applied[fmt.Sprint("acct", k)]
				if len(got) != per {
					t.Fatalf("acct%d applied %d rows, want %d", k, len(got), per)
				}
				for i, s := range got {
					if s != i {
						t.Fatalf("acct%d applied %v: out of order", k, got)
					}
				}
			}
			var key, typ, body string
			if err := pool.QueryRow(bg, "SELECT key, type, convert_from(payload, 'UTF8') FROM replies").Scan(&key, &typ, &body); err != nil {
				t.Fatal(err)
			}
			if key != "acct0" || typ != actor.TypeName[Reply]() || body != `{"Text":"acct0:99"}` {
				t.Errorf("reply row %q %q %q", key, typ, body)
			}
			after := host.PayloadStats()
			if n := after.FullCopies - before.FullCopies; n < keys*per+1 {
				t.Errorf("%d boundary copies counted for %d rows", n, keys*per+1)
			}
		})
	}
}

// TestObjectsReplyCommitsWithTheSettlement: in the row-lock form the reply
// is inserted in the claim's transaction: when the settlement rolls back,
// so does the reply — the row's failure is then a counted retry — and the
// redelivered row publishes it once.
func TestObjectsReplyCommitsWithTheSettlement(t *testing.T) {
	pool, _ := newPool(t)
	in, out := Table{Name: "inbox"}, Table{Name: "replies"}
	migrate(t, pool, in)
	migrate(t, pool, out)
	var mu sync.Mutex
	host := startHost(t, accountKind(&mu, map[string][]int{}))
	b := newBroker(t, Config{Pool: pool, Routes: map[string]Table{actor.TypeName[Reply](): out}})
	if err := Send(bg, b, pool, Repository{Broker: b, Table: in}, "a", Balance{Seq: 1}); err != nil {
		t.Fatal(err)
	}
	var rolledBack, settleErrs int
	// Break the first settlement: a trigger that refuses the first delete.
	if _, err := pool.Exec(bg, `CREATE SEQUENCE once; -- nextval survives the rollback
		CREATE FUNCTION refuse_once() RETURNS trigger AS $$
		BEGIN
			IF nextval('once') = 1 THEN RAISE EXCEPTION 'refused once'; END IF;
			RETURN OLD;
		END $$ LANGUAGE plpgsql;
		CREATE TRIGGER refuse BEFORE DELETE ON inbox FOR EACH ROW EXECUTE FUNCTION refuse_once();`); err != nil {
		t.Fatal(err)
	}
	subscribe(t, b, &Subscription{Table: in, PollInterval: 10 * time.Millisecond,
		RetryDelay: func(int) time.Duration { return 0 },
		OnSettled: func(d *Delivery, o Outcome, err error) {
			switch {
			case err != nil:
				settleErrs++
			case o.Kind == KindRetry && strings.Contains(o.Reason, "rolled back") && d.Attempt == 1:
				rolledBack++
			}
		}},
		Objects(host, "account", ObjectOptions{Replies: Routed{Broker: b}}))
	waitFor(t, "inbox drained", func() bool { return count(t, pool, "inbox") == 0 })
	if err := b.Stop(bg); err != nil {
		t.Fatal(err)
	}
	if settleErrs != 0 || rolledBack != 1 {
		t.Fatalf("settle errors %d, retries after a rollback %d; want the one refused as a retry", settleErrs, rolledBack)
	}
	if n := count(t, pool, "replies"); n != 1 {
		t.Fatalf("%d replies published, want exactly 1", n)
	}
}

// TestObjectsUndecodableAndFailingRows: a payload that does not decode into
// the handler's type is settled by the decode policy (the handler never
// runs); a handler's error is retried, then dead-lettered at MaxAttempts.
func TestObjectsUndecodableAndFailingRows(t *testing.T) {
	pool, _ := newPool(t)
	in := Table{Name: "inbox", DeadLetter: "inbox_dead"}
	migrate(t, pool, in)
	var mu sync.Mutex
	applied := map[string][]int{}
	host := startHost(t, accountKind(&mu, applied))
	b := newBroker(t, Config{Pool: pool})
	repo := Repository{Broker: b, Table: in}
	if err := Send(bg, b, pool, repo, "a", Deposit{Seq: 1, Amount: -1}); err != nil { // refused every time
		t.Fatal(err)
	}
	if err := repo.Publish(bg, pool, Outgoing{Key: "b", Type: actor.TypeName[Deposit](), ContentType: "application/json", Body: []byte(`{"Seq":`)}); err != nil {
		t.Fatal(err)
	}
	if err := repo.Publish(bg, pool, Outgoing{Key: "c", Type: actor.TypeName[Deposit](), ContentType: "application/x-unknown", Body: []byte(`x`)}); err != nil {
		t.Fatal(err)
	}
	if err := Send(bg, b, pool, repo, "d", Deposit{Seq: 1, Amount: 1}); err != nil {
		t.Fatal(err)
	}
	subscribe(t, b, &Subscription{Table: in, MaxAttempts: 2, DecodePolicy: DecodeDeadLetter,
		RetryDelay: func(int) time.Duration { return 0 }, PollInterval: 10 * time.Millisecond},
		Objects(host, "account", ObjectOptions{}))
	waitFor(t, "inbox drained", func() bool { return count(t, pool, "inbox") == 0 })
	rows, err := pool.Query(bg, "SELECT key, attempt, reason FROM inbox_dead ORDER BY key")
	if err != nil {
		t.Fatal(err)
	}
	var dead []string
	for rows.Next() {
		var k, r string
		var a int
		if err := rows.Scan(&k, &a, &r); err != nil {
			t.Fatal(err)
		}
		dead = append(dead, fmt.Sprintf("%s/%d: %s", k, a, r))
	}
	if len(dead) != 3 {
		t.Fatalf("dead letters %q, want the refused row and the two undecodable ones", dead)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(applied["d"]) != 1 || len(applied["b"]) != 0 || len(applied["c"]) != 0 {
		t.Errorf("applied %v", applied)
	}
	if st := b.Stats(); st.DecodeFailures != 2 {
		t.Errorf("decode failures %d, want 2", st.DecodeFailures)
	}
}
