package actor

import (
	"hash/maphash"
	"math/rand/v2"
)

// Placement decides where a kind's objects go: which host activates an
// object when a message is sent to it and no live host owns it
// (Activate), and which hosts a draining host moves one to (Drain). It is
// applied by the host the message is sent from, or the host that drains;
// the host it picks activates the object (the Location Store still allows
// one activation per object, so hosts that pick differently at the same
// moment end with one owner and route to it). An object stays where it
// was activated until it moves (Relocate, Drain) or deactivates.
// Set the same placement for a kind on every host.
//
// PlaceLocal, PlaceRandom, PlaceHashed and PlaceLeastLoaded are berth's;
// a program may give its own. A Placement must be safe for concurrent use
// and fast: Activate runs on the path of an object's first message, with
// no lock of the host held, and must not block or call the host.
type Placement interface {
	// Activate returns the host of among that activates object id, or ""
	// for self (the host that asks; so is a name not among them). among is the running hosts that
	// serve the kind (of the newest application version while several
	// run), sorted by name, each with its load as self last heard it;
	// self is among them when it may take the object (it does not while
	// it drains). It is not called with among empty.
	Activate(id, self string, among []HostLoad) string
	// Drain returns the hosts of among to move object id to, in the
	// order to try them (hosts not returned are not tried; an answer that
	// names none of among tries them all, in the order berth's placements
	// give). among is the other running hosts that serve the kind, sorted
	// by name; it is not empty. A draining host tries the hosts its links
	// reach first.
	Drain(id string, among []HostLoad) []string
	// String names the placement.
	String() string
}

// berth's placements. Their Drain tries the other hosts in an order that
// starts at one picked by the object's id (a process's own hash: drains of
// many objects spread over the hosts).
var (
	// PlaceLocal activates the object on the host that sends its first
	// message (the message a handler sends: that handler's host). The
	// default: no extra hop, and an object lives next to its user. (A
	// gateway, which hosts nothing, and a host older than others that
	// serve the kind in a rolling upgrade place by PlaceHashed instead.)
	PlaceLocal Placement = placeLocal{}
	// PlaceRandom activates it on a host picked at random among the
	// running hosts of the network that have the kind (the sender's host
	// included).
	PlaceRandom Placement = placeRandom{}
	// PlaceHashed activates it on the host that a consistent (rendezvous)
	// hash of the object's id picks among the running hosts that have the
	// kind: every sender picks the same host, and a host joining or
	// leaving changes the pick only for the ids it takes or gave up.
	PlaceHashed Placement = placeHashed{}
	// PlaceLeastLoaded activates it on the running host with the kind that
	// has the fewest active objects (ties: the lowest name).
	PlaceLeastLoaded Placement = placeLeastLoaded{}
)

type (
	placeLocal       struct{}
	placeRandom      struct{}
	placeHashed      struct{}
	placeLeastLoaded struct{}
)

// Activate implements Placement: here.
func (placeLocal) Activate(string, string, []HostLoad) string { return "" }

// Activate implements Placement: a host at random.
func (placeRandom) Activate(_, _ string, among []HostLoad) string {
	return among[rand.IntN(len(among))].Name
}

// Activate implements Placement: the host of the highest rendezvous score.
func (placeHashed) Activate(id, _ string, among []HostLoad) string {
	best, bestScore := "", uint64(0)
	for _, c := range among {
		if score := rendezvous(c.Name, id); best == "" || score > bestScore {
			best, bestScore = c.Name, score
		}
	}
	return best
}

// Activate implements Placement: the host with the fewest objects.
func (placeLeastLoaded) Activate(_, _ string, among []HostLoad) string {
	best := among[0]
	for _, c := range among[1:] {
		if c.Objects < best.Objects {
			best = c
		}
	}
	return best.Name
}

func (placeLocal) Drain(id string, among []HostLoad) []string       { return drainOrder(id, among) }
func (placeRandom) Drain(id string, among []HostLoad) []string      { return drainOrder(id, among) }
func (placeHashed) Drain(id string, among []HostLoad) []string      { return drainOrder(id, among) }
func (placeLeastLoaded) Drain(id string, among []HostLoad) []string { return drainOrder(id, among) }

func (placeLocal) String() string       { return "local" }
func (placeRandom) String() string      { return "random" }
func (placeHashed) String() string      { return "hashed" }
func (placeLeastLoaded) String() string { return "least-loaded" }

var drainSeed = maphash.MakeSeed()

// drainOrder is among's names from the one object id's hash picks, round.
func drainOrder(id string, among []HostLoad) []string {
	n := len(among)
	first := int(maphash.String(drainSeed, id) % uint64(n))
	order := make([]string, n)
	for i := range n {
		order[i] = among[(first+i)%n].Name
	}
	return order
}

// lookupMode is why a host looks an object up: placement applies to
// messages sent from this host, not to messages that came from another
// host (their sender placed them, or they follow a route) — those activate
// the object here.
type lookupMode uint8

const (
	fromOutside lookupMode = iota // Tell, Ask, … from outside a handler
	fromHandler                   // a send of a handler of this host
	fromLink                      // off a link, or routed again
)

// rendezvous is the score of host for object id in rendezvous hashing:
// FNV-1a over both, then a 64-bit finalizer (splitmix64). It is the same
// in every process, so every host picks the same owner.
func rendezvous(host, id string) uint64 {
	const prime = 1099511628211
	x := uint64(14695981039346656037)
	for i := 0; i < len(host); i++ {
		x = (x ^ uint64(host[i])) * prime
	}
	x = (x ^ 0xff) * prime // separator: ("ab","c") ≠ ("a","bc")
	for i := 0; i < len(id); i++ {
		x = (x ^ uint64(id[i])) * prime
	}
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
