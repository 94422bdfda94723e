package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/membership/membershiptest"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// newMembership opens a Membership with a manual clock and a fast sweep and
// poll on pool, closed when t ends.
func newMembership(t *testing.T, pool *pgxpool.Pool, opts pgstore.MembershipOptions) *pgstore.Membership {
	t.Helper()
	opts.ManualClock = true
	if opts.SweepEvery == 0 {
		opts.SweepEvery = 5 * time.Millisecond
	}
	if opts.PollEvery == 0 {
		opts.PollEvery = 50 * time.Millisecond
	}
	m, err := pgstore.OpenMembership(context.Background(), pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func membershipHarness(ttl time.Duration, buf int) membershiptest.Harness {
	return membershiptest.Harness{
		New: func(t *testing.T) (membership.Membership, func(time.Duration)) {
			pool, _ := newPool(t)
			m := newMembership(t, pool, pgstore.MembershipOptions{TTL: ttl, WatchBuffer: buf})
			return m, m.Advance
		},
		TTL:  ttl,
		Wait: 30 * time.Second,
	}
}

// TestMembershipConformance runs membership/membershiptest over the
// Postgres membership with a small watch backlog (overflows happen).
func TestMembershipConformance(t *testing.T) {
	membershiptest.Run(t, membershipHarness(10*time.Second, 8))
	testutil.CheckNoGoroutines(t)
}

// TestMembershipConformanceDefaultBuffer runs the suite with the default
// backlog.
func TestMembershipConformanceDefaultBuffer(t *testing.T) {
	membershiptest.Run(t, membershipHarness(time.Minute, 0))
	testutil.CheckNoGoroutines(t)
}

// next receives one event within 30 s.
func next(t *testing.T, ch <-chan membership.Event) membership.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed")
		}
		return ev
	case <-time.After(30 * time.Second):
		t.Fatal("no event within 30 s")
	}
	panic("unreachable")
}

