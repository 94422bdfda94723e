package actor

import (
	"time"
	"unicode/utf8"
)

// Inspection is what Host.Inspect found of an object, in a turn of its
// own on the host that runs it.
type Inspection struct {
	Ref Ref
	// Host is the host that ran the inspection's turn: the object's owner.
	Host string
	// ObjectGeneration and OwnerGeneration are the object's row as its
	// owner holds it (OwnerGeneration grows by one on every owner change:
	// a move, a takeover).
	ObjectGeneration, OwnerGeneration uint64
	// Since is when this activation began on Host: its activation, or the
	// move that brought it here.
	Since time.Time
	// Queued is how many application messages were queued behind the
	// inspection, or held for their order, when its turn ran.
	Queued int
	// Turns is how many messages this activation ran before the
	// inspection (inspections not counted); LastTurn is when the last of
	// them ended (zero: none).
	Turns    uint64
	LastTurn time.Time
	// Moves are the object's moves that Host was the source of, among the
	// newest moves it keeps (Host.RecentMoves), oldest first. A move from
	// another host is in that host's log.
	Moves []MoveEntry
	// Summary is the kind's summary of the state (Kind.Summarize), at
	// most MaxSummary bytes; "" for a kind without one.
	Summary string
}

// MaxSummary bounds an Inspection's Summary, in bytes: a longer summary is
// cut (at a character boundary) and ends with "…".
const MaxSummary = 1024

// inspectRequest asks an object's owner for an Inspection. It travels as
// any request to the object does, and runs in a turn of its own.
type inspectRequest struct{}

// cutSummary cuts s to MaxSummary bytes at a character boundary.
func cutSummary(s string) string {
	if len(s) <= MaxSummary {
		return s
	}
	const more = "…"
	n := MaxSummary - len(more)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + more
}
