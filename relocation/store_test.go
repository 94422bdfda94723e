package relocation

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/berthrt/berth/payload"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestMemoryStoreActivationMoveAndConflicts(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Unix(1000, 0)}
	s := NewMemoryStore(c.now)
	obj := Object{Kind: "cart", ID: "1"}
	if _, err := s.Reserve(ctx, obj, "A"); !errors.Is(err, ErrLeaseExpired) {
		t.Fatalf("reserve without a lease = %v", err)
	}
	s.RenewLease(ctx, "A", 1, 0)
	s.RenewLease(ctx, "B", 1, 0)
	r, err := s.Reserve(ctx, obj, "A")
	if err != nil || r.State != Reserved || r.Host != "A" || r.ObjectGen != 1 || r.OwnerGen != 1 {
		t.Fatalf("reserve = %+v, %v", r, err)
	}
	if _, err := s.Reserve(ctx, obj, "B"); !errors.Is(err, payload.Rejected) {
		t.Fatalf("second host reserving a live owner's object = %v, want a conflict", err)
	}
	r, err = s.Commit(ctx, obj, r.Ownership)
	if err != nil || r.State != Active {
		t.Fatalf("commit = %+v, %v", r, err)
	}
	// Move to B: owner generation +1, object generation kept.
	moved, err := s.NewOwner(ctx, obj, r.Ownership, "B")
	if err != nil || moved.Host != "B" || moved.OwnerGen != 2 || moved.ObjectGen != 1 || moved.Version != r.Version+1 {
		t.Fatalf("new owner = %+v, %v", moved, err)
	}
	// A stale move (from the old ownership) finds a newer owner.
	_, err = s.NewOwner(ctx, obj, r.Ownership, "A")
	var ce *ConflictError
	if !errors.As(err, &ce) || !ce.NewerOwner || ce.Current.Host != "B" {
		t.Fatalf("stale move = %v, want a newer-owner conflict", err)
	}
	// Same generation, other version: a plain conflict.
	stale := moved.Ownership
	stale.Version--
	if _, err := s.NewOwner(ctx, obj, stale, "A"); !errors.As(err, &ce) || ce.NewerOwner {
		t.Fatalf("version conflict = %v", err)
	}
	// Preserve keeps generations; the next reservation bumps the owner.
	p, err := s.Preserve(ctx, obj, moved.Ownership, []byte("order"))
	if err != nil || p.State != Preserved || p.Host != "" || p.OwnerGen != 2 {
		t.Fatalf("preserve = %+v, %v", p, err)
	}
	again, err := s.Reserve(ctx, obj, "A")
	if err != nil || again.OwnerGen != 3 || again.ObjectGen != 1 {
		t.Fatalf("reserve after preserve = %+v, %v", again, err)
	}
	// The order state Preserve stored rests with the row for the next
	// activation.
	if string(again.Order) != "order" {
		t.Fatalf("reserve after preserve: order %q, want the preserved one", again.Order)
	}
	if err := s.Delete(ctx, obj, p.Ownership); !errors.Is(err, payload.Rejected) {
		t.Fatalf("delete with stale ownership = %v", err)
	}
	if err := s.Delete(ctx, obj, again.Ownership); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, obj); !errors.Is(err, ErrNoRow) || !errors.Is(err, payload.NotFound) {
		t.Fatalf("get after delete = %v", err)
	}
}

func TestMemoryStoreLeases(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Unix(1000, 0)}
	s := NewMemoryStore(c.now)
	obj := Object{Kind: "cart", ID: "1"}
	l, _ := s.RenewLease(ctx, "A", 1, 0)
	if !l.Deadline.Equal(c.t.Add(LeaseTTL)) {
		t.Fatalf("lease deadline %v", l.Deadline)
	}
	s.RenewLease(ctx, "B", 1, 0)
	r, _ := s.Reserve(ctx, obj, "A")
	s.Commit(ctx, obj, r.Ownership)
	// A stops renewing; after the TTL another host may take the object over.
	c.advance(LeaseRenew)
	s.RenewLease(ctx, "B", 1, 0)
	if _, err := s.Reserve(ctx, obj, "B"); !errors.Is(err, payload.Rejected) {
		t.Fatalf("takeover while A's lease is live = %v", err)
	}
	for range LeaseTTL / LeaseRenew { // B renews as a live host does: the store is never silent
		c.advance(LeaseRenew)
		s.RenewLease(ctx, "B", 1, 0)
	}
	taken, err := s.Reserve(ctx, obj, "B")
	if err != nil || taken.Host != "B" || taken.OwnerGen != 2 {
		t.Fatalf("takeover after A's lease expired = %+v, %v", taken, err)
	}
	// A move to a host without a live lease fails: it could not run turns.
	if _, err := s.NewOwner(ctx, obj, taken.Ownership, "A"); !errors.Is(err, ErrLeaseExpired) {
		t.Fatalf("move to an expired host = %v", err)
	}
	// A restarted A (new generation) replaces its old lease; the old run cannot renew.
	s.RenewLease(ctx, "A", 2, 0)
	if _, err := s.RenewLease(ctx, "A", 1, 0); !errors.Is(err, payload.Rejected) {
		t.Fatalf("old run renewing = %v", err)
	}
}
