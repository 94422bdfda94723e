package pgbridge

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

type Job struct {
	Key string
	N   int
}

func TestMessagesEveryFormRunsEachRowOnce(t *testing.T) {
	for _, form := range []Form{RowLock, Lease, Advisory} {
		for _, batch := range []int{1, 16} {
			t.Run(fmt.Sprintf("%s/batch=%d", form, batch), func(t *testing.T) {
				pool, _ := newPool(t)
				tb := Table{Name: "inbox", DeadLetter: "inbox_dead"}
				migrate(t, pool, tb)
				b := newBroker(t, Config{Pool: pool})
				const rows = 300
				for i := 0; i < rows; i++ {
					if err := Send(bg, b, pool, Repository{Broker: b, Table: tb}, fmt.Sprint("k", i%7), Job{N: i}); err != nil {
						t.Fatal(err)
					}
				}
				ta := newTally()
				subscribe(t, b, &Subscription{Table: tb, Form: form, Workers: 3, Batch: batch, PollInterval: 20 * time.Millisecond},
					Messages(func(ctx context.Context, d *Delivery, m Job) Outcome { ta.ran(m.N); return Ack }))
				waitFor(t, "every row settled", func() bool { return count(t, pool, "inbox") == 0 })
				if err := b.Stop(bg); err != nil {
					t.Fatal(err)
				}
				ta.exactlyOnce(t, rows)
				if st := b.Stats(); st.Claimed != rows || st.Acked != rows {
					t.Errorf("stats %+v", st)
				}
			})
		}
	}
}

// TestEveryFormInTextFormatModes: pools in simple-protocol and exec mode
// (as behind PgBouncer) read every column in text format; every form
// still decodes payloads (hex bytea), lease tokens and headers.
func TestEveryFormInTextFormatModes(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		for _, form := range []Form{RowLock, Lease, Advisory} {
			t.Run(fmt.Sprintf("%v/%s", mode, form), func(t *testing.T) {
				db := pgtest.New(t)
				cfg, err := pgxpool.ParseConfig(db.URL)
				if err != nil {
					t.Fatal(err)
				}
				cfg.ConnConfig.DefaultQueryExecMode = mode
				pool, err := pgxpool.NewWithConfig(bg, cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer pool.Close()
				tb := Table{Name: "inbox"}
				migrate(t, pool, tb)
				b := newBroker(t, Config{Pool: pool})
				repo := Repository{Broker: b, Table: tb}
				for i := 0; i < 20; i++ {
					if err := repo.Publish(bg, pool, Outgoing{Key: fmt.Sprint("k", i%3), Type: "Job", ContentType: "application/json",
						Body: []byte(fmt.Sprintf(`{"N":%d}`, i)), Headers: map[string]string{"i": fmt.Sprint(i)}}); err != nil {
						t.Fatal(err)
					}
				}
				ta := newTally()
				subscribe(t, b, &Subscription{Table: tb, Form: form, Batch: 4, Ordered: true, PollInterval: 10 * time.Millisecond},
					Messages(func(ctx context.Context, d *Delivery, m Job) Outcome {
						h, err := d.Headers()
						if err != nil || h["i"] != fmt.Sprint(m.N) {
							t.Errorf("row %d: headers %v, %v", m.N, h, err)
						}
						ta.ran(m.N)
						return Ack
					}))
				waitFor(t, "every row settled", func() bool { return count(t, pool, "inbox") == 0 })
				if err := b.Stop(bg); err != nil {
					t.Fatal(err)
				}
				ta.exactlyOnce(t, 20)
				if st := b.Stats(); st.DecodeFailures != 0 || st.LeaseLost != 0 {
					t.Errorf("stats %+v", st)
				}
			})
		}
	}
}
