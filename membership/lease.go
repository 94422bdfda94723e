package membership

import "time"

// LocalLease is a host's own view of its lease, kept by the local-time rule:
//
//	deadline = local send time of the last successful renewal + TTL − Margin
//
// The host reads its clock just before it sends Join or Renew; when the call
// succeeds it updates its LocalLease from that send time (Renewed), never
// from a time the store returns or from when the answer came back. At or
// past the deadline the host starts no turn: it treats the lease as lost
// until a renewal sent later succeeds (and if the store says the lease
// expired, it must join again with a new generation).
//
// Why the send time: the store starts its TTL when it handles the call,
// which is after the host sent it, so a deadline dated from the send time
// ends no later than the store's — also when the answer is slow: a reply
// that took 4 s to arrive leaves the host 4 s less, never 4 s more. Dating
// from the receive time would let a slow round trip stretch the lease past
// the store's expiry, while another host already holds the name or the
// objects.
//
// Why not the store's clock: the store's clock and the host's differ by an
// unknown offset (seconds, or hours on a broken machine), and a deadline
// read from one and compared with the other is off by exactly that. Only
// durations cross machines; each machine compares times from its own clock.
// The Margin absorbs what durations cannot: clocks that run at slightly
// different rates over one TTL, and a turn that starts just before the
// deadline. riverqueue/river's internal/leadership states the same rule for
// its leader's trust window (start of the attempt + TTL − safety margin).
//
// Sent must come from time.Now on this machine, with its monotonic reading
// (do not Round, Truncate, serialize or rebuild it), so that a step of the
// wall clock does not move the deadline either. Deadline keeps the
// monotonic reading.
//
// The zero LocalLease is never valid. A LocalLease is a plain value, not
// safe for concurrent change; the host keeps it where its turns can read it
// (under its own lock, say). Keep the time.Time itself: Deadline().UnixNano()
// would drop the monotonic reading.
type LocalLease struct {
	// Sent is the local time the last successful Join or Renew was sent.
	Sent time.Time
	// TTL is the lease's length as the store granted it (Lease.TTL).
	TTL time.Duration
	// Margin is how long before Sent + TTL the host stops trusting the
	// lease (DefaultMargin). A Margin of TTL or more makes the lease never
	// valid.
	Margin time.Duration
}

// Deadline returns Sent + TTL − Margin: the host starts no turn at or after it.
func (l LocalLease) Deadline() time.Time { return l.Sent.Add(l.TTL - l.Margin) }

// Valid reports whether a turn may start at local time now: the lease has
// been granted and now is before the deadline.
func (l LocalLease) Valid(now time.Time) bool {
	return !l.Sent.IsZero() && l.TTL > l.Margin && now.Before(l.Deadline())
}

// Remaining returns how long from now until the deadline, or zero if the
// lease is not valid at now.
func (l LocalLease) Remaining(now time.Time) time.Duration {
	if !l.Valid(now) {
		return 0
	}
	return l.Deadline().Sub(now)
}

// Renewed returns the lease after a Join or Renew sent at local time sent
// succeeded with granted; l's Margin is kept. Answers may come back out of
// order: an answer that would move the deadline back (a call sent before
// the one l already counts from) leaves l unchanged.
func (l LocalLease) Renewed(sent time.Time, granted Lease) LocalLease {
	next := LocalLease{Sent: sent, TTL: granted.TTL, Margin: l.Margin}
	if !l.Sent.IsZero() && l.Deadline().After(next.Deadline()) {
		return l
	}
	return next
}
