package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/berthrt/berth/relocation"
)

// Implementations must honour ctx: a call whose ctx is done (cancelled, or
// past its deadline) fails and writes nothing. Which error it returns is
// not fixed (ctx.Err() or one wrapping it is the natural choice); actor
// treats any store error as Unavailable. Each call gets a fresh store, so
// that one call's wrongful write cannot hide or fake another's.
func aDoneContextFailsTheCall(t *testing.T, x *suite) {
	calls := []struct {
		name string
		call func(ctx context.Context, s relocation.Store, r relocation.Row) error
	}{
		{"Get", func(ctx context.Context, s relocation.Store, r relocation.Row) error {
			_, err := s.Get(ctx, objA)
			return err
		}},
		{"Reserve", func(ctx context.Context, s relocation.Store, r relocation.Row) error {
			_, err := s.Reserve(ctx, objB, "A")
			return err
		}},
		{"Commit", func(ctx context.Context, s relocation.Store, r relocation.Row) error {
			_, err := s.Commit(ctx, objA, r.Ownership)
			return err
		}},
		{"NewOwner", func(ctx context.Context, s relocation.Store, r relocation.Row) error {
			_, err := s.NewOwner(ctx, objA, r.Ownership, "B")
			return err
		}},
		{"Preserve", func(ctx context.Context, s relocation.Store, r relocation.Row) error {
			_, err := s.Preserve(ctx, objA, r.Ownership, []byte("o"))
			return err
		}},
		{"Delete", func(ctx context.Context, s relocation.Store, r relocation.Row) error {
			return s.Delete(ctx, objA, r.Ownership)
		}},
		{"RenewLease", func(ctx context.Context, s relocation.Store, r relocation.Row) error {
			_, err := s.RenewLease(ctx, "A", 2, 0)
			return err
		}},
		{"Lease", func(ctx context.Context, s relocation.Store, r relocation.Row) error {
			_, _, err := s.Lease(ctx, "A")
			return err
		}},
	}
	dones := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"Cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}},
		{"PastDeadline", func() (context.Context, context.CancelFunc) {
			return context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		}},
	}
	for _, d := range dones {
		for _, c := range calls {
			t.Run(d.name+"/"+c.name, func(t *testing.T) {
				y := &suite{h: x.h, s: x.h.New(t), ctx: x.ctx}
				la := y.lease(t, "A", 1)
				y.lease(t, "B", 1)
				// A reserved row: the conditional writes would all succeed
				// with its ownership and a live ctx.
				r := y.reserve(t, objA, "A")
				ctx, cancel := d.ctx()
				defer cancel()
				if err := c.call(ctx, y.s, r); err == nil {
					t.Errorf("%s with a done ctx succeeded", c.name)
				}
				y.unchanged(t, objA, r, c.name+" with a done ctx")
				if _, err := y.s.Get(y.ctx, objB); !errors.Is(err, relocation.ErrNoRow) {
					t.Errorf("Reserve with a done ctx made a row: Get = %v", err)
				}
				if l, _, _ := y.s.Lease(y.ctx, "A"); l.Gen != la.Gen || !l.Deadline.Equal(la.Deadline) {
					t.Errorf("RenewLease with a done ctx changed the lease from %+v to %+v", la, l)
				}
			})
		}
	}
}
