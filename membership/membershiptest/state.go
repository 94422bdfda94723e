package membershiptest

import (
	"fmt"
	"testing"

	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/payload"
)

func (s *suite) legalStateTransitions(t *testing.T) {
	m, _ := s.h.New(t)
	ctx := s.ctx(t)
	mustJoin(t, ctx, m, member("a", 1))
	ch, first := s.watch(t, ctx, m)
	got, err := m.SetState(ctx, "a", 1, membership.Draining)
	if err != nil || got.State != membership.Draining || got.Name != "a" {
		t.Fatalf("SetState draining = %+v, %v", got, err)
	}
	wantList(t, ctx, m, "a/1/draining")
	if got, err := m.SetState(ctx, "a", 1, membership.Draining); err != nil || got.State != membership.Draining {
		t.Fatalf("SetState to the current state = %+v, %v; want a no-op", got, err)
	}
	if got, err := m.SetState(ctx, "a", 1, membership.Gone); err != nil || got.State != membership.Gone {
		t.Fatalf("SetState gone = %+v, %v", got, err)
	}
	wantList(t, ctx, m) // Gone is not listed
	if _, err := m.Renew(ctx, "a", 1); err != nil {
		t.Fatalf("Renew of a gone member (it keeps its name): %v", err)
	}
	_, err = m.Join(ctx, member("a", 2))
	wantErr(t, "Join while the gone run still holds its lease", err, membership.ErrNameTaken)
	s.expectEvents(t, ch, first.Rev, "state changed a/1 serving->draining", "state changed a/1 draining->gone")
}

func (s *suite) illegalStateTransitionsRefused(t *testing.T) {
	m, _ := s.h.New(t)
	ctx := s.ctx(t)
	mustJoin(t, ctx, m, member("a", 1))
	for _, c := range []struct {
		from membership.State
		to   []membership.State
	}{
		{membership.Serving, []membership.State{membership.Gone, 0, membership.State(9)}},
		{membership.Draining, []membership.State{membership.Serving, 0}},
		{membership.Gone, []membership.State{membership.Serving, membership.Draining}},
	} {
		if c.from != membership.Serving {
			if _, err := m.SetState(ctx, "a", 1, c.from); err != nil {
				t.Fatalf("SetState %s: %v", c.from, err)
			}
		}
		for _, to := range c.to {
			_, err := m.SetState(ctx, "a", 1, to)
			wantErr(t, fmt.Sprintf("SetState %s->%s", c.from, to), err, membership.ErrIllegalTransition, payload.InvalidOperation)
			if c.from == membership.Gone {
				wantList(t, ctx, m)
			} else {
				wantList(t, ctx, m, "a/1/"+c.from.String())
			}
		}
	}
}

func (s *suite) setStateWithStaleGenerationRefused(t *testing.T) {
	m, _ := s.h.New(t)
	ctx := s.ctx(t)
	mustJoin(t, ctx, m, member("a", 2))
	_, err := m.SetState(ctx, "a", 1, membership.Draining)
	wantGenErr(t, "SetState of an older generation", err, 2)
	_, err = m.SetState(ctx, "nobody", 1, membership.Draining)
	wantErr(t, "SetState of an unknown name", err, membership.ErrNotMember, payload.NotFound)
	wantList(t, ctx, m, "a/2/serving")
}

func (s *suite) leaveRemovesTheMember(t *testing.T) {
	m, _ := s.h.New(t)
	ctx := s.ctx(t)
	mustJoin(t, ctx, m, member("a", 1))
	ch, first := s.watch(t, ctx, m)
	if err := m.Leave(ctx, "a", 1); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	wantList(t, ctx, m)
	if err := m.Leave(ctx, "a", 1); err != nil {
		t.Fatalf("Leave again: %v", err)
	}
	_, err := m.Renew(ctx, "a", 1)
	wantErr(t, "Renew after Leave", err, membership.ErrNotMember, payload.NotFound)
	_, err = m.SetState(ctx, "a", 1, membership.Draining)
	wantErr(t, "SetState after Leave", err, membership.ErrNotMember, payload.NotFound)
	_, err = m.Join(ctx, member("a", 1))
	wantGenErr(t, "Join of the run that left", err, 1)
	mustJoin(t, ctx, m, member("a", 2)) // the name is free at once
	wantList(t, ctx, m, "a/2/serving")
	err = m.Leave(ctx, "nobody", 1)
	wantErr(t, "Leave of an unknown name", err, membership.ErrNotMember, payload.NotFound)
	s.expectEvents(t, ch, first.Rev, "left a/1/serving", "joined a/2/serving")
}

func (s *suite) leaveByAnOlderRunRefused(t *testing.T) {
	m, advance := s.h.New(t)
	ctx := s.ctx(t)
	mustJoin(t, ctx, m, member(keeper, 1))
	mustJoin(t, ctx, m, member("a", 1))
	s.pass(t, ctx, m, advance, s.h.TTL+s.h.TTL/10, keeper)
	wantList(t, ctx, m, keeper+"/1/serving")
	mustJoin(t, ctx, m, member("a", 2))
	err := m.Leave(ctx, "a", 1)
	wantGenErr(t, "Leave by the expired run", err, 2)
	wantList(t, ctx, m, "a/2/serving", keeper+"/1/serving")
}
