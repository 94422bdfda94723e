package actor

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/route"
)

// routes is what this host knows of where objects run, and what it sends
// them: the route table (cached routes from the Location Store and
// forwarding routes left by moves, route.Table) and the sending streams
// (one per object this host sends to, route.Streams), both sharded by
// object; and the coarse clock they read.
//
// Owns: the route and stream shards, the coarse clock.
// Lock: each shard's mutex, a leaf: nothing is called under it but the
// pure route machines.
// May call: package route only.
// Invariants: a route's expiry and a stream's idleness are read against
// the coarse clock (the tick advances it); a forwarding route outlives a
// cached one (FollowDuration against RouteCacheTTL) and is dropped only
// with all set (forget) or when it expires.
type routes struct {
	shards    [32]routeShard
	streams   [streamShards]streamShard
	clk       atomic.Int64 // coarseNow: nanotime at the last tick
	cacheTTL  time.Duration
	followFor time.Duration
	// selfName and selfRun are this host's run, where its messages to its
	// own objects go (selfRun changes when a gateway joins again as a new
	// run); failed reports whether the host's failure facts cover a run
	// (the peer view's, wired by the host). Set at Start.
	selfName string
	selfRun  atomic.Uint64
	failed   func(route.Hand) bool
}

const streamShards = 64

// streamShard is a part of the host's sending streams (route.Streams),
// objects spread by hash.
type streamShard struct {
	mu sync.Mutex
	s  *route.Streams // guarded by mu
	_  [40]byte
}

// routeShard is a part of the host's route table (route cache and
// forwarding routes), objects spread by hash.
type routeShard struct {
	mu sync.Mutex
	t  route.Table // guarded by mu
	_  [40]byte
}

var shardSeed = maphash.MakeSeed()

// objHash spreads objects over shards by id (objects of different kinds
// with one id share a shard, which only costs spread).
func objHash(obj relocation.Object) uint64 { return maphash.String(shardSeed, obj.ID) }

// init readies the table for a host whose routes are cached for cacheTTL
// and whose forwarding routes last followFor; the clock starts at now
// (the host's nanotime: the tick advances it).
func (r *routes) init(cacheTTL, followFor time.Duration, now int64) {
	r.cacheTTL, r.followFor = cacheTTL, followFor
	r.clk.Store(now)
	r.startStreams()
}

// startStreams gives every shard fresh streams, whose epochs start at a
// start time: later than every epoch of an earlier run of this host.
func (r *routes) startStreams() {
	base := uint64(time.Now().UnixNano())
	for i := range r.streams {
		sh := &r.streams[i]
		sh.mu.Lock()
		sh.s = route.NewStreams(base+uint64(i), streamShards, int64(streamIdleFor(r.followFor)))
		sh.mu.Unlock()
	}
}

// self returns this host's current run.
func (r *routes) self() peerRun { return peerRun{name: r.selfName, run: r.selfRun.Load()} }

// newRun makes run this host's run. The sending streams go on where the
// old run's stopped: what the old run's links had not delivered is sent
// again first, so the owners see no gap. With restart (what the old run
// had on its links is lost), every stream starts afresh instead: the next
// message to each object is sequence 1 of a new epoch (base, a start
// time, later than every epoch of the old run's), with no gap before it
// at the owner to wait for.
func (r *routes) newRun(run uint64, restart bool) {
	r.selfRun.Store(run)
	if restart {
		r.startStreams()
	}
}

// coarseNow is nanotime as of the host's last tick (25 ms): reading the
// clock costs more than the rest of an ordered admission on some
// machines, and stream idleness, route expiry and gap waits need no
// better.
func (r *routes) coarseNow() int64 { return r.clk.Load() }

func (r *routes) streamShard(obj relocation.Object) *streamShard {
	return &r.streams[objHash(obj)%streamShards]
}

// stamp numbers the next message of this host for obj, handed to run to
// (route.Streams.NextTo, with the host's failure facts).
func (r *routes) stamp(obj relocation.Object, to peerRun) route.Stamp {
	sh := r.streamShard(obj)
	sh.mu.Lock()
	st := sh.s.NextTo(obj, r.coarseNow(), route.Hand{Host: to.name, Run: to.run}, r.failed)
	sh.mu.Unlock()
	return st
}

