package storetest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/berthrt/berth/relocation"
)

// contenders is how many goroutines race in the concurrency checks; rounds
// is how many objects they race for.
const (
	contenders = 16
	rounds     = 20
)

// race runs call(i) for every contender at once and returns the results.
func race(call func(i int) (relocation.Row, error)) ([]relocation.Row, []error) {
	rows, errs := make([]relocation.Row, contenders), make([]error, contenders)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range contenders {
		wg.Go(func() {
			<-start
			rows[i], errs[i] = call(i)
		})
	}
	close(start)
	wg.Wait()
	return rows, errs
}

// oneWinner checks that exactly one call succeeded and every other one got
// a conflict naming the winner, and that the store holds the winner's row.
func (x *suite) oneWinner(t *testing.T, obj relocation.Object, rows []relocation.Row, errs []error, newer bool) {
	t.Helper()
	win := -1
	for i, err := range errs {
		if err == nil {
			if win >= 0 {
				t.Fatalf("%v: two winners: %s and %s", obj, fmtRow(rows[win]), fmtRow(rows[i]))
			}
			win = i
		}
	}
	if win < 0 {
		t.Fatalf("%v: no winner; first error: %v", obj, errs[0])
	}
	w := rows[win]
	x.unchanged(t, obj, w, "the race (winner's row)")
	for i, err := range errs {
		if i == win {
			continue
		}
		ce := conflict(t, err, fmt.Sprintf("%v: loser %d", obj, i))
		if !sameRow(ce.Current, w) {
			t.Errorf("%v: loser %d's conflict shows %s, want the winner's row %s", obj, i, fmtRow(ce.Current), fmtRow(w))
		}
		if ce.NewerOwner != newer {
			t.Errorf("%v: loser %d's conflict has NewerOwner %v, want %v", obj, i, ce.NewerOwner, newer)
		}
	}
}

func hostName(i int) string { return fmt.Sprintf("H%02d", i) }

func concurrentReservesHaveOneWinner(t *testing.T, x *suite) {
	for i := range contenders {
		x.lease(t, hostName(i), 1)
	}
	for n := range rounds {
		// A new row, then the same row preserved: both free for all.
		obj := relocation.Object{Kind: "storetest", ID: fmt.Sprint("race-", n)}
		rows, errs := race(func(i int) (relocation.Row, error) { return x.s.Reserve(x.ctx, obj, hostName(i)) })
		x.oneWinner(t, obj, rows, errs, false)
		r := x.get(t, obj)
		p := x.preserve(t, obj, x.commit(t, obj, r.Ownership).Ownership, nil)
		rows, errs = race(func(i int) (relocation.Row, error) { return x.s.Reserve(x.ctx, obj, hostName(i)) })
		x.oneWinner(t, obj, rows, errs, false)
		if w := x.get(t, obj); w.OwnerGen != p.OwnerGen+1 {
			t.Errorf("%v: the winner's owner generation is %d, want %d (one takeover)", obj, w.OwnerGen, p.OwnerGen+1)
		}
	}
}

// Competing moves of one object from the same ownership (a target's CAS
// each): one commits, the others find a newer owner.
func concurrentNewOwnersHaveOneWinner(t *testing.T, x *suite) {
	for i := range contenders {
		x.lease(t, hostName(i), 1)
	}
	x.lease(t, "A", 1)
	for n := range rounds {
		obj := relocation.Object{Kind: "storetest", ID: fmt.Sprint("move-", n)}
		r := x.active(t, obj, "A")
		rows, errs := race(func(i int) (relocation.Row, error) {
			return x.s.NewOwner(x.ctx, obj, r.Ownership, hostName(i))
		})
		x.oneWinner(t, obj, rows, errs, true)
		if w := x.get(t, obj); w.OwnerGen != r.OwnerGen+1 {
			t.Errorf("%v: owner generation %d after the race, want %d", obj, w.OwnerGen, r.OwnerGen+1)
		}
	}
}
