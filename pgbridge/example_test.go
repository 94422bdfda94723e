package pgbridge_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/internal/pgtest"
	"github.com/berthrt/berth/pgbridge"
	"github.com/jackc/pgx/v5/pgxpool"
)

type Order struct {
	Item string
	Qty  int
}

type Shipped struct {
	Order string
}

// exampleDB returns a pool on a fresh database (examples run with the
// package's throwaway Postgres).
func exampleDB() (*pgxpool.Pool, func()) {
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

// waitEmpty polls until table has no rows.
func waitEmpty(pool *pgxpool.Pool, table string) {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var n int
		if pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n) == nil && n == 0 {
			return
		}
	}
	panic("table " + table + " not drained")
}

// A subscription runs each row of an inbox table through a typed handler,
// one row for each free worker, and settles it by the handler's outcome.
func ExampleMessages() {
	ctx := context.Background()
	pool, done := exampleDB()
	defer done()
	inbox := pgbridge.Table{Name: "orders"}
	if err := pgbridge.Migrate(ctx, pool, inbox); err != nil {
		panic(err)
	}
	b, _ := pgbridge.New(pgbridge.Config{Pool: pool})
	repo := pgbridge.Repository{Broker: b, Table: inbox}
	pgbridge.Send(ctx, b, pool, repo, "cart-1", Order{Item: "tea", Qty: 2})
	pgbridge.Send(ctx, b, pool, repo, "cart-1", Order{Item: "cups", Qty: 6})

	var mu sync.Mutex
	var got []string
	err := b.Subscribe(&pgbridge.Subscription{Table: inbox, Form: pgbridge.RowLock, Ordered: true, Workers: 2},
		pgbridge.Messages(func(ctx context.Context, d *pgbridge.Delivery, o Order) pgbridge.Outcome {
			mu.Lock()
			got = append(got, fmt.Sprintf("%s: %d %s (attempt %d)", d.Key, o.Qty, o.Item, d.Attempt))
			mu.Unlock()
			return pgbridge.Ack
		}))
	if err != nil {
		panic(err)
	}
	b.Start()
	waitEmpty(pool, "orders")
	b.Stop(ctx)
	for _, s := range got {
		fmt.Println(s)
	}
	// Output:
	// cart-1: 2 tea (attempt 1)
	// cart-1: 6 cups (attempt 1)
}

// A batch subscription claims up to Batch rows at once; the handler sets
// each row's outcome, and the rows settle with one statement per outcome.
func ExampleBatches() {
	ctx := context.Background()
	pool, done := exampleDB()
	defer done()
	inbox := pgbridge.Table{Name: "orders"}
	pgbridge.Migrate(ctx, pool, inbox)
	b, _ := pgbridge.New(pgbridge.Config{Pool: pool})
	repo := pgbridge.Repository{Broker: b, Table: inbox}
	for i := 1; i <= 5; i++ {
		pgbridge.Send(ctx, b, pool, repo, fmt.Sprint("cart-", i), Order{Item: "tea", Qty: i})
	}
	var mu sync.Mutex
	total := 0
	b.Subscribe(&pgbridge.Subscription{Table: inbox, Form: pgbridge.Lease, Batch: 100},
		pgbridge.Batches(func(ctx context.Context, items []pgbridge.Item[Order]) {
			mu.Lock()
			defer mu.Unlock()
			for i := range items {
				total += items[i].Msg.Qty
				items[i].Outcome = pgbridge.Ack
			}
		}))
	b.Start()
	waitEmpty(pool, "orders")
	b.Stop(ctx)
	fmt.Println("total", total)
	// Output: total 15
}

// Row mode: a table without a payload column; the handler reads the row's
// columns as the driver read them, and no codec runs.
func ExampleRows() {
	ctx := context.Background()
	pool, done := exampleDB()
	defer done()
	pool.Exec(ctx, `CREATE TABLE readings (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, key text NOT NULL,
		attempt int NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now(), celsius real NOT NULL)`)
	pool.Exec(ctx, `INSERT INTO readings (key, celsius) VALUES ('sensor-1', 21.5)`)
	b, _ := pgbridge.New(pgbridge.Config{Pool: pool})
	table := pgbridge.Table{Name: "readings", RowColumns: []string{"celsius"}, Columns: pgbridge.Columns{
		Type: "-", ContentType: "-", Payload: "-", Headers: "-", Priority: "-", LockedUntil: "-", LastError: "-"}}
	b.Subscribe(&pgbridge.Subscription{Table: table},
		pgbridge.Rows(func(ctx context.Context, d *pgbridge.Delivery, r *pgbridge.Row) pgbridge.Outcome {
			var c float32
			if err := r.Scan(0, &c); err != nil {
				return pgbridge.RetryAfter(time.Second, err.Error())
			}
			fmt.Printf("%s: %.1f °C\n", r.Key, c)
			return pgbridge.Ack
		}))
	b.Start()
	waitEmpty(pool, "readings")
	b.Stop(ctx)
	// Output: sensor-1: 21.5 °C
}

