package membershiptest

import (
	"testing"
	"time"

	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/payload"
)

func (s *suite) renewExtendsTheLease(t *testing.T) {
	m, advance := s.h.New(t)
	ctx := s.ctx(t)
	mustJoin(t, ctx, m, member(keeper, 1))
	mustJoin(t, ctx, m, member("a", 1))
	s.pass(t, ctx, m, advance, s.h.TTL*3/4, keeper)
	l, err := m.Renew(ctx, "a", 1)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if l != (membership.Lease{Name: "a", Gen: 1, TTL: s.h.TTL}) {
		t.Fatalf("Renew returned %+v", l)
	}
	s.pass(t, ctx, m, advance, s.h.TTL*3/4, keeper) // 1.5 TTL after the join, 0.75 after the renewal
	wantList(t, ctx, m, "a/1/serving", keeper+"/1/serving")
	s.pass(t, ctx, m, advance, s.h.TTL/2, keeper) // 1.25 TTL after the renewal
	wantList(t, ctx, m, keeper+"/1/serving")
}

func (s *suite) renewWithStaleGenerationRefused(t *testing.T) {
	m, _ := s.h.New(t)
	ctx := s.ctx(t)
	mustJoin(t, ctx, m, member("a", 5))
	_, err := m.Renew(ctx, "a", 4)
	wantGenErr(t, "Renew of an older generation", err, 5)
	_, err = m.Renew(ctx, "a", 6)
	wantGenErr(t, "Renew of a generation that never joined", err, 5)
	_, err = m.Renew(ctx, "nobody", 1)
	wantErr(t, "Renew of an unknown name", err, membership.ErrNotMember, payload.NotFound)
	if _, err := m.Renew(ctx, "a", 5); err != nil {
		t.Fatalf("Renew of the current generation: %v", err)
	}
}

func (s *suite) expiryRemovesTheMember(t *testing.T) {
	m, advance := s.h.New(t)
	ctx := s.ctx(t)
	ch, first := s.watch(t, ctx, m)
	mustJoin(t, ctx, m, member("a", 1))
	mustJoin(t, ctx, m, member("b", 1))
	rev := s.expectEvents(t, ch, first.Rev, "joined a/1/serving", "joined b/1/serving")
	advance(s.h.TTL / 2)
	if _, err := m.Renew(ctx, "b", 1); err != nil {
		t.Fatalf("Renew b: %v", err)
	}
	// Past a's lease, not b's. b keeps renewing, as a live host does, so
	// the membership is not silent: its sweep, or b's next renewal, finds
	// the expiry.
	s.pass(t, ctx, m, advance, s.h.TTL/2+s.h.TTL/10, "b")
	s.expectEvents(t, ch, rev, "expired a/1/serving")
	wantList(t, ctx, m, "b/1/serving")
	_, err := m.Renew(ctx, "a", 1)
	wantErr(t, "Renew after expiry", err, membership.ErrLeaseExpired, payload.Unavailable)
	_, err = m.SetState(ctx, "a", 1, membership.Draining)
	wantErr(t, "SetState after expiry", err, membership.ErrLeaseExpired, payload.Unavailable)
	if err := m.Leave(ctx, "a", 1); err != nil {
		t.Fatalf("Leave after expiry: %v", err)
	}
}

// aSilenceOfTheStoreExpiresNothing: a membership that heard no Join or
// Renew for longer than the leases (its store was restarted, failed
// over, cut off from every host) expires nobody for it: the next Renew
// (or Join) gives every live lease a full TTL from then, and a member
// that then keeps renewing stays. Only a member that stops renewing while
// others renew expires.
func (s *suite) aSilenceOfTheStoreExpiresNothing(t *testing.T) {
	m, advance := s.h.New(t)
	ctx := s.ctx(t)
	ch, first := s.watch(t, ctx, m)
	mustJoin(t, ctx, m, member("a", 1))
	mustJoin(t, ctx, m, member("b", 1))
	rev := s.expectEvents(t, ch, first.Rev, "joined a/1/serving", "joined b/1/serving")
	advance(2 * s.h.TTL) // nobody reached the store
	wantList(t, ctx, m, "a/1/serving", "b/1/serving")
	if _, err := m.Renew(ctx, "b", 1); err != nil {
		t.Fatalf("b's renewal after the silence: %v", err)
	}
	s.pass(t, ctx, m, advance, s.h.TTL*3/4, "b")
	if _, err := m.Renew(ctx, "a", 1); err != nil {
		t.Fatalf("a's renewal within the TTL the silence's end gave it: %v", err)
	}
	wantList(t, ctx, m, "a/1/serving", "b/1/serving")
	// a stops renewing while b goes on: a expires, as before.
	s.pass(t, ctx, m, advance, s.h.TTL+s.h.TTL/10, "b")
	s.expectEvents(t, ch, rev, "expired a/1/serving")
	wantList(t, ctx, m, "b/1/serving")
}

// aRefusedJoinIsContact: a Join is contact with the store whether or not
// it succeeds. A lone host that crashed is replaced by a new run whose
// Joins are refused while the old run's lease lasts: the first one after
// a silence gives the old run one more TTL, and the ones after it keep
// the store in contact, so the old run expires and the new one joins
// within that TTL.
func (s *suite) aRefusedJoinIsContact(t *testing.T) {
	m, advance := s.h.New(t)
	ctx := s.ctx(t)
	mustJoin(t, ctx, m, member("a", 1))
	advance(2 * s.h.TTL) // a crashed; nobody else calls
	step := s.h.TTL / 4
	for waited := time.Duration(0); ; waited += step {
		_, err := m.Join(ctx, member("a", 2))
		if err == nil {
			break
		}
		wantErr(t, "Join while the old run's lease lasts", err, membership.ErrNameTaken)
		if waited > s.h.TTL+step {
			t.Fatalf("the new run was refused %v after its first Join: the old run never expires", waited)
		}
		advance(step)
	}
	wantList(t, ctx, m, "a/2/serving")
}

func (s *suite) newGenerationMayRejoinAfterExpiry(t *testing.T) {
	m, advance := s.h.New(t)
	ctx := s.ctx(t)
	mustJoin(t, ctx, m, member(keeper, 1))
	mustJoin(t, ctx, m, member("a", 3))
	s.pass(t, ctx, m, advance, s.h.TTL+s.h.TTL/10, keeper)
	wantList(t, ctx, m, keeper+"/1/serving")
	_, err := m.Join(ctx, member("a", 3))
	wantGenErr(t, "Join of the expired generation", err, 3)
	_, err = m.Join(ctx, member("a", 2))
	wantGenErr(t, "Join of an older generation", err, 3)
	mustJoin(t, ctx, m, member("a", 4))
	wantList(t, ctx, m, "a/4/serving", keeper+"/1/serving")
	_, err = m.Renew(ctx, "a", 3)
	wantGenErr(t, "Renew of the expired run", err, 4)
}
