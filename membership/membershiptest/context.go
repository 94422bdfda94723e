package membershiptest

import (
	"context"
	"testing"
	"time"

	"github.com/berthrt/berth/membership"
)

func (s *suite) contextCancellationHonoured(t *testing.T) {
	m, _ := s.h.New(t)
	ctx := s.ctx(t)
	mustJoin(t, ctx, m, member("a", 1))
	watchCtx, stopWatch := context.WithCancel(ctx)
	ch, _ := s.watch(t, watchCtx, m)

	dead, cancel := context.WithCancel(ctx)
	cancel()
	_, err := m.Join(dead, member("b", 1))
	wantErr(t, "Join with a cancelled context", err, context.Canceled)
	_, err = m.Renew(dead, "a", 1)
	wantErr(t, "Renew with a cancelled context", err, context.Canceled)
	_, err = m.SetState(dead, "a", 1, membership.Draining)
	wantErr(t, "SetState with a cancelled context", err, context.Canceled)
	wantErr(t, "Leave with a cancelled context", m.Leave(dead, "a", 1), context.Canceled)
	_, err = m.Members(dead)
	wantErr(t, "Members with a cancelled context", err, context.Canceled)
	_, err = m.Watch(dead)
	wantErr(t, "Watch with a cancelled context", err, context.Canceled)
	wantList(t, ctx, m, "a/1/serving") // nothing changed

	// Cancelling a watch closes its channel; it may deliver nothing more
	// that happened after, but must close.
	stopWatch()
	mustJoin(t, ctx, m, member("c", 1))
	timer := time.NewTimer(s.h.Wait)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timer.C:
			t.Fatalf("watch channel still open %v after its context was cancelled", s.h.Wait)
		}
	}
}