// sending reports whether this host keeps a sending stream for obj: it
// stamped a message for it within the streams' idle time.
func (r *routes) sending(obj relocation.Object) bool {
	sh := r.streamShard(obj)
	sh.mu.Lock()
	ok := sh.s.Live(obj, r.coarseNow())
	sh.mu.Unlock()
	return ok
}

// handed notes that a message of this host for obj, stamped st, was
// handed (again) to run to: routed afresh after its first hop.
func (r *routes) handed(obj relocation.Object, st route.Stamp, to peerRun) {
	sh := r.streamShard(obj)
	sh.mu.Lock()
	sh.s.Handed(obj, st, route.Hand{Host: to.name, Run: to.run})
	sh.mu.Unlock()
}

// streamCount returns how many sending streams the host keeps.
func (r *routes) streamCount() int {
	n := 0
	for i := range r.streams {
		sh := &r.streams[i]
		sh.mu.Lock()
		n += sh.s.Len()
		sh.mu.Unlock()
	}
	return n
}

func (r *routes) shard(obj relocation.Object) *routeShard {
	return &r.shards[objHash(obj)%uint64(len(r.shards))]
}

// lookup returns the route to obj, if one is known and not expired.
func (r *routes) lookup(obj relocation.Object) (route.Entry, bool) {
	sh := r.shard(obj)
	sh.mu.Lock()
	e, ok := sh.t.Lookup(obj, r.coarseNow())
	sh.mu.Unlock()
	return e, ok
}

// learn caches where obj runs (for cacheTTL), or installs a forwarding
// route (follow: for followFor).
func (r *routes) learn(obj relocation.Object, host string, gen uint64, follow bool) {
	ttl := r.cacheTTL
	if follow {
		ttl = r.followFor
	}
	now := r.coarseNow()
	sh := r.shard(obj)
	sh.mu.Lock()
	sh.t.Learn(obj, route.Entry{Host: host, Gen: gen, Expires: now + int64(ttl), Follow: follow}, now)
	sh.mu.Unlock()
}

// update applies a hint: obj runs on host with owner generation gen. A
// known route is moved on if gen is newer; otherwise the hint is cached.
func (r *routes) update(obj relocation.Object, host string, gen uint64) {
	now := r.coarseNow()
	sh := r.shard(obj)
	sh.mu.Lock()
	if !sh.t.Update(obj, host, gen, now) {
		sh.t.Learn(obj, route.Entry{Host: host, Gen: gen, Expires: now + int64(r.cacheTTL)}, now)
	}
	sh.mu.Unlock()
}

// forget drops the cached route for obj (a forwarding route stays unless
// all is set): the next lookup asks the store.
func (r *routes) forget(obj relocation.Object, all bool) {
	sh := r.shard(obj)
	sh.mu.Lock()
	if all {
		sh.t.Forget(obj)
	} else {
		sh.t.ForgetCached(obj)
	}
	sh.mu.Unlock()
}

// forgetHost drops every route that leads to host.
func (r *routes) forgetHost(host string) {
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		sh.t.ForgetHost(host)
		sh.mu.Unlock()
	}
}

// prune forgets idle sending streams and expired routes.
func (r *routes) prune(now int64) {
	for i := range r.streams {
		sh := &r.streams[i]
		sh.mu.Lock()
		sh.s.Prune(now)
		sh.mu.Unlock()
	}
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		sh.t.Prune(now)
		sh.mu.Unlock()
	}
}

// advance moves the coarse clock to now (the tick).
func (r *routes) advance(now int64) { r.clk.Store(now) }

// setSelf names this host and its run.
func (r *routes) setSelf(name string, run uint64) {
	r.selfName = name
	r.selfRun.Store(run)
}

// selfRunNow returns this host's run.
func (r *routes) selfRunNow() uint64 { return r.selfRun.Load() }

func streamIdleFor(follow time.Duration) time.Duration { return 2 * follow }
