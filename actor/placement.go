package actor

// Placement says which host activates an object of a kind when a message
// is sent to it and no live host owns it. It is applied by the host the
// message is sent from; the host it picks activates the object (the
// Location Store still allows one activation per object, so hosts that
// pick differently at the same moment end with one owner and route to
// it). An object stays where it was activated until it moves (Relocate,
// Drain) or deactivates: placement does not rebalance objects that live.
// Set the same placement for a kind on every host.
type Placement uint8

// The placements.
const (
	// PlaceLocal activates the object on the host that sends its first
	// message (the message a handler sends: that handler's host). The
	// default: no extra hop, and an object lives next to its user.
	PlaceLocal Placement = iota
	// PlaceRandom activates it on a host picked at random among the
	// running hosts of the network that have the kind (the sender's host
	// included).
	PlaceRandom
	// PlaceHashed activates it on the host that a consistent (rendezvous)
	// hash of the object's id picks among the running hosts that have the
	// kind: every sender picks the same host, and a host joining or
	// leaving changes the pick only for the ids it takes or gave up.
	PlaceHashed
	// PlaceLeastLoaded activates it on the running host with the kind that
	// has the fewest active objects (ties: the lowest name).
	PlaceLeastLoaded
)

// String returns the placement's name.
func (p Placement) String() string {
	switch p {
	case PlaceRandom:
		return "random"
	case PlaceHashed:
		return "hashed"
	case PlaceLeastLoaded:
		return "least-loaded"
	}
	return "local"
}

// SetPlacement sets where the kind's objects activate (see Placement);
// the default is PlaceLocal. On a host without a transport every placement
// is local.
func (k *Kind[S]) SetPlacement(p Placement) { k.s.placement = p }

// Placement returns the kind's placement.
func (k *Kind[S]) Placement() Placement { return k.s.placement }

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