// A watcher survives the loss of its LISTEN connection (a server restart):
// its dispatcher reconnects and reads the changelog from where it was, so
// a change made while it was away (its NOTIFY lost) still arrives, in
// order. The poll is off (an hour), so only the reconnection can deliver
// it. The membership is the same one throughout; calls made while the
// server is down fail with kind Unavailable.
func TestWatcherResyncsAfterTheConnectionIsLost(t *testing.T) {
	pool, db := restartPool(t)
	m := newMembership(t, pool, pgstore.MembershipOptions{PollEvery: time.Hour, TTL: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := m.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ev := next(t, ch); ev.Type != membership.Sync {
		t.Fatalf("first event %v", ev.Type)
	}
	if _, err := m.Join(ctx, membership.Member{Name: "a", LeaseGen: 1}); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, ch); ev.Type != membership.Joined || ev.Member.Name != "a" {
		t.Fatalf("event %v %s, want joined a", ev.Type, ev.Member.Name)
	}
	if err := db.Server.Restart(); err != nil {
		t.Fatal(err)
	}
	joined := false
	testutil.WaitFor(t, "a Join after the restart", func() bool {
		_, err := m.Join(ctx, membership.Member{Name: "b", LeaseGen: 1})
		if err != nil && !errors.Is(err, payload.Unavailable) && !errors.Is(err, membership.ErrNameTaken) {
			t.Fatalf("Join while the server comes back = %v, want kind Unavailable", err)
		}
		joined = err == nil
		return err == nil
	})
	if !joined {
		t.Fatal("unreachable")
	}
	if err := m.Leave(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	// Revisions continue where they were: no Sync, every change.
	ev := next(t, ch)
	if ev.Type != membership.Joined || ev.Member.Name != "b" || ev.Rev != 2 {
		t.Fatalf("after the restart: %v %s rev %d, want joined b rev 2", ev.Type, ev.Member.Name, ev.Rev)
	}
	ev = next(t, ch)
	if ev.Type != membership.Left || ev.Member.Name != "a" || ev.Rev != 3 {
		t.Fatalf("after the restart: %v %s rev %d, want left a rev 3", ev.Type, ev.Member.Name, ev.Rev)
	}
	cancel()
	for range ch {
	}
	m.Close()
	testutil.CheckNoGoroutines(t)
}

// Two memberships on one database (two processes): a change through one
// reaches the other's watchers, by NOTIFY, and expiry found by either is
// one event.
func TestMembershipsOnOneDatabaseShareTheChanges(t *testing.T) {
	pool, _ := newPool(t)
	a := newMembership(t, pool, pgstore.MembershipOptions{TTL: time.Minute, PollEvery: time.Hour})
	b := newMembership(t, pool, pgstore.MembershipOptions{TTL: time.Minute, PollEvery: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := a.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next(t, ch)
	if _, err := b.Join(ctx, membership.Member{Name: "x", LeaseGen: 1, Kinds: []string{"cart"}}); err != nil {
		t.Fatal(err)
	}
	ev := next(t, ch)
	if ev.Type != membership.Joined || ev.Member.Name != "x" || len(ev.Member.Kinds) != 1 {
		t.Fatalf("a's watcher got %+v, want x joined through b", ev)
	}
	// b's clock decides (each Membership has its own manual clock); y,
	// joined through b, renews as a live host does, x does not.
	if _, err := b.Join(ctx, membership.Member{Name: "y", LeaseGen: 1}); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, ch); ev.Type != membership.Joined || ev.Member.Name != "y" {
		t.Fatalf("a's watcher got %+v, want y joined", ev)
	}
	for range 8 {
		b.Advance(15 * time.Second)
		if _, err := b.Renew(ctx, "y", 1); err != nil {
			t.Fatal(err)
		}
	}
	ev = next(t, ch)
	if ev.Type != membership.Expired || ev.Member.Name != "x" {
		t.Fatalf("a's watcher got %v %s, want x expired by b's sweep", ev.Type, ev.Member.Name)
	}
}

// Close ends every watch (its channel closes), stops the sweep and the
// dispatcher, and later calls fail with ErrClosed.
func TestCloseEndsWatchesAndLeavesNoGoroutine(t *testing.T) {
	pool, _ := newPool(t)
	m := newMembership(t, pool, pgstore.MembershipOptions{})
	ch, err := m.Watch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	next(t, ch)
	m.Close()
	for range ch {
	}
	if _, err := m.Members(context.Background()); !errors.Is(err, membership.ErrClosed) {
		t.Fatalf("Members after Close = %v, want ErrClosed", err)
	}
	if _, err := m.Watch(context.Background()); !errors.Is(err, membership.ErrClosed) {
		t.Fatalf("Watch after Close = %v, want ErrClosed", err)
	}
	m.Close() // idempotent
	testutil.CheckNoGoroutines(t)
}

// Hosts whose processes give their membership leases of different
// lengths (berth node -lease-ttl, changed node by node) judge a silence
// alike: each member row by its own lease. A silence longer than half of
// a short lease but not of a long one expires nothing, whichever process
// sweeps — a sweeper with the long TTL must not take the store's own
// absence for the short member's death — and the short member, renewing
// after it, keeps its run. A short member that then stops renewing while
// the long one renews expires, found by the long one's sweep.
func TestMembershipSilencesJudgeEachMemberByItsOwnLease(t *testing.T) {
	ctx := context.Background()
	pool, _ := newPool(t)
	long := newMembership(t, pool, pgstore.MembershipOptions{TTL: 10 * time.Second})
	short := newMembership(t, pool, pgstore.MembershipOptions{TTL: time.Second})
	advance := func(d time.Duration) { long.Advance(d); short.Advance(d) }
	if _, err := short.Join(ctx, membership.Member{Name: "short", Address: "s", LeaseGen: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := long.Join(ctx, membership.Member{Name: "long", Address: "l", LeaseGen: 1}); err != nil {
		t.Fatal(err)
	}
	names := func(m *pgstore.Membership) []string {
		t.Helper()
		ms, err := m.Members(ctx) // sweeps first
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, mem := range ms {
			out = append(out, mem.Name)
		}
		return out
	}
	advance(1500 * time.Millisecond) // the store hears from nobody: past short's lease and half of it
	if got := names(long); len(got) != 2 {
		t.Fatalf("after a silence of 1.5 s the sweeper with a 10 s TTL lists %v; want long and short (a silence expires nothing)", got)
	}
	if _, err := short.Renew(ctx, "short", 1); err != nil {
		t.Fatalf("short's renewal after the silence: %v; want its run kept", err)
	}
	// short stops renewing; long renews often, as a live host does.
	for range 12 {
		advance(200 * time.Millisecond)
		if _, err := long.Renew(ctx, "long", 1); err != nil {
			t.Fatal(err)
		}
	}
	if got := names(long); len(got) != 1 || got[0] != "long" {
		t.Fatalf("2.4 s after short's last renewal, with long renewing every 200 ms, the membership lists %v; want long alone", got)
	}
	if _, err := short.Renew(ctx, "short", 1); !errors.Is(err, membership.ErrLeaseExpired) {
		t.Fatalf("short's renewal after it expired: %v; want ErrLeaseExpired", err)
	}
}

// A member row whose lease length cannot be told (its renewed_at after
// its deadline: a row written before renewed_at existed, which the
// migration stamped with its own time) is in no silence: it expires by
// its deadline like any run that stopped renewing.
func TestMembershipARowOfUnknownLeaseLengthExpiresByItsDeadline(t *testing.T) {
	ctx := context.Background()
	pool, _ := newPool(t)
	m := newMembership(t, pool, pgstore.MembershipOptions{TTL: time.Second})
	for _, name := range []string{"old", "keeper"} {
		if _, err := m.Join(ctx, membership.Member{Name: name, Address: name, LeaseGen: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE pgstore_members SET renewed_at = deadline + interval '10 milliseconds' WHERE name = 'old'`); err != nil {
		t.Fatal(err)
	}
	for range 10 { // keeper renews; old does not
		m.Advance(200 * time.Millisecond)
		if _, err := m.Renew(ctx, "keeper", 1); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := m.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].Name != "keeper" {
		t.Fatalf("2 s past old's deadline, with keeper renewing, the membership lists %v; want keeper alone", ms)
	}
}

// stallTracer stops the call of a pool's connection, while armed, once the
// result of a statement matching its pattern is read — in a transaction,
// after the statement ran and before the next one is sent; in a batch,
// after the server ran the whole batch: a client that stalled there (a
// SIGSTOP, a starved CPU).
type stallTracer struct {
	pattern string
	armed   atomic.Bool
	stalled chan struct{} // closed when a call stalls
	release chan struct{} // close to let it go on
}

type stallKey struct{}

func newStallTracer(pattern string) *stallTracer {
	return &stallTracer{pattern: pattern, stalled: make(chan struct{}), release: make(chan struct{})}
}

func (s *stallTracer) stall(sql string, err error) {
	if err == nil && strings.Contains(sql, s.pattern) && s.armed.CompareAndSwap(true, false) {
		close(s.stalled)
		<-s.release
	}
}

func (s *stallTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, stallKey{}, d.SQL)
}

func (s *stallTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	sql, _ := ctx.Value(stallKey{}).(string)
	s.stall(sql, d.Err)
}

func (s *stallTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (s *stallTracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	s.stall(d.SQL, d.Err)
}

func (s *stallTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// letGo releases the tracer's stalled call, if it was not yet.
func (s *stallTracer) letGo() {
	select {
	case <-s.release:
	default:
		close(s.release)
	}
}

// stallingPool opens a pool on db whose connections stall as tr says.
func stallingPool(t *testing.T, url string, tr *stallTracer) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// during arms tr, runs call on a goroutine of its own and returns once
// tr stalled it (failing if it ended first: none of its statements matches
// the pattern); the call's error comes on the channel once it is let go
// (letGo, or at the end of the test).
func (s *stallTracer) during(t *testing.T, call func() error) <-chan error {
	t.Helper()
	s.armed.Store(true)
	done := make(chan error, 1)
	go func() { done <- call() }()
	t.Cleanup(s.letGo)
	select {
	case <-s.stalled:
	case err := <-done:
		t.Fatalf("the call ended (%v) without stalling: no statement of it matches %q", err, s.pattern)
	}
	return done
}

// A member whose client stalls inside its renewal — after the statement
// that locks its row — holds nothing up: the renewal runs whole on the
// server (one batch), the member stops renewing and expires like any
// other, and the stalled call, let go, does not bring it back.
func TestAMemberStalledInsideItsRenewalStillExpires(t *testing.T) {
	ctx := context.Background()
	pool, db := newPool(t)
	tr := newStallTracer("SELECT 1 FROM pgstore_members WHERE name = $1 FOR UPDATE")
	const ttl = time.Second
	keeper := newMembership(t, pool, pgstore.MembershipOptions{TTL: ttl})
	stalled := newMembership(t, stallingPool(t, db.URL, tr), pgstore.MembershipOptions{TTL: ttl})
	if _, err := keeper.Join(ctx, membership.Member{Name: "keeper", Address: "k", LeaseGen: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := stalled.Join(ctx, membership.Member{Name: "stalled", Address: "s", LeaseGen: 1}); err != nil {
		t.Fatal(err)
	}
	renewed := tr.during(t, func() error {
		_, err := stalled.Renew(ctx, "stalled", 1)
		return err
	})
	// stalled's lease runs out by the store's clock while keeper renews.
	advance := func(d time.Duration) { keeper.Advance(d); stalled.Advance(d) }
	listsKeeperAlone := func(ctx context.Context) bool {
		ms, err := keeper.Members(ctx)
		return err == nil && len(ms) == 1 && ms[0].Name == "keeper"
	}
	testutil.WaitForWithin(t, "the sweep to expire the member stalled inside its renewal", time.Minute, func() bool {
		advance(200 * time.Millisecond)
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if _, err := keeper.Renew(cctx, "keeper", 1); err != nil {
			return false // no renewal: a silence, which expires nobody
		}
		return listsKeeperAlone(cctx)
	})
	tr.letGo()
	if err := <-renewed; err != nil && payload.KindOf(err) != payload.Unavailable {
		t.Errorf("the stalled renewal's error %v is of kind %v; want none (it ran before the stall) or Unavailable (a stall its caller retries)", err, payload.KindOf(err))
	}
	if !listsKeeperAlone(ctx) {
		t.Fatal("the stalled renewal, let go, brought its expired member back")
	}
	if _, err := stalled.Renew(ctx, "stalled", 1); !errors.Is(err, membership.ErrLeaseExpired) {
		t.Fatalf("the stalled member's next renewal: %v; want ErrLeaseExpired", err)
	}
}

// A member whose client stalls inside a membership change — after it took
// the revision lock that every change and expiry sweep needs — holds the
// others up no longer than the membership's lease: the server ends the
// stalled transaction, another member joins, and the stalled call, let
// go, fails with Unavailable (a stall its caller retries).
func TestAMemberStalledInsideAChangeHoldsTheOthersUpNoLongerThanALease(t *testing.T) {
	ctx := context.Background()
	pool, db := newPool(t)
	tr := newStallTracer("SELECT rev FROM pgstore_membership_rev FOR UPDATE")
	const ttl = time.Second
	keeper := newMembership(t, pool, pgstore.MembershipOptions{TTL: ttl})
	// No sweeps of its own: the one change it makes is the Join below.
	stalled := newMembership(t, stallingPool(t, db.URL, tr), pgstore.MembershipOptions{TTL: ttl, SweepEvery: time.Hour})
	joined := tr.during(t, func() error {
		_, err := stalled.Join(ctx, membership.Member{Name: "stalled", Address: "s", LeaseGen: 1})
		return err
	})
	testutil.WaitForWithin(t, "another member to join while a change is stalled", time.Minute, func() bool {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := keeper.Join(cctx, membership.Member{Name: "other", Address: "o", LeaseGen: 1})
		return err == nil
	})
	tr.letGo()
	if err := <-joined; payload.KindOf(err) != payload.Unavailable {
		t.Fatalf("the stalled Join ended with %v (kind %v); want Unavailable: the server ended its transaction", err, payload.KindOf(err))
	}
}