// Rows delivered to berth objects: each row is a message to the object its
// key names, and a request handler's reply goes through Routed into the
// table its type is routed to — in the row-lock form, in the claim's
// transaction.
func ExampleObjects() {
	ctx := context.Background()
	pool, done := exampleDB()
	defer done()
	inbox, outbox := pgbridge.Table{Name: "orders"}, pgbridge.Table{Name: "shipments"}
	pgbridge.Migrate(ctx, pool, inbox)
	pgbridge.Migrate(ctx, pool, outbox)

	carts := actor.NewKind("cart", func(ctx *actor.Context, id string) (*[]string, error) { return new([]string), nil })
	actor.HandleRequest(carts, func(ctx *actor.Context, items *[]string, o Order) (Shipped, error) {
		*items = append(*items, o.Item)
		return Shipped{Order: fmt.Sprintf("%s/%d", ctx.Self().ID, len(*items))}, nil
	})
	host, _ := actor.NewHost(actor.Config{})
	host.Register(carts)
	host.Start()
	defer host.Close()

	b, _ := pgbridge.New(pgbridge.Config{Pool: pool,
		Routes: map[string]pgbridge.Table{actor.TypeName[Shipped](): outbox}})
	repo := pgbridge.Repository{Broker: b, Table: inbox}
	pgbridge.Send(ctx, b, pool, repo, "cart-7", Order{Item: "tea", Qty: 1})
	pgbridge.Send(ctx, b, pool, repo, "cart-7", Order{Item: "cups", Qty: 2})
	b.Subscribe(&pgbridge.Subscription{Table: inbox, Form: pgbridge.RowLock, Ordered: true},
		pgbridge.Objects(host, "cart", pgbridge.ObjectOptions{Replies: pgbridge.Routed{Broker: b}}))
	b.Start()
	waitEmpty(pool, "orders")
	b.Stop(ctx)

	rows, _ := pool.Query(ctx, "SELECT key, convert_from(payload, 'UTF8') FROM shipments ORDER BY id")
	var out []string
	for rows.Next() {
		var k, p string
		rows.Scan(&k, &p)
		out = append(out, k+" "+p)
	}
	sort.Strings(out)
	for _, s := range out {
		fmt.Println(s)
	}
	// Output:
	// cart-7 {"Order":"cart-7/1"}
	// cart-7 {"Order":"cart-7/2"}
}

// A transactional publish: the message is inserted in the caller's own
// transaction and exists exactly when that transaction commits.
func ExampleSend_transactional() {
	ctx := context.Background()
	pool, done := exampleDB()
	defer done()
	inbox := pgbridge.Table{Name: "orders"}
	pgbridge.Migrate(ctx, pool, inbox)
	b, _ := pgbridge.New(pgbridge.Config{Pool: pool})
	defer b.Close()

	tx, _ := pool.Begin(ctx)
	// ... the service's own writes in tx ...
	if err := pgbridge.Send(ctx, b, tx, pgbridge.Repository{Broker: b, Table: inbox}, "cart-1", Order{Item: "tea", Qty: 1}); err != nil {
		panic(err)
	}
	tx.Commit(ctx)

	var n int
	pool.QueryRow(ctx, "SELECT count(*) FROM orders").Scan(&n)
	fmt.Println("rows:", n)
	// Output: rows: 1
}

// Backoff is the default delay of a retry the handler did not time: a
// subscription that wants its rows back sooner caps it.
func ExampleBackoff() {
	s := &pgbridge.Subscription{
		Table:      pgbridge.Table{Name: "inbox"},
		RetryDelay: func(attempt int) time.Duration { return min(pgbridge.Backoff(attempt), time.Minute) },
	}
	fmt.Println(pgbridge.Backoff(3) > time.Minute, s.RetryDelay(3) == time.Minute)
	// Output: true true
}
