package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/pgstore"
	"github.com/jackc/pgx/v5/pgxpool"
)

// holdLock runs lockSQL in a transaction of its own, then call, which
// waits for that lock. Once call is seen waiting (the database lists a
// session of the test's database waiting on a lock), the lock is held for
// another hold (an injected delay: the time a slow holder takes), and let
// go. It returns call's error and the database's time at the let-go.
func holdLock(t *testing.T, pool *pgxpool.Pool, lockSQL string, hold time.Duration, call func() error) (error, time.Time) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, lockSQL); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- call() }()
	testutil.WaitForWithin(t, "the call to wait for the lock", time.Minute, func() bool {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	time.Sleep(hold)
	var released time.Time
	if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&released); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	return <-done, released
}

// A lease granted by a renewal or a join that first waited for a lock
// (behind a slow takeover, sweep or change) runs its full length from
// when the lock was granted, not from when the call's transaction began:
// a Join that waited longer than a lease for the revision lock once
// committed a member already expired, which the next sweep then ended.
// And a store renewal that waited for its lease behind a takeover says
// the lease lapsed if it ran out meanwhile: its time is taken once the
// lock is granted, not before the wait.
func TestALeaseGrantedAfterAWaitForALockRunsFromTheGrant(t *testing.T) {
	const ttl = time.Second
	ctx := context.Background()
	deadlineOf := func(t *testing.T, pool *pgxpool.Pool, sql, name string) time.Time {
		t.Helper()
		var d time.Time
		if err := pool.QueryRow(ctx, sql, name).Scan(&d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	t.Run("a membership join behind the revision lock", func(t *testing.T) {
		pool, _ := newPool(t)
		m, err := pgstore.OpenMembership(ctx, pool, pgstore.MembershipOptions{TTL: ttl, SweepEvery: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		err, released := holdLock(t, pool, `SELECT rev FROM pgstore_membership_rev FOR UPDATE`, 2*ttl, func() error {
			_, err := m.Join(ctx, membership.Member{Name: "late", Address: "l", LeaseGen: 1})
			return err
		})
		if err != nil {
			t.Fatalf("Join: %v", err)
		}
		if d := deadlineOf(t, pool, `SELECT deadline FROM pgstore_members WHERE name = $1`, "late"); d.Before(released.Add(ttl)) {
			t.Fatalf("the joined member's lease ends %v after the revision lock was let go; want at least its length, %v", d.Sub(released), ttl)
		}
		if _, err := m.Renew(ctx, "late", 1); err != nil {
			t.Fatalf("Renew right after the Join: %v", err)
		}
	})
	t.Run("a membership renewal behind its row's lock", func(t *testing.T) {
		pool, _ := newPool(t)
		m, err := pgstore.OpenMembership(ctx, pool, pgstore.MembershipOptions{TTL: ttl, SweepEvery: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		if _, err := m.Join(ctx, membership.Member{Name: "held", Address: "h", LeaseGen: 1}); err != nil {
			t.Fatal(err)
		}
		err, released := holdLock(t, pool, `SELECT 1 FROM pgstore_members WHERE name = 'held' FOR UPDATE`, ttl/4, func() error {
			_, err := m.Renew(ctx, "held", 1)
			return err
		})
		if err != nil {
			t.Fatalf("Renew: %v", err)
		}
		if d := deadlineOf(t, pool, `SELECT deadline FROM pgstore_members WHERE name = $1`, "held"); d.Before(released.Add(ttl)) {
			t.Fatalf("the renewed member's lease ends %v after its row's lock was let go; want at least its length, %v", d.Sub(released), ttl)
		}
	})
	t.Run("a store lease renewal behind its row's lock", func(t *testing.T) {
		pool, _ := newPool(t)
		s, err := pgstore.Open(ctx, pool, pgstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.RenewLease(ctx, "h", 1, ttl); err != nil {
			t.Fatal(err)
		}
		var lapsed bool
		// Held as a takeover holds it (Reserve: FOR SHARE of the owner's
		// lease, which it judged run out).
		err, released := holdLock(t, pool, `SELECT 1 FROM pgstore_leases WHERE host = 'h' FOR SHARE`, 2*ttl, func() error {
			l, err := s.RenewLease(ctx, "h", 1, ttl)
			lapsed = l.Lapsed
			return err
		})
		if err != nil {
			t.Fatalf("RenewLease: %v", err)
		}
		if d := deadlineOf(t, pool, `SELECT deadline FROM pgstore_leases WHERE host = $1`, "h"); d.Before(released.Add(ttl)) {
			t.Fatalf("the renewed lease ends %v after its row's lock was let go; want at least its length, %v", d.Sub(released), ttl)
		}
		// It ran out while the renewal waited for the lock: the lock's
		// holder, a takeover, may have taken rows of it. An answer that
		// said it had not would have the host run objects another host
		// now owns.
		if !lapsed {
			t.Fatalf("the renewal that waited %v for its lease's lock answered Lapsed false; the lease (%v) ran out meanwhile", 2*ttl, ttl)
		}
	})
}
