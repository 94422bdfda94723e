package pgbridge

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/payload"
)

// A failed publish carries the kind of its cause: a unique key already
// taken is AlreadyExists, a column the table does not have NotFound, a
// trigger's or constraint's refusal Rejected, a malformed value
// InvalidOperation, a deadline DeadlineExceeded — none of them Unavailable,
// which says that sending again may succeed. A pool that is closed is
// Unavailable. (Every failure used to be Unavailable.)
func TestAFailedPublishCarriesTheKindOfItsCause(t *testing.T) {
	pool, _ := newPool(t)
	tb := Table{Name: "inbox"}
	migrate(t, pool, tb)
	if _, err := pool.Exec(bg, `CREATE UNIQUE INDEX inbox_unique_key ON inbox (key) WHERE key LIKE 'u%';
		ALTER TABLE inbox ADD CONSTRAINT short_key CHECK (length(key) < 40);
		CREATE FUNCTION refuse_bad() RETURNS trigger AS $$
		BEGIN IF NEW.key = 'bad' THEN RAISE EXCEPTION 'no bad keys'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql;
		CREATE TRIGGER refuse BEFORE INSERT ON inbox FOR EACH ROW EXECUTE FUNCTION refuse_bad();`); err != nil {
		t.Fatal(err)
	}
	b := newBroker(t, Config{Pool: pool})
	repo := Repository{Broker: b, Table: tb}
	if err := Send(bg, b, pool, repo, "u1", Job{}); err != nil {
		t.Fatal(err)
	}
	expired, cancel := context.WithDeadline(bg, time.Now().Add(-time.Second))
	defer cancel()
	for _, c := range []struct {
		what string
		err  error
		want payload.Kind
	}{
		{"a unique key taken", Send(bg, b, pool, repo, "u1", Job{}), payload.AlreadyExists},
		{"a missing column", Send(bg, b, pool, Repository{Broker: b, Table: Table{Name: "inbox", Columns: Columns{Type: "kind"}}}, "k", Job{}), payload.NotFound},
		{"a missing table", Send(bg, b, pool, Repository{Broker: b, Table: Table{Name: "nope"}}, "k", Job{}), payload.NotFound},
		{"a trigger's refusal", Send(bg, b, pool, repo, "bad", Job{}), payload.Rejected},
		{"a check constraint", Send(bg, b, pool, repo, "a key far longer than forty bytes, refused", Job{}), payload.Rejected},
		{"a malformed value", repo.Publish(bg, pool, Outgoing{Key: "k\x00", Type: "t", ContentType: "application/json"}), payload.InvalidOperation},
		{"a deadline", Send(expired, b, pool, repo, "k", Job{}), payload.DeadlineExceeded},
	} {
		if c.err == nil || !errors.Is(c.err, c.want) || errors.Is(c.err, payload.Unavailable) {
			t.Errorf("%s: %v (kind %v), want kind %v", c.what, c.err, payload.KindOf(c.err), c.want)
		}
	}
	pool.Close()
	if err := Send(bg, b, pool, repo, "k", Job{}); !errors.Is(err, payload.Unavailable) {
		t.Errorf("a closed pool: %v, want Unavailable", err)
	}
}

// A row whose payload does not decode never reaches the handler: the
// DecodeDrop policy (the default) deletes it, counted as dropped;
// DecodeRetry makes it ready again after DecodeRetryDelay, its attempt
// counted.
func TestAnUndecodableRowIsSettledByTheDecodePolicy(t *testing.T) {
	for _, policy := range []DecodePolicy{DecodeDrop, DecodeRetry} {
		t.Run(map[DecodePolicy]string{DecodeDrop: "drop", DecodeRetry: "retry"}[policy], func(t *testing.T) {
			pool, _ := newPool(t)
			tb := Table{Name: "inbox"}
			migrate(t, pool, tb)
			b := newBroker(t, Config{Pool: pool})
			if err := (Repository{Broker: b, Table: tb}).Publish(bg, pool, Outgoing{Key: "k", Type: "Job", ContentType: "application/json", Body: []byte(`{"N":`)}); err != nil {
				t.Fatal(err)
			}
			var ran atomic.Int32
			subscribe(t, b, &Subscription{Table: tb, DecodePolicy: policy, DecodeRetryDelay: time.Hour, PollInterval: 10 * time.Millisecond},
				Messages(func(ctx context.Context, d *Delivery, m Job) Outcome { ran.Add(1); return Ack }))
			waitFor(t, "the row settled", func() bool { st := b.Stats(); return st.Dropped+st.Retried == 1 })
			b.Close()
			st := b.Stats()
			if ran.Load() != 0 || st.DecodeFailures != 1 {
				t.Fatalf("the handler ran %d times, %d decode failures; want 0 and 1", ran.Load(), st.DecodeFailures)
			}
			if policy == DecodeDrop {
				if st.Dropped != 1 || count(t, pool, "inbox") != 0 {
					t.Fatalf("stats %+v, %d rows left; want the row dropped", st, count(t, pool, "inbox"))
				}
				return
			}
			var attempt int
			var later bool
			if err := pool.QueryRow(bg, "SELECT attempt, run_at > now() + interval '50 minutes' FROM inbox").Scan(&attempt, &later); err != nil {
				t.Fatal(err)
			}
			if st.Retried != 1 || attempt != 1 || !later {
				t.Fatalf("stats %+v, attempt %d, an hour away %v; want retried in an hour", st, attempt, later)
			}
		})
	}
}
