package actor

import (
	"sync"
	"time"

	"github.com/berthrt/berth/payload"
)

// The move log: the pauses of the moves from here and a ring of the last
// moves (Host.Pauses, Host.RecentMoves, an object's Inspection).
//
// Owns: the pauses and the ring. Lock: moveLog.mu, a leaf.
// May call: nothing.
// Invariants: one short lock per move's end; the ring is made at the
// first move.

// moveLog keeps what this host keeps of the moves it was the source of:
// their pauses (moveDriver.clock: the seal here to the opening at the
// target), and a ring of the last ones as they ended (Host.RecentMoves).
// One short lock per move's end; the ring is made at the first move.
type moveLog struct {
	mu     sync.Mutex
	done   []time.Duration             // not taken by Pauses yet
	recent [recentPauses]time.Duration // a ring of the last ones (RecentPauses)
	n      int                         // pauses added, ever
	moves  *[recentMoves]MoveEntry     // a ring of the last moves (RecentMoves); nil until the first
	seq    uint64                      // moves ended, ever: the last one's Seq
}

// recentPauses is how many pauses RecentPauses keeps.
const recentPauses = 1024

// recentMoves is how many moves RecentMoves keeps.
const recentMoves = 256

// ended notes the end of a move from here: e, numbered next, in the ring
// of moves; its pause, if it moved and the pause is known.
func (l *moveLog) ended(e *MoveEntry, pause bool) {
	l.mu.Lock()
	if pause {
		if len(l.done) == maxPauses {
			l.done = append(l.done[:0], l.done[maxPauses/2:]...) // keep the newer half
		}
		l.done = append(l.done, e.Pause)
		l.recent[l.n%recentPauses] = e.Pause
		l.n++
	}
	if l.moves == nil {
		l.moves = new([recentMoves]MoveEntry)
	}
	l.seq++
	e.Seq = l.seq
	l.moves[l.seq%recentMoves] = *e
	l.mu.Unlock()
}

// maxPauses bounds the pauses kept between two calls of Host.Pauses.
const maxPauses = 1 << 16

// take returns the pauses not taken yet, and forgets them.
func (p *moveLog) take() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.done
	p.done = nil
	return out
}

// since returns the moves noted after sequence number after, oldest first
// (Host.RecentMoves).
func (l *moveLog) since(after uint64) []MoveEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	first := max(after+1, l.seq+1-min(l.seq, recentMoves)) // the oldest kept: seq-255, or 1
	if first > l.seq {
		return nil
	}
	out := make([]MoveEntry, 0, l.seq-first+1)
	for s := first; s <= l.seq; s++ {
		out = append(out, l.moves[s%recentMoves])
	}
	return out
}

func alreadyThere(ref Ref, target string) error {
	return &payload.Error{Kind: payload.InvalidOperation, Op: "actor.Host.Relocate", Detail: ref.String() + " already lives on " + target, Err: ErrAlreadyThere}
}

// MoveEntry is one move this host was the source of, as it ended
// (Host.RecentMoves).
type MoveEntry struct {
	// Seq numbers the moves from this host as they end: 1, 2, 3, … (from
	// 1 again when the host is made again).
	Seq uint64
	// Ref is the object that moved (or was to).
	Ref Ref
	// From is this host; To the target.
	From, To string
	// Started is when Relocate (or a drain) began the move here; Ended
	// when it ended here.
	Started, Ended time.Time
	// Pause is the time the object ran nowhere, as Pauses works it out;
	// 0 unless Outcome is MoveDone (or if the pause could not be worked
	// out).
	Pause time.Duration
	// Outcome is how the move ended; Reason says why, unless it is
	// MoveDone.
	Outcome MoveOutcome
	Reason  string
}

// MoveOutcome is how a move ended at its source.
type MoveOutcome uint8

// Outcomes of a move, at its source.
const (
	// MoveDone: the target owns the object and runs it.
	MoveDone MoveOutcome = iota + 1
	// MoveRefused: the move did not start (the target's preflight refused
	// it, the store did not show this host as the owner, or Relocate's
	// context ended first); the object was not disturbed.
	MoveRefused
	// MoveAborted: aborted before the point of no return (the capture
	// failed, the target failed or left, Relocate's context ended); the
	// object runs here again, nothing lost.
	MoveAborted
	// MoveAbandoned: the target could not take ownership in the Location
	// Store (a newer owner, or the store out of reach past its deadline).
	MoveAbandoned
	// MoveLost: the target left past the point of no return; the object's
	// queued work went with it.
	MoveLost
	// MoveClosed: this host closed during the move.
	MoveClosed
)

// String returns the outcome's name: moved, refused, aborted, abandoned,
// lost or closed.
func (o MoveOutcome) String() string {
	switch o {
	case MoveDone:
		return "moved"
	case MoveRefused:
		return "refused"
	case MoveAborted:
		return "aborted"
	case MoveAbandoned:
		return "abandoned"
	case MoveLost:
		return "lost"
	case MoveClosed:
		return "closed"
	}
	return "none"
}
