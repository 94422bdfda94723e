package pgbridge_test

import (
	"context"
	"fmt"
	"time"

	"github.com/berthrt/berth/pgbridge"
)

// SendWith reports the row it inserted; a message whose dedupe key is that
// of a row still in the table is not inserted again.
func ExampleSendWith() {
	ctx := context.Background()
	pool, done := exampleDB()
	defer done()
	inbox := pgbridge.Table{Name: "orders"}
	if err := pgbridge.Migrate(ctx, pool, inbox); err != nil {
		panic(err)
	}
	b, _ := pgbridge.New(pgbridge.Config{Pool: pool})
	repo := pgbridge.Repository{Broker: b, Table: inbox}
	for range 2 {
		p, err := pgbridge.SendWith(ctx, b, pool, repo, "cart-1", Order{Item: "tea", Qty: 2},
			pgbridge.SendOptions{DedupeKey: "order-17", Priority: 5})
		if err != nil {
			panic(err)
		}
		fmt.Println("inserted:", p.ID > 0, "duplicate:", p.Duplicate)
	}
	// Output:
	// inserted: true duplicate: false
	// inserted: false duplicate: true
}

// SendMany inserts many messages with one statement and reports each.
func ExampleSendMany() {
	ctx := context.Background()
	pool, done := exampleDB()
	defer done()
	inbox := pgbridge.Table{Name: "orders"}
	if err := pgbridge.Migrate(ctx, pool, inbox); err != nil {
		panic(err)
	}
	b, _ := pgbridge.New(pgbridge.Config{Pool: pool})
	ps, err := pgbridge.SendMany(ctx, b, pool, pgbridge.Repository{Broker: b, Table: inbox}, []pgbridge.Keyed[Order]{
		{Key: "cart-1", Msg: Order{Item: "tea", Qty: 2}},
		{Key: "cart-2", Msg: Order{Item: "cups", Qty: 6}, Opts: pgbridge.SendOptions{RunAt: time.Now().Add(time.Hour)}},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(len(ps), "rows, in order:", ps[0].ID < ps[1].ID)
	// Output: 2 rows, in order: true
}

// Redrive sends dead letters back to their inbox; Backlog says what is
// waiting; a paused subscription claims nothing.
func ExampleBroker_Redrive() {
	ctx := context.Background()
	pool, done := exampleDB()
	defer done()
	inbox := pgbridge.Table{Name: "orders", DeadLetter: "orders_dead"}
	if err := pgbridge.Migrate(ctx, pool, inbox); err != nil {
		panic(err)
	}
	b, _ := pgbridge.New(pgbridge.Config{Pool: pool})
	defer b.Close()
	// A row that was dead-lettered earlier.
	if _, err := pool.Exec(ctx, `INSERT INTO orders_dead (id, key, payload, reason) VALUES (7, 'cart-1', '{"Item":"tea","Qty":2}', 'out of stock')`); err != nil {
		panic(err)
	}
	sub := &pgbridge.Subscription{Table: inbox, Name: "orders"}
	sub.Pause()
	b.Subscribe(sub, pgbridge.Messages(func(ctx context.Context, d *pgbridge.Delivery, o Order) pgbridge.Outcome { return pgbridge.Ack }))
	if err := b.Start(); err != nil {
		panic(err)
	}
	n, err := b.Redrive(ctx, inbox, []int64{7})
	if err != nil {
		panic(err)
	}
	bl, _ := b.Backlog(ctx)
	fmt.Println("redriven:", n, "ready:", bl[0].Ready)
	sub.Resume()
	waitEmpty(pool, "orders")
	fmt.Println("done")
	// Output:
	// redriven: 1 ready: 1
	// done
}
