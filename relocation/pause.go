package relocation

import "time"

// PauseClock works out a move's pause — from the seal at the source to the
// opening at the target — on each host with that host's clock alone: no
// clock is compared between hosts. The driver keeps one per move, either
// side, and feeds it the records it sends and receives and the instants of
// the seal (source) and the opening (target), each with the time it read
// then (nanoseconds on any fixed epoch of that host). It reads no clock.
//
// The target's figure goes to the source in its Committed (Sent fills it
// in): Paused, from the first Prepare's arrival to the opening, and
// Turnaround, from the first Cutover's arrival to the Committed's send.
// The source's figure (Pause) is the seal to the first Prepare's send,
// plus the Prepare's way over, plus the target's Paused. The way over is
// half a round trip on the link, as NTP takes it: the smaller of the
// move's two that can be timed — the first Preflight answered (from the
// last Preflight sent to the first PreflightReply), and the first Cutover
// to the last Committed less the target's Turnaround — since a round trip
// that waited for a busy goroutine on either side overstates the link.
// Without the target's figure, the Prepare's send or a round trip, the
// pause is the seal to now (the Committed's way back included: an upper
// bound).
//
// The zero value is ready to use. Not safe for concurrent use.
type PauseClock struct {
	// Source.
	sealed       instant       // the seal took effect
	preflight    instant       // the last Preflight went out
	preflightRTT int64         // the first Preflight's round trip; 0 until answered
	prepareSent  instant       // the first Prepare went out
	cutoverSent  instant       // the first Cutover went out
	cutoverRTT   int64         // the Cutover's round trip less the target's Turnaround; 0 if not known
	targetPaused time.Duration // the last Committed's Paused
	// Target.
	prepareAt instant // the first Prepare arrived
	cutoverAt instant // the first Cutover arrived
	opened    instant // the object opened here
}

// instant is a time that may not have been taken yet.
type instant struct {
	at  int64
	set bool
}

func (i *instant) first(now int64) {
	if !i.set {
		*i = instant{at: now, set: true}
	}
}

// Sealed notes the seal at the source (now).
func (c *PauseClock) Sealed(now int64) { c.sealed.first(now) }

// Opened notes the opening at the target (now).
func (c *PauseClock) Opened(now int64) { c.opened.first(now) }

// Sent notes that r goes to the peer now, and returns the record to send:
// r itself, or for a Committed a copy that carries the target's figures
// (Paused when the Prepare's arrival and the opening were noted,
// Turnaround when the Cutover's arrival was). The machine's record is not
// changed.
func (c *PauseClock) Sent(r Record, now int64) Record {
	switch r := r.(type) {
	case *Preflight:
		c.preflight = instant{at: now, set: true}
	case *Prepare:
		c.prepareSent.first(now)
	case *Cutover:
		c.cutoverSent.first(now)
	case *Committed:
		s := *r
		if c.opened.set && c.prepareAt.set {
			s.Paused = time.Duration(c.opened.at - c.prepareAt.at)
		}
		if c.cutoverAt.set {
			s.Turnaround = time.Duration(max(now-c.cutoverAt.at, 1)) // zero would say "not measured"
		}
		return &s
	}
	return r
}

// Received notes that r arrived from the peer now.
func (c *PauseClock) Received(r Record, now int64) {
	switch r := r.(type) {
	case *PreflightReply:
		if c.preflightRTT == 0 && c.preflight.set {
			c.preflightRTT = max(now-c.preflight.at, 1)
		}
	case *Prepare:
		c.prepareAt.first(now)
	case *Cutover:
		c.cutoverAt.first(now)
	case *Committed:
		c.targetPaused = r.Paused
		if c.cutoverSent.set && r.Turnaround > 0 {
			if rtt := now - c.cutoverSent.at - int64(r.Turnaround); rtt > 0 {
				c.cutoverRTT = rtt
			}
		}
	}
}

// Pause returns the source's figure for the move's pause, at now (the
// move ended); ok is false if the seal was never noted.
func (c *PauseClock) Pause(now int64) (pause time.Duration, ok bool) {
	if !c.sealed.set {
		return 0, false
	}
	rtt := c.preflightRTT
	if c.cutoverRTT != 0 && (rtt == 0 || c.cutoverRTT < rtt) {
		rtt = c.cutoverRTT
	}
	if c.targetPaused > 0 && c.prepareSent.set && rtt != 0 {
		return time.Duration(c.prepareSent.at-c.sealed.at+rtt/2) + c.targetPaused, true
	}
	return time.Duration(now - c.sealed.at), true
}
