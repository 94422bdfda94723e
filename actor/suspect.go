package actor

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/relocation"
)

// The suspicions part (suspicions): failure suspicions from the links,
// and the Location Store checks they start.
//
// A link that breaks (a connection refused or reset, heartbeats missed:
// the transport's Down) is a suspicion, not a fact: the peer may be slow,
// paused or cut off and still own its objects. A suspicion makes this host
// ask the Location Store at once for the peer's lease, and again when the
// store says the lease would run out, until one of three facts ends the
// check:
//
//   - the store reports the peer's run past its lease (its generation with
//     no time left by the store's clock, or a newer run of its name), and
//     the membership, asked at once (which makes a store-backed one sweep
//     its expiries), no longer lists that run: the run is dead. The
//     membership's word is the fact, not the store's lease alone: a run
//     whose lease lapsed can still come back (a host in jeopardy renews
//     and keeps what nobody took over), and the run is over only once the
//     membership ended it — for every host alike. The view drops it at
//     once (confirmed on the membership watch's goroutine, like any
//     membership event), ahead of the membership's own event: its routes
//     are forgotten, what waits for it is routed afresh, and the next
//     message to one of its objects takes the object over — the takeover
//     itself is still judged by the store's lease alone (router.peerLive);
//   - the link comes back up, or the membership no longer lists that run
//     (it left, went Gone, or expired): nothing to confirm;
//   - this host closes.
//
// Without suspicions a crashed host's objects waited for the membership's
// expiry sweep and its watchers' polls after the lease ran out. While the
// membership still lists a run whose store lease ran out (its lease there
// is renewed just after, so it runs out just after), the check asks it
// again every suspectPace.
//
// Owns: the runs under check (one check per peer run at a time).
// Lock: mu, a leaf.
// May call: peerView, the Location Store, the membership (a list, which
// makes a store-backed membership sweep its expiries, and whose word
// confirms), the leaves (lifecycle, the event log).
// Invariants: only a fact confirms; a timer only bounds the wait for the
// next store answer (the lease's remaining time, by the store's clock, or
// suspectRetry after a store error). Each check is counted in the
// services' lanes and ends with the host's life.
type suspicions struct {
	view *peerView // what this host knows of its peers (the peers' leaf)
	*hostEnv
	life    *lifecycle
	stats   *hostStats
	events  *eventLog
	svc     *services
	store   relocation.Store
	peers   *peers
	mu      sync.Mutex
	checks  map[string]uint64      // peer → the run under check
	confirm chan membership.Member // dead runs, to the membership watch
	stopped bool                   // the host closes: no new checks

	// Counters of Stats, this part's own.
	suspicions    atomic.Int64 // checks of a suspected peer's lease started (Stats.Suspicions)
	confirmedDead atomic.Int64 // suspected peers the Location Store showed dead (Stats.SuspectsConfirmed)
}

// suspectRetry paces the checks of a suspected peer whose lease the store
// could not tell (an error, or no lease of that run yet).
const suspectRetry = 250 * time.Millisecond

// suspectPace paces the membership's checks of a suspected peer whose
// store lease ran out while the membership still lists its run.
const suspectPace = 20 * time.Millisecond

// suspect starts a check of peer's current run unless one runs, the peer
// is not a member, or the host has no membership.
func (s *suspicions) suspect(peer string) {
	if s.peers.members == nil || peer == s.name {
		return
	}
	m, ok := s.view.member(peer)
	if !ok {
		return
	}
	s.mu.Lock()
	if s.stopped || s.checks[m.Name] == m.LeaseGen || s.life.context().Err() != nil {
		s.mu.Unlock()
		return
	}
	if s.checks == nil {
		s.checks = map[string]uint64{}
	}
	s.checks[m.Name] = m.LeaseGen
	s.lanes.Add(1)
	s.mu.Unlock()
	go s.check(m)
}

// stop lets no new check start (Close, before it waits for the lanes).
func (s *suspicions) stop() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
}

// check asks the store for m's lease until a fact ends the suspicion.
func (s *suspicions) check(m membership.Member) {
	defer s.lanes.Done()
	defer func() {
		s.mu.Lock()
		if s.checks[m.Name] == m.LeaseGen {
			delete(s.checks, m.Name)
		}
		s.mu.Unlock()
	}()
	s.suspicions.Add(1)
	s.events.add(EventUnreachable, m.Name, m.LeaseGen, 0, "its link broke: its lease is checked in the Location Store")
	ctx := s.life.context()
	for {
		if !s.stillSuspect(m) {
			if s.linkUp(m) {
				s.events.add(EventReachable, m.Name, m.LeaseGen, 0, "its link is up again")
			}
			return
		}
		wait, dead := s.leaseGone(m)
		if dead {
			if s.membershipEnded(m) {
				s.confirmed(m)
				return
			}
			wait = suspectPace
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// stillSuspect reports whether m's run is still a member whose link is
// down (up again, or no longer listed: nothing to confirm).
func (s *suspicions) stillSuspect(m membership.Member) bool {
	down, leaving, listed := s.link(m)
	return listed && down && !leaving
}

// linkUp reports whether m's run is still a member whose link is up.
func (s *suspicions) linkUp(m membership.Member) bool {
	down, _, listed := s.link(m)
	return listed && !down
}

// link reports whether m's run is still a member with a link (listed),
// and whether that link is down, or its peer leaving or gone.
func (s *suspicions) link(m membership.Member) (down, leaving, listed bool) {
	return s.view.linkOf(m)
}

// leaseGone asks the Location Store for m's lease: dead when the store
// holds m's run with no time left, or a newer run of its name; otherwise
// how long to wait before asking again — the time the lease has left by
// the store's clock (a little more), or suspectRetry when the store could
// not tell (an error, no lease of that run yet).
func (s *suspicions) leaseGone(m membership.Member) (wait time.Duration, dead bool) {
	ctx, cancel := s.life.storeContext()
	defer cancel()
	l, ok, err := s.store.Lease(ctx, m.Name)
	switch {
	case err != nil || !ok || l.Gen < m.LeaseGen:
		return suspectRetry, false
	case l.Gen > m.LeaseGen, l.Remaining <= 0:
		return 0, true
	}
	return l.Remaining + 10*time.Millisecond, false
}

// membershipEnded asks the membership for its list — which makes a
// store-backed one sweep its expiries first, so its other watchers hear of
// it sooner too — and reports whether m's run is no longer in it.
func (s *suspicions) membershipEnded(m membership.Member) bool {
	ctx, cancel := s.life.storeContext()
	defer cancel()
	list, err := s.peers.members.Members(ctx)
	if err != nil {
		return false
	}
	for _, cur := range list {
		if cur.Name == m.Name && cur.LeaseGen == m.LeaseGen {
			return false
		}
	}
	return true
}

// confirmed hands a dead run to the membership watch, which drops it from
// the view as the membership's expiry will.
func (s *suspicions) confirmed(m membership.Member) {
	s.log.Info("a suspected peer's lease ran out and the membership ended its run; it is dropped from the view", "peer", m.Name, "run", m.LeaseGen)
	select {
	case s.confirm <- m:
	case <-s.life.context().Done():
	}
}

// confirmedExpiry is the membership event a confirmed dead run stands
// for (the watch applies it as it would the membership's own).
func confirmedExpiry(m membership.Member) membership.Event {
	return membership.Event{Type: membership.Expired, Member: m}
}
