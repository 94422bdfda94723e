package pgstore_test

import (
	"testing"
	"time"

	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/pgstore"
)

// BenchmarkRenewLease renews one host's lease in the Location Store, as
// the host's renewer does every LeaseRenew (the end of a silence, the old
// lease, the renewal).
func BenchmarkRenewLease(b *testing.B) {
	s := openOn(b, poolFor(b))
	for b.Loop() {
		if _, err := s.RenewLease(bg, "h", 1, 3500*time.Millisecond); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMembershipRenew renews one member's lease in the membership.
func BenchmarkMembershipRenew(b *testing.B) {
	pool := poolFor(b)
	m, err := pgstore.OpenMembership(bg, pool, pgstore.MembershipOptions{TTL: 3500 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(m.Close)
	if _, err := m.Join(bg, membership.Member{Name: "h", Address: "a", LeaseGen: 1}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := m.Renew(bg, "h", 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawLeaseUpsert is the renewals' floor: raw pgx moving one
// lease row's deadline on with one statement (one round trip, one
// commit), with no silence, no read of the old lease and no answer.
func BenchmarkRawLeaseUpsert(b *testing.B) {
	pool := poolFor(b)
	openOn(b, pool) // the schema
	const upsert = `INSERT INTO pgstore_leases (host, gen, deadline, renewed_at, ttl_us)
	VALUES ($1, 1, now() + interval '3.5 seconds', now(), 3500000)
	ON CONFLICT (host) DO UPDATE SET deadline = excluded.deadline, renewed_at = excluded.renewed_at`
	for b.Loop() {
		if _, err := pool.Exec(bg, upsert, "h"); err != nil {
			b.Fatal(err)
		}
	}
}
