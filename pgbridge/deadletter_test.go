package pgbridge

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/berthrt/berth/payload"
)

// Redrive moves chosen dead letters back into their inbox — new rows,
// attempt 0, ready now — and they run again; PruneDeadLetters deletes the
// dead letters older than a time.
func TestRedriveRunsDeadLettersAgainAndPruneDeletesOldOnes(t *testing.T) {
	pool, tb, b := deadLetterInbox(t)
	sendJobs(t, b, tb, 3) // N 0, 1, 2
	var mu sync.Mutex
	var ran []int
	fail := true
	subscribe(t, b, &Subscription{Table: tb, PollInterval: time.Minute},
		Messages(func(ctx context.Context, d *Delivery, m Job) Outcome {
			mu.Lock()
			defer mu.Unlock()
			ran = append(ran, m.N)
			if fail {
				return DeadLetterWith("not now")
			}
			if d.Attempt != 1 {
				t.Errorf("a redriven row ran at attempt %d, want 1", d.Attempt)
			}
			return Ack
		}))
	waitFor(t, "three dead letters", func() bool { return count(t, pool, "inbox_dead") == 3 })
	var ids []int64
	rows, err := pool.Query(bg, "SELECT id FROM inbox_dead ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	mu.Lock()
	fail, ran = false, nil
	mu.Unlock()
	if n, err := b.Redrive(bg, tb, []int64{ids[0], ids[2], 999}); err != nil || n != 2 {
		t.Fatalf("Redrive: %d, %v; want 2 moved", n, err)
	}
	waitFor(t, "the redriven rows ran", func() bool { return count(t, pool, "inbox") == 0 && b.Stats().Acked == 2 })
	mu.Lock()
	got := slices.Clone(ran)
	mu.Unlock()
	if !slices.Equal(got, []int{0, 2}) || count(t, pool, "inbox_dead") != 1 {
		t.Fatalf("ran %v, %d dead letters left; want [0 2] and 1", got, count(t, pool, "inbox_dead"))
	}
	if n, err := b.PruneDeadLetters(bg, tb, time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("Prune of those older than an hour: %d, %v; want 0", n, err)
	}
	if n, err := b.PruneDeadLetters(bg, tb, time.Now().Add(time.Minute)); err != nil || n != 1 || count(t, pool, "inbox_dead") != 0 {
		t.Fatalf("Prune of those older than now: %d, %v; want 1", n, err)
	}
	if _, err := b.Redrive(bg, Table{Name: "inbox"}, ids); !errors.Is(err, payload.NotConfigured) {
		t.Fatalf("Redrive without a dead-letter table: %v, want NotConfigured", err)
	}
}
