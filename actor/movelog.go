package actor

import (
	"sync"
	"time"
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
