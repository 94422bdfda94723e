package pgbridge

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/berthrt/berth/payload"
	"github.com/jackc/pgx/v5/pgxpool"
)

// dedupeInbox makes the table inbox with its dedupe column.
func dedupeInbox(t *testing.T) (*pgxpool.Pool, Table) {
	t.Helper()
	pool, _ := newPool(t)
	tb := Table{Name: "inbox"}
	migrate(t, pool, tb)
	return pool, tb
}

// SendWith reports the new row's id, and writes the row's priority, headers
// and run_at; a row whose run_at is ahead is not claimed before it.
func TestSendWithReportsTheRowsIDAndWritesItsOptions(t *testing.T) {
	pool, tb := dedupeInbox(t)
	b := newBroker(t, Config{Pool: pool})
	repo := Repository{Broker: b, Table: tb}
	later := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	p, err := SendWith(bg, b, pool, repo, "a", Job{N: 1}, SendOptions{Priority: 7, RunAt: later, Headers: map[string]string{"h": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	now, err := SendWith(bg, b, pool, repo, "b", Job{N: 2}, SendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var prio int
	var runAt time.Time
	var h string
	if err := pool.QueryRow(bg, "SELECT priority, run_at, headers->>'h' FROM inbox WHERE id = $1", p.ID).Scan(&prio, &runAt, &h); err != nil {
		t.Fatalf("row %d: %v", p.ID, err)
	}
	if prio != 7 || !runAt.Equal(later) || h != "v" || p.Duplicate || now.ID <= p.ID {
		t.Fatalf("row %d: priority %d, run_at %v (want %v), header %q; then id %d", p.ID, prio, runAt, later, h, now.ID)
	}
	ran := make(chan int64, 2)
	subscribe(t, b, &Subscription{Table: tb, PollInterval: 10 * time.Millisecond},
		Messages(func(ctx context.Context, d *Delivery, m Job) Outcome { ran <- d.ID; return Ack }))
	if id := <-ran; id != now.ID {
		t.Fatalf("ran row %d, want %d (the other is an hour away)", id, now.ID)
	}
	waitFor(t, "the ready row settled", func() bool { return count(t, pool, "inbox") == 1 })
	if len(ran) != 0 {
		t.Fatal("the row an hour away ran")
	}
}

// A message whose dedupe key is that of a row in the table is not inserted
// (Duplicate, counted); once that row is settled, the key is free again.
// In a transaction too.
func TestAMessageWhoseDedupeKeyIsInTheTableIsNotInsertedAgain(t *testing.T) {
	pool, tb := dedupeInbox(t)
	b := newBroker(t, Config{Pool: pool})
	repo := Repository{Broker: b, Table: tb}
	first, err := SendWith(bg, b, pool, repo, "a", Job{N: 1}, SendOptions{DedupeKey: "order-1"})
	if err != nil || first.Duplicate || first.ID == 0 {
		t.Fatalf("first: %+v, %v", first, err)
	}
	tx, err := pool.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(bg)
	again, err := SendWith(bg, b, tx, repo, "a", Job{N: 2}, SendOptions{DedupeKey: "order-1"})
	if err != nil || !again.Duplicate || again.ID != 0 {
		t.Fatalf("again, in a transaction: %+v, %v; want a duplicate", again, err)
	}
	if err := tx.Commit(bg); err != nil {
		t.Fatal(err)
	}
	// Publish (no report) dedupes too.
	if err := repo.Publish(bg, pool, Outgoing{Key: "a", Type: "t", ContentType: "application/json", Body: []byte("{}"), DedupeKey: "order-1"}); err != nil {
		t.Fatal(err)
	}
	if n, st := count(t, pool, "inbox"), b.Stats(); n != 1 || st.Duplicates != 2 || st.Published != 1 {
		t.Fatalf("%d rows, stats %+v; want 1 row, 2 duplicates, 1 published", n, st)
	}
	if _, err := pool.Exec(bg, "DELETE FROM inbox"); err != nil {
		t.Fatal(err)
	}
	if p, err := SendWith(bg, b, pool, repo, "a", Job{N: 3}, SendOptions{DedupeKey: "order-1"}); err != nil || p.Duplicate {
		t.Fatalf("after the row settled: %+v, %v; want inserted", p, err)
	}
	if _, err := SendWith(bg, b, pool, Repository{Broker: b, Table: Table{Name: "inbox", Columns: Columns{DedupeKey: "-"}}}, "a", Job{}, SendOptions{DedupeKey: "x"}); !errors.Is(err, payload.InvalidOperation) {
		t.Fatalf("a dedupe key for a table without the column: %v, want InvalidOperation", err)
	}
}

// SendMany inserts its messages with one statement — one notify under
// ListenNotify — in their order, and reports each row: its id, or that it
// was a duplicate (of a row in the table, or of an earlier message of the
// call).
func TestSendManyInsertsInOneStatementAndReportsEachRow(t *testing.T) {
	pool, tb := dedupeInbox(t)
	b := newBroker(t, Config{Pool: pool, ListenNotify: true, NotifyCooldown: time.Nanosecond})
	repo := Repository{Broker: b, Table: tb}
	if _, err := SendWith(bg, b, pool, repo, "x", Job{}, SendOptions{DedupeKey: "taken"}); err != nil {
		t.Fatal(err)
	}
	before := b.Stats()
	msgs := []Keyed[Job]{
		{Key: "a", Msg: Job{N: 1}},
		{Key: "b", Msg: Job{N: 2}, Opts: SendOptions{DedupeKey: "taken"}},
		{Key: "c", Msg: Job{N: 3}, Opts: SendOptions{DedupeKey: "d1", Priority: 3}},
		{Key: "d", Msg: Job{N: 4}, Opts: SendOptions{DedupeKey: "d1"}},
		{Key: "e", Msg: Job{N: 5}, Opts: SendOptions{RunAt: time.Now().Add(time.Hour)}},
	}
	got, err := SendMany(bg, b, pool, repo, msgs)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"a": false, "b": true, "c": false, "d": true, "e": false}
	last := int64(0)
	for i, p := range got {
		k := msgs[i].Key
		if p.Duplicate != want[k] {
			t.Fatalf("message %s: %+v, want duplicate %v", k, p, want[k])
		}
		if p.Duplicate {
			continue
		}
		var key string
		var n, prio int
		var later bool
		if err := pool.QueryRow(bg, "SELECT key, (convert_from(payload, 'UTF8')::jsonb->>'N')::int, priority, run_at > now() + interval '50 minutes' FROM inbox WHERE id = $1", p.ID).
			Scan(&key, &n, &prio, &later); err != nil {
			t.Fatalf("message %s, row %d: %v", k, p.ID, err)
		}
		if key != k || n != msgs[i].Msg.N || prio != int(msgs[i].Opts.Priority) || later != (k == "e") || p.ID <= last {
			t.Fatalf("message %s: row %d holds key %s, N %d, priority %d, later %v", k, p.ID, key, n, prio, later)
		}
		last = p.ID
	}
	st := b.Stats()
	if st.Published-before.Published != 3 || st.Duplicates-before.Duplicates != 2 || st.Notifies-before.Notifies != 1 {
		t.Fatalf("published %d, duplicates %d, notifies %d; want 3, 2, 1", st.Published-before.Published,
			st.Duplicates-before.Duplicates, st.Notifies-before.Notifies)
	}
	if _, err := (Routed{Broker: b}).InsertMany(bg, pool, []Outgoing{{Type: "a"}, {Type: "b"}}); !errors.Is(err, payload.InvalidOperation) {
		t.Fatalf("Routed.InsertMany of two types: %v, want InvalidOperation", err)
	}
	if n := count(t, pool, "inbox"); n != 4 {
		t.Fatalf("%d rows, want 4", n)
	}
}
