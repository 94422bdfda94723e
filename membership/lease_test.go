package membership_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/berthrt/berth/membership"
)

func TestLocalLeaseDeadlineIsSendTimePlusTTLMinusMargin(t *testing.T) {
	sent := epoch
	l := membership.LocalLease{Sent: sent, TTL: 15 * time.Second, Margin: time.Second}
	want := sent.Add(14 * time.Second)
	if !l.Deadline().Equal(want) {
		t.Fatalf("Deadline = %v, want %v", l.Deadline(), want)
	}
	for _, c := range []struct {
		now  time.Time
		want bool
	}{
		{sent, true},
		{want.Add(-time.Nanosecond), true},
		{want, false}, // at the deadline no turn starts
		{want.Add(time.Hour), false},
	} {
		if got := l.Valid(c.now); got != c.want {
			t.Errorf("Valid(deadline%+v) = %v, want %v", c.now.Sub(want), got, c.want)
		}
	}
	if got := l.Remaining(sent.Add(4 * time.Second)); got != 10*time.Second {
		t.Errorf("Remaining 4 s after sending = %v, want 10 s", got)
	}
	if got := l.Remaining(want.Add(time.Second)); got != 0 {
		t.Errorf("Remaining past the deadline = %v, want 0", got)
	}
}

func TestLocalLeaseZeroAndNoTimeLeftAreNeverValid(t *testing.T) {
	if (membership.LocalLease{}).Valid(epoch) {
		t.Error("the zero LocalLease is valid")
	}
	if (membership.LocalLease{TTL: time.Hour}).Valid(time.Time{}) {
		t.Error("a LocalLease that was never granted is valid")
	}
	l := membership.LocalLease{Sent: epoch, TTL: time.Second, Margin: time.Second}
	if l.Valid(epoch.Add(-time.Hour)) {
		t.Error("a LocalLease whose margin eats its TTL is valid")
	}
}

// hostRenew is what a host does: read its own clock, send, and on success
// date the lease from that reading.
func hostRenew(t *testing.T, m membership.Membership, local func() time.Time, l membership.LocalLease) membership.LocalLease {
	t.Helper()
	sent := local()
	granted, err := m.Renew(context.Background(), "a", 1)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	return l.Renewed(sent, granted)
}

// A store whose clock is far ahead of or behind the host's changes nothing
// in the host's deadline: only the TTL crosses machines.
func TestLocalLeaseIgnoresTheStoreClock(t *testing.T) {
	const ttl = 15 * time.Second
	local := newFakeClock(epoch)
	var deadlines []time.Time
	for _, skew := range []time.Duration{0, time.Hour, -time.Hour, 30 * 24 * time.Hour, -10 * time.Second} {
		store := newFakeClock(epoch.Add(skew))
		m := membership.NewMemory(membership.Options{Now: store.Now, TTL: ttl})
		t.Cleanup(m.Close)
		sent := local.Now()
		granted, err := m.Join(context.Background(), membership.Member{Name: "a", LeaseGen: 1})
		if err != nil {
			t.Fatal(err)
		}
		l := membership.LocalLease{Margin: time.Second}.Renewed(sent, granted)
		if want := sent.Add(ttl - time.Second); !l.Deadline().Equal(want) {
			t.Fatalf("store skew %v: deadline after Join %v, want %v", skew, l.Deadline(), want)
		}
		local.Advance(5 * time.Second)
		store.Advance(5 * time.Second)
		l = hostRenew(t, m, local.Now, l)
		deadlines = append(deadlines, l.Deadline())
		local.Advance(-5 * time.Second) // the next skew starts from the same local time
	}
	for i, d := range deadlines {
		if !d.Equal(deadlines[0]) {
			t.Fatalf("deadline %d is %v, deadline 0 is %v: the store's clock moved it", i, d, deadlines[0])
		}
	}
}

// slowRenew answers Renew only after the host's clock moved on by delay.
type slowRenew struct {
	membership.Membership
	local *fakeClock
	delay time.Duration
}

func (s slowRenew) Renew(ctx context.Context, name string, gen uint64) (membership.Lease, error) {
	l, err := s.Membership.Renew(ctx, name, gen)
	s.local.Advance(s.delay)
	return l, err
}

// A renewal whose answer came late still dates the lease from when it was
// sent: the slow round trip shortens the host's lease, never stretches it.
func TestLocalLeaseLateAnswerDatesFromTheSendTime(t *testing.T) {
	const ttl, margin, delay = 15 * time.Second, time.Second, 4 * time.Second
	local := newFakeClock(epoch)
	m, _ := newTestMemory(t, ttl, 0)
	if _, err := m.Join(context.Background(), membership.Member{Name: "a", LeaseGen: 1}); err != nil {
		t.Fatal(err)
	}
	sent := local.Now()
	l := hostRenew(t, slowRenew{Membership: m, local: local, delay: delay}, local.Now, membership.LocalLease{Margin: margin})
	received := local.Now()
	if received.Sub(sent) != delay {
		t.Fatalf("the answer took %v, want %v", received.Sub(sent), delay)
	}
	if want := sent.Add(ttl - margin); !l.Deadline().Equal(want) {
		t.Fatalf("deadline %v, want send time + TTL − margin = %v", l.Deadline(), want)
	}
	if got := l.Remaining(received); got != ttl-margin-delay {
		t.Fatalf("remaining on receipt %v, want %v", got, ttl-margin-delay)
	}
}

// Answers that come back out of order never move the deadline back.
func TestLocalLeaseOutOfOrderAnswersKeepTheLaterDeadline(t *testing.T) {
	granted := membership.Lease{Name: "a", Gen: 1, TTL: 15 * time.Second}
	first, second := epoch, epoch.Add(5*time.Second)
	l := membership.LocalLease{Margin: time.Second}.Renewed(second, granted)
	if got := l.Renewed(first, granted); got != l {
		t.Fatalf("the older answer moved the lease from %+v to %+v", l, got)
	}
	if got := l.Renewed(second.Add(5*time.Second), granted); !got.Sent.Equal(second.Add(5 * time.Second)) {
		t.Fatalf("a newer answer did not move the lease: %+v", got)
	}
	if got := l.Renewed(second, membership.Lease{TTL: time.Second}); got != l {
		t.Fatalf("a shorter TTL for the same send time moved the deadline back: %+v", got)
	}
}

// The deadline keeps the monotonic reading of the send time, so a step of
// the wall clock does not move it.
func TestLocalLeaseKeepsTheMonotonicReading(t *testing.T) {
	l := membership.LocalLease{Sent: time.Now(), TTL: 15 * time.Second, Margin: time.Second}
	if !strings.Contains(l.Deadline().String(), "m=") {
		t.Fatalf("deadline %v has no monotonic reading", l.Deadline())
	}
	if !l.Valid(time.Now()) {
		t.Fatal("a lease just granted is not valid")
	}
}
