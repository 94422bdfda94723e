package actor

import (
	"context"
	"errors"
	"hash/maphash"
	"log/slog"
	"sort"
	"strings"
	"time"

	pa "github.com/asynkron/protoactor-go/actor"
	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/route"
	"github.com/berthrt/berth/transport"
)

// Host hosts stateful objects and channel subscribers: one owner per object
// or subscriber, each a protoactor-go actor whose mailbox holds encoded,
// reference-counted messages. Several hosts may live in one process.
//
// Life cycle: NewHost, Register kinds and channels, Start; then Stop(ctx)
// to finish queued work gracefully (deactivate hooks run) or Close to stop
// at once. After Stop or Close returns, no goroutine of the host is left.
// A Host is safe for concurrent use.
type Host struct {
	hostEnv // what every part reads: the configuration, the name, the logger, the pools

	windowWait func(ctx context.Context, d time.Duration) error // tests: Busiest's window (nil: waitWindow)

	jobs     jobQueue     // the host-wide application job queue (mailbox.Permits) and the lanes' counts
	requests requestTable // Asks waiting for their reply (requests.go)
	stats    hostStats    // the counters and gauges of Stats (stats.go)
	life     lifecycle    // running, stopping, closed; the host's context

	owners   ownerTable // the kinds, the channels, the actor system (owner.go)
	workers  workerPool // the dispatcher's workers (host.go)
	svc      *services  // the background work and the lanes (services.go)
	peers    peers      // the transport, the membership and what this host knows of its peers (peers.go)
	in       inbounds   // per sending peer: what this host keeps for its messages (inbound.go)
	router   router     // look-ups of where objects run (router.go)
	store    relocation.Store
	lease    leaseKeeper   // this run's lease (lease.go)
	gate     leaseGate     // the lease as turns read it (lease.go)
	routes   routes        // where objects run, and this host's sending streams (routes.go)
	moves    moveTable     // the moves this host takes part in (mover.go)
	admit    admission     // from a send to a queue, and the deferred sends (admission.go)
	drainer  drainer       // Drain and the leave stages (drain.go)
	gaps     gapFacts      // failure facts and the gaps' gauge and log (gaps.go)
	pressure pressureSet   // the objects outside senders wait for: their owners paused them (pressure.go)
	suspects suspicions    // failure suspicions from the links, checked against the Location Store (suspect.go)
	events   eventLog      // what happened to the cluster as this host saw it (events.go)
	metrics  metricsServer // the /metrics server, if Config.MetricsAddr is set

}

// NewHost returns a host configured by cfg (see Config for defaults). It
// fails with InvalidOperation naming the bad field.
func NewHost(cfg Config) (*Host, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	h := &Host{
		hostEnv: hostEnv{
			cfg:     cfg,
			name:    cfg.Name,
			obs:     observer{Observer: cfg.Observer, timed: cfg.Observer != nil},
			trace:   newTracing(cfg.TracerProvider, cfg.Name),
			log:     cfg.Logger.With("host", cfg.Name),
			pool:    payload.NewPool(payload.PoolOptions{OnRelease: cfg.OnPayloadRelease}),
			reg:     payload.NewRegistry(),
			tallies: newTallies(),
			clock:   cfg.clock,
		},
		life:    lifecycle{storeWait: cfg.StoreTimeout, done: make(chan struct{}), closed: make(chan struct{})},
		svc:     newServices(cfg.clock),
		owners:  ownerTable{seed: maphash.MakeSeed(), kinds: map[string]*kindRuntime{}, channels: map[string]*channelRuntime{}},
		workers: workerPool{handoff: make(chan func()), stop: make(chan struct{})},
		drainer: drainer{stopTurn: make(chan struct{}, 1)},
		events:  eventLog{self: cfg.Name},
	}
	h.life.close = h.Close
	h.lanes = &h.svc.lanes
	if h.clock != nil {
		h.clockBase = h.clock.Now().Add(-time.Second)
	}
	h.store = cfg.Store
	if h.store == nil {
		h.store = relocation.NewMemoryStore(nil)
	}
	h.owners.handOn = h.router.handOn
	h.suspects.confirm = make(chan membership.Member)
	h.wire()
	h.peers.view.selfVersion = cfg.AppVersion
	if h.obs.Observer == nil {
		h.obs.Observer = noObserver{}
	}
	for i := range h.router.lanes {
		h.router.lanes[i].wg = &h.svc.lanes
	}
	h.jobs.permits = mailbox.NewPermits(cfg.MaxQueuedApplicationJobs, nil)
	if err := h.reg.Register(payload.Protobuf, payload.IsProtoMessage); err != nil {
		return nil, err
	}
	for i, c := range cfg.Codecs {
		if err := h.reg.Register(c.Codec, c.Select); err != nil {
			return nil, &payload.Error{Kind: payload.InvalidOperation, Op: "actor.NewHost",
				Detail: "Config.Codecs[" + itoa(i) + "]", Err: err}
		}
	}
	return h, nil
}

// wire hands each part the lower parts it uses and the host's env: the
// host is the only value that knows them all.
func (h *Host) wire() {
	env := &h.hostEnv
	h.requests.hostEnv, h.requests.life, h.requests.stats, h.requests.peers = env, &h.life, &h.stats, &h.peers
	h.suspects.hostEnv, h.suspects.life, h.suspects.stats, h.suspects.events = env, &h.life, &h.stats, &h.events
	h.suspects.svc, h.suspects.store, h.suspects.peers = h.svc, h.store, &h.peers
	h.gaps.hostEnv, h.gaps.peers, h.gaps.pressure = env, &h.peers, &h.pressure
	h.peers.hostEnv, h.peers.life, h.peers.stats, h.peers.routes = env, &h.life, &h.stats, &h.routes
	h.peers.pressure, h.peers.credits, h.peers.handler = &h.pressure, &h.in, h.in.handler(&h.peers.attached)
	h.lease.hostEnv, h.lease.life, h.lease.stats, h.lease.events, h.lease.gate = env, &h.life, &h.stats, &h.events, &h.gate
	h.lease.routes, h.lease.store, h.lease.peers, h.lease.requests, h.lease.owners, h.lease.in = &h.routes, h.store, &h.peers, &h.requests, &h.owners, &h.in
	h.owners.hostEnv, h.owners.life, h.owners.stats, h.owners.gate, h.owners.jobs = env, &h.life, &h.stats, &h.gate, &h.jobs
	h.owners.store, h.owners.routes, h.owners.peers, h.owners.gaps, h.owners.requests = h.store, &h.routes, &h.peers, &h.gaps, &h.requests
	h.owners.admit, h.owners.record = &h.admit, &h.moves.record
	h.owners.context = func(o *owner) Context { return Context{host: h, owner: o} }
	h.router.hostEnv, h.router.life, h.router.stats, h.router.events, h.router.gate = env, &h.life, &h.stats, &h.events, &h.gate
	h.router.store, h.router.routes, h.router.peers, h.router.gaps, h.router.requests, h.router.owners = h.store, &h.routes, &h.peers, &h.gaps, &h.requests, &h.owners
	h.admit.hostEnv, h.admit.life, h.admit.gate, h.admit.jobs, h.admit.pressure = env, &h.life, &h.gate, &h.jobs, &h.pressure
	h.admit.routes, h.admit.peers, h.admit.requests, h.admit.owners, h.admit.router = &h.routes, &h.peers, &h.requests, &h.owners, &h.router
	h.moves.hostEnv, h.moves.life, h.moves.stats, h.moves.gate, h.moves.store, h.moves.svc = env, &h.life, &h.stats, &h.gate, h.store, h.svc
	h.moves.events, h.moves.routes, h.moves.peers, h.moves.owners, h.moves.router = &h.events, &h.routes, &h.peers, &h.owners, &h.router
	h.moves.requests = &h.requests
	h.moves.remote.t = &h.moves
	h.in.hostEnv, h.in.life, h.in.svc, h.in.store, h.in.pressure, h.in.routes = env, &h.life, h.svc, h.store, &h.pressure, &h.routes
	h.in.peers, h.in.suspects, h.in.gaps, h.in.requests, h.in.owners = &h.peers, &h.suspects, &h.gaps, &h.requests, &h.owners
	h.in.router, h.in.admit, h.in.moves = &h.router, &h.admit, &h.moves
	h.drainer.hostEnv, h.drainer.life, h.drainer.stats, h.drainer.events, h.drainer.jobs = env, &h.life, &h.stats, &h.events, &h.jobs
	h.drainer.peers, h.drainer.owners, h.drainer.moves, h.drainer.in, h.drainer.lease = &h.peers, &h.owners, &h.moves, &h.in, &h.lease
	for _, v := range []**peerView{&h.admit.view, &h.drainer.view, &h.in.view, &h.requests.view, &h.router.view, &h.suspects.view, &h.moves.view} {
		*v = &h.peers.view
	}
	h.owners.persist.hostEnv, h.owners.persist.life, h.owners.persist.stats, h.owners.persist.requests = env, &h.life, &h.stats, &h.requests
}

// Host returns the host the owner runs on.
func (c *Context) Host() *Host { return c.host.(*Host) }

// Name returns the host's name.
func (h *Host) Name() string { return h.name }

// Register adds kinds and channels to the host. It must be called before
// Start; mistakes in the definitions are reported by Start.
func (h *Host) Register(items ...Registrable) error {
	h.life.mu.Lock()
	defer h.life.mu.Unlock()
	if h.life.state.Load() != stateCreated {
		return payload.NewError(payload.InvalidOperation, "actor.Host.Register", "host already started")
	}
	for _, it := range items {
		h.owners.specs = append(h.owners.specs, it.specs()...)
	}
	return nil
}

// Start checks the registrations, freezes the codec registry, spawns the
// channel subscribers and starts taking messages. A registration mistake
// (duplicate kind or channel, empty name, nil factory, two handlers for one
// type) fails Start with an error naming the kind and type.
func (h *Host) Start() error {
	h.life.mu.Lock()
	defer h.life.mu.Unlock()
	if h.life.state.Load() != stateCreated {
		return payload.NewError(payload.InvalidOperation, "actor.Host.Start", "host already started")
	}
	var errs []error
	for _, s := range h.owners.specs {
		errs = append(errs, s.errs...)
		if len(s.errs) > 0 {
			continue
		}
		if s.channel {
			cr := h.owners.channels[s.name]
			if cr == nil {
				if _, clash := h.owners.kinds[s.name]; clash {
					errs = append(errs, payload.NewError(payload.AlreadyExists, "actor.Host.Start", "channel "+s.name+" has the name of a kind"))
					continue
				}
				cr = &channelRuntime{name: s.name, byType: map[string][]*owner{}, targets: map[string][]target{}}
				h.owners.channels[s.name] = cr
			}
			cr.specs = append(cr.specs, s)
			continue
		}
		if _, dup := h.owners.kinds[s.name]; dup {
			errs = append(errs, payload.NewError(payload.AlreadyExists, "actor.Host.Start", "kind "+s.name+" registered twice"))
			continue
		}
		if _, clash := h.owners.channels[s.name]; clash {
			errs = append(errs, payload.NewError(payload.AlreadyExists, "actor.Host.Start", "kind "+s.name+" has the name of a channel"))
			continue
		}
		h.owners.kinds[s.name] = &kindRuntime{spec: s, t: &h.owners}
	}
	ss := h.cfg.StateStore
	if ss == nil {
		ss, _ = h.store.(relocation.StateStore)
	}
	h.owners.persist.init(ss)
	for _, kr := range h.owners.kinds {
		if kr.spec.persist && ss == nil {
			errs = append(errs, payload.NewError(payload.InvalidOperation, "actor.Host.Start",
				"kind "+kr.spec.name+" persists its state, and the host has no state store (Config.StateStore, or a Store that is a relocation.StateStore)"))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	h.lease.init(h.cfg.Store == nil)
	h.routes.init(h.cfg.RouteCacheTTL, h.cfg.FollowDuration, h.nanotime())
	h.routes.failed = func(hd route.Hand) bool { return h.peers.view.runFailed(peerRun{name: hd.Host, run: hd.Run}) }
	h.life.ctx, h.life.end = context.WithCancel(context.Background())
	if err := h.join(); err != nil {
		h.life.end()
		return err
	}
	if h.cfg.MetricsAddr != "" {
		if err := h.serveMetrics(); err != nil {
			h.leave(false)
			h.life.end()
			return err
		}
	}
	h.reg.Freeze()

	h.owners.system = pa.NewActorSystem(pa.WithLoggerFactory(func(*pa.ActorSystem) *slog.Logger {
		return slog.New(minLevel{h.log.Handler(), slog.LevelWarn}).With("lib", "protoactor")
	}))
	h.owners.props = pa.PropsFromProducer(func() pa.Actor { return ownerActor{} },
		pa.WithMailbox(func() pa.Mailbox { return h.owners.spawning }),
		pa.WithDispatcher(dispatcher{workers: &h.workers, throughput: h.cfg.Throughput}))

	h.life.state.Store(stateRunning)
	for _, cr := range h.owners.channels {
		for i, s := range cr.specs {
			o := h.owners.newOwner(s, nil, Ref{Kind: cr.name, ID: "#" + itoa(i)})
			cr.subs = append(cr.subs, o)
			for t, hd := range s.handlers {
				cr.byType[t] = append(cr.byType[t], o)
				cr.targets[t] = append(cr.targets[t], target{o: o})
				if hd.request {
					cr.serving(t)
				}
			}
		}
	}
	h.obs.Attach(h)
	if h.peers.members != nil {
		h.lease.renewMembershipWhileStarting()
	}
	h.startServices()
	return nil
}

// startServices starts the host's background work (services.go). Each
// part registers its periodic jobs on the schedule they belong to: the
// tick runs the network's housekeeping (a host with no transport has
// none), the lease has a schedule of its own (its renewal waits on the
// store), the membership's lease another (a slow store call must not
// delay it, nor a slow membership the store's), and so has the janitor.
func (h *Host) startServices() {
	if !h.lease.private {
		lease := &schedule{name: "lease"}
		lease.every("renew the host lease", h.lease.every, h.lease.leaseTick)
		h.svc.startSchedule(lease)
		h.svc.start(h.lease.checkOwners) // ownership checks after a lapse
	}
	if h.peers.members != nil {
		member := &schedule{name: "membership"}
		member.every("renew the membership lease", h.lease.every, h.lease.memberTick)
		h.svc.startSchedule(member)
	}
	if h.cfg.IdleTimeout > 0 {
		janitor := &schedule{name: "janitor"}
		janitor.every("passivate idle objects", max(h.cfg.IdleTimeout/4, time.Millisecond), h.owners.passivateIdle)
		h.svc.startSchedule(janitor)
	}
	if h.peers.tr != nil {
		tick := &schedule{name: "tick"}
		h.router.orderJobs(tick)
		h.admit.deferredJobs(tick)
		h.peers.peerJobs(tick)
		h.in.pauseJobs(tick)
		tick.every("record the event log's bursts", eventFlushEvery, func(time.Time) bool {
			h.events.flush(false)
			return false
		})
		h.moves.moveJobs(tick)
		h.svc.startSchedule(tick)
		again := &schedule{name: "route again"}
		h.router.waitingJobs(again)
		h.svc.startSchedule(again)
	}
}

// join attaches the host to its transport, joins its membership (with a
// transport), and takes its lease in the Location Store — in that order.
// The transport refuses a second live host of the name within its
// network, and the membership refuses one across processes, before the
// lease is taken: a second run of a live host's name must fail without
// touching the first run's lease (which its newer generation would
// replace, and the first run would lose its objects). Peers that learn of
// this host from the membership can reach it at once. The membership's
// current list is read before join returns, so the host knows the hosts
// that joined before it.
func (h *Host) join() error {
	const op = "actor.Host.Start"
	if h.cfg.Transport == nil {
		return h.lease.renewLease()
	}
	h.peers.origin = h.name
	h.peers.members = h.cfg.Membership
	ready := make(chan struct{})
	h.peers.kinds = h.offeredKinds()
	tr, err := h.peers.attachRun(h.lease.run(), ready)
	if err != nil {
		return err
	}
	if r, ok := tr.(transport.Roles); ok && r.Role() == transport.RoleGateway && len(h.peers.kinds) > 0 {
		_ = tr.Close(false)
		return payload.NewError(payload.InvalidOperation, "actor.Host.Start",
			"host "+h.name+"'s certificate names it a gateway, which may not offer kinds ("+strings.Join(h.peers.kinds, ", ")+
				"): start it with Config.Gateway, or give it a node's certificate")
	}
	h.peers.tr = newRunLink(tr)
	h.peers.attached.Store(true)
	close(ready)
	ctx, cancel := h.life.storeContext()
	defer cancel()
	sent := time.Now()
	ml, err := h.peers.members.Join(ctx, h.peers.member(h.lease.run()))
	h.lease.memberRenewed, h.lease.memberTTL = sent, ml.TTL
	if err != nil {
		h.leave(false)
		return &payload.Error{Kind: payload.KindOf(err), Op: op, Detail: "cannot join the membership", Err: err}
	}
	if ml.TTL > 0 && ml.TTL < h.cfg.LeaseTTL {
		// The membership would end this run after a stall of ml.TTL, long
		// before the Location Store's lease runs out: the longer lease
		// would buy nothing but slower takeovers.
		h.leave(true)
		return payload.NewError(payload.InvalidOperation, op, "Config.LeaseTTL "+h.cfg.LeaseTTL.String()+
			" is longer than the membership's lease ("+ml.TTL.String()+"): a stall past "+ml.TTL.String()+
			" would end the host's run all the same; give the membership the same TTL (membership.Options.TTL, pgstore.MembershipOptions.TTL)")
	}
	if err := h.lease.renewLease(); err != nil {
		h.leave(true)
		return err
	}
	h.lease.renewMembershipWhileStarting()
	ch, err := h.peers.members.Watch(h.life.ctx)
	if err != nil {
		h.leave(true)
		return &payload.Error{Kind: payload.KindOf(err), Op: op, Detail: "cannot watch the membership", Err: err}
	}
	h.lease.renewMembershipWhileStarting()
	h.peers.view.apply(<-ch) // the first event is the list as it is now
	h.peers.tellDirectory()
	h.svc.start(func(<-chan struct{}) { h.watchMembers(ch) }) // ends with the host's life
	return nil
}

// offeredKinds returns the kinds this host offers in the membership,
// sorted: its kinds, or none on a gateway (nothing is placed on it).
func (h *Host) offeredKinds() []string {
	kinds := make([]string, 0, len(h.owners.kinds))
	for name := range h.owners.kinds {
		if !h.cfg.Gateway {
			kinds = append(kinds, name)
		}
	}
	sort.Strings(kinds)
	return kinds
}

// leave takes the host off its transport (gracefully: what it sent is
// delivered, and frames sent to it that it did not take go back to their
// senders) and, if it joined, off its membership. A host whose run is
// over (Err) leaves at once: its peers saw it fail and answer no goodbye.
func (h *Host) leave(joined bool) {
	if h.peers.tr == nil {
		return
	}
	if h.Err() != nil {
		// Its run is over: its peers dropped its links and answer no
		// crash notice, so none is waited for. What they had not taken
		// is lost with the run.
		h.stats.closeDropped.Add(int64(h.peers.tr.closeEnded()))
	} else {
		if err := h.peers.tr.Close(true); err != nil {
			// Its peers did not all confirm what it sent last (its
			// leave notice among it) within the transport's close
			// timeout.
			h.log.Warn("the transport's graceful close gave up on peers", "err", err)
		}
		for _, items := range h.peers.tr.current().takeAgain() {
			// A new run's messages to send again whose peer it never
			// reached: accepted messages Close ended unrun.
			h.stats.closeDropped.Add(int64(len(items)))
		}
	}
	if joined {
		ctx, cancel := h.life.storeContext()
		defer cancel()
		if err := h.peers.members.Leave(ctx, h.name, h.lease.run()); err != nil {
			h.log.Warn("membership leave failed; the lease will expire", "err", err)
		}
	}
}

// Done is closed once the host has closed: by Close or Stop, or by itself
// (see Err).
func (h *Host) Done() <-chan struct{} { return h.life.closed }

// Err returns why the host closed itself — ErrLeaseLost if its run is
// over: the membership ended it (a gateway joins again as a new run
// instead: Config.Gateway), or a newer run of its name holds the lease —
// or nil if it did not (it runs, or Close or Stop closed it).
func (h *Host) Err() error {
	if p := h.life.lostErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Ready reports whether the host serves: it started (and, on a network,
// joined the membership), its lease is live, and it is neither draining
// nor stopping nor closed. It returns nil then, and otherwise an error
// saying why — of kind Unavailable (not started yet, or its lease is not
// live) or ShuttingDown (draining, stopping or closed). It is what a
// readiness probe asks: a host that is not ready should be sent no new
// work (it may still finish what it has).
func (h *Host) Ready() error {
	const op = "actor.Host.Ready"
	switch h.life.state.Load() {
	case stateCreated:
		return payload.NewError(payload.Unavailable, op, "not started")
	case stateStopping:
		return payload.NewError(payload.ShuttingDown, op, "stopping")
	case stateClosed:
		if err := h.Err(); err != nil {
			return &payload.Error{Kind: payload.ShuttingDown, Op: op, Detail: "closed", Err: err}
		}
		return payload.NewError(payload.ShuttingDown, op, "closed")
	}
	if s := h.DrainState(); s != Serving {
		return payload.NewError(payload.ShuttingDown, op, "draining ("+s.String()+")")
	}
	if h.lease.joining.Load() || h.gate.betweenRuns.Load() {
		return payload.NewError(payload.Unavailable, op, "the membership ended this host's run: it is joining again as a new run")
	}
	if !h.gate.live() {
		return payload.NewError(payload.Unavailable, op, "the host's lease is not live: it is in jeopardy (its renewals were not answered in time), its objects paused")
	}
	return nil
}

// Stop stops the host gracefully: it takes no new messages from outside
// (sends fail with ShuttingDown), lets queued messages and the messages
// their handlers send run, runs every object's deactivate hook in a last
// turn, and then closes the host; it returns nil once the host has closed.
//
// If ctx ends first, Stop returns promptly with an error of kind
// DeadlineExceeded that wraps ctx.Err() (errors.Is matches
// context.DeadlineExceeded or context.Canceled), and the host does not
// close: it stays where the stop got to (below) and goes on running what
// it holds — objects not handed on yet keep running their queued messages
// and the messages their handlers send. Nothing accepted is dropped. Call Stop again (with more time) to finish from where it
// got to, or Close to stop at once: only Close drops work
// (Stats.DroppedOnClose counts it). This is net/http's Server.Shutdown
// rule. Concurrent calls of Stop and Drain run one at a time: a call that
// finds another running waits for it to return (or for its own ctx).
//
// On a network, Stop first drains (Drain) when the host has objects of a
// kind that relocates and other hosts serve their kinds, so that their
// state is kept; Config.StopDeactivates turns that off. With nowhere to go
// for them, Stop deactivates them as on a standalone host. A Stop after a
// Drain or Stop whose context ended goes on with that drain or stop.
//
// Stop on a network finishes in bounded time however hard other hosts send
// to it: once it leaves (after the drain's moves, if it drains), they stop
// routing here. A message they send meanwhile to one of its objects waits
// in its sender (an external send up to SendTimeout) until the object is
// handed on — moved, or deactivated and then activated elsewhere — and
// goes there; one that cannot wait or waited in vain fails with
// Unavailable (a Tell from outside a handler returns it; an Ask from a
// handler hears it). Messages already sent here run here, or follow their
// object — what bounds Stop is that work, accepted before it left.
//
// Where a Stop whose context ended leaves the host: while its drain still
// moved objects, relocating, as Drain leaves it (it serves as before, but
// no new object is placed here); after that, stopping — sends from outside
// fail with ShuttingDown — and, on a network, leaving: peers' sends to the
// objects it still has wait in their senders, and fail with Unavailable
// after SendTimeout, until a later Stop hands those objects on.
func (h *Host) Stop(ctx context.Context) error {
	const op = "actor.Host.Stop"
	release, err := h.drainer.stopTurnTake(ctx, op)
	if err != nil {
		return err
	}
	defer release()
	if h.DrainState() != Serving || (h.peers.tr != nil && !h.cfg.StopDeactivates && h.life.acceptsExternal() && h.owners.hasMovable()) {
		// Drain — or go on with the drain an earlier call began.
		err := h.drainer.drain(ctx, op)
		if !errors.Is(err, ErrNowhereToDrain) {
			return err
		}
	}
	return h.drainer.stop(ctx, op)
}

// Close stops the host at once: queued messages end with ShuttingDown
// (their payloads released undecoded), waiting requests complete with
// ShuttingDown, running handlers see their Context done and are waited for,
// and every goroutine of the host has ended when Close returns.
// Deactivate hooks do not run (use Stop). Close is idempotent: a second
// call returns once the first has finished.
//
// Close is the only call that drops accepted work: the application
// messages it ends unrun — queued or held out of order in the objects'
// queues, waiting here for a job permit or for a leaving host, in moves
// under way — are counted in Stats.DroppedOnClose and logged (Warn) with
// their number. After a Stop that returned nil there are none.
func (h *Host) Close() error {
	h.life.mu.Lock()
	prev := h.life.state.Swap(stateClosed)
	if prev == stateClosed {
		h.life.mu.Unlock()
		<-h.life.closed // another Close runs: return when it has
		return nil
	}
	h.life.mu.Unlock()
	defer close(h.life.closed)
	defer h.tallies.flush() // what the close itself added too
	defer h.events.flush(true)

	// Handlers' sends waiting for a leaving host end first: from now on
	// none defers itself, and those counted here end once, whether here or
	// in a retry of the tick that runs meanwhile.
	h.admit.deferred.mu.Lock()
	dropped := len(h.admit.deferred.list)
	h.admit.deferred.closed = true
	h.admit.deferred.mu.Unlock()
	h.admit.closeDeferred()
	for _, m := range h.gaps.closeWaiting() { // (a request gets ShuttingDown)
		if m.Header().Flags()&flagSkip == 0 {
			dropped++
		}
		h.router.failMessage(m, ErrShuttingDown)
	}
	// Leave the network: peers stop routing here and learn that our moves
	// are over.
	h.leave(true)
	// No new turn may start (mailboxes closed), then running handlers see
	// their Context done. What waits for a permit is ended when the
	// permits close: counted just before.
	dropped += h.waitingForPermits()
	h.jobs.permits.Close()
	var all []*owner
	var unrun [][]*mailbox.Envelope
	if h.owners.system != nil {
		for _, kr := range h.owners.kinds {
			all = append(all, kr.all()...)
		}
		for _, cr := range h.owners.channels {
			all = append(all, cr.subs...)
		}
		for _, o := range all {
			queued, held := o.closeBox()
			unrun = append(unrun, append(queued, held...))
		}
	}
	close(h.life.done)
	if h.life.end != nil {
		h.life.end() // ends the membership watch and flow-control waits
	}
	if h.metrics.stop != nil {
		_ = h.metrics.stop()
	}
	h.suspects.stop()
	h.svc.stopAll()
	h.lease.stopFlights()
	h.svc.lanes.Wait() // the links are closed: no more work comes to the lanes
	// What Close dropped is noted as it returns, once the rest is counted.
	defer h.noteDropped(&dropped)
	if h.owners.system == nil {
		return nil
	}
	// Owners a lane or the tick installed after the first sweep
	// (an activation that had passed its check, an incoming move) close
	// the same way: nothing installs owners any more.
	seen := make(map[*owner]bool, len(all))
	for _, o := range all {
		seen[o] = true
	}
	for _, kr := range h.owners.kinds {
		for _, o := range kr.all() {
			if !seen[o] {
				queued, held := o.closeBox()
				all = append(all, o)
				unrun = append(unrun, append(queued, held...))
			}
		}
	}
	for i, o := range all {
		for _, e := range unrun[i] {
			if isApplication(e) {
				dropped++
			}
			h.router.endUnrun(o, "", e, ErrShuttingDown, RejectShuttingDown)
		}
	}
	for _, d := range h.moves.allMoves() {
		dropped += d.abandonOnClose()
	}
	h.drainer.rounds.Wait() // a cut-short drain's last round: its moves have ended
	h.moves.remote.remoteClose()
	for _, o := range all {
		if o.pid != nil {
			h.owners.system.Root.Stop(o.pid)
		}
	}
	h.owners.actors.Wait()
	h.owners.persist.running.Wait() // the last flush: its outputs released or ended
	close(h.workers.stop)
	h.workers.running.Wait()
	// Turns run inline by callers (Config.InlineAsk) are not drains; wait
	// for them too. Their handlers see their Context done.
	for h.owners.turnsRunning() > 0 {
		time.Sleep(100 * time.Microsecond)
	}
	h.owners.system.Shutdown()
	return nil
}

// waitingForPermits counts the application messages that wait here for a
// job permit — handlers' sends and messages off the links, in their
// sources' outboxes — and those on the links' slow lanes: what Close ends
// when it closes the permits and the lanes run out. It counts them as it
// finds them; a turn that ends meanwhile may admit one more.
func (h *Host) waitingForPermits() int {
	n := 0
	count := func(ob *outbox) {
		ob.mu.Lock()
		for ps := ob.head; ps != nil; ps = ps.link {
			// The head may be being admitted, its message no longer the
			// outbox's to read; the others wait untouched.
			if ps == ob.head || ps.m.Header().Flags()&flagSkip == 0 {
				n += len(ps.targets) - ps.next
			}
		}
		ob.mu.Unlock()
	}
	for _, kr := range h.owners.kinds {
		for _, o := range kr.all() {
			count(&o.out)
		}
	}
	for _, cr := range h.owners.channels {
		for _, o := range cr.subs {
			count(&o.out)
		}
	}
	h.in.m.Range(func(_, v any) bool {
		ib := v.(*inbound)
		count(&ib.in)
		ib.slow.mu.Lock()
		n += len(ib.slow.work)
		ib.slow.mu.Unlock()
		return true
	})
	return n
}

// noteDropped adds what Close dropped to Stats.DroppedOnClose and logs it.
func (h *Host) noteDropped(n *int) {
	if *n == 0 {
		return
	}
	h.stats.closeDropped.Add(int64(*n))
	h.log.Warn("close ended accepted messages unrun (Stats.DroppedOnClose); a Stop that returns nil first drops none", "dropped", *n)
}

// metricsServer is the /metrics server Config.MetricsAddr asks for.
type metricsServer struct {
	addr string       // the listener's address
	stop func() error // ends the server (MetricsServer)
}

// MetricsServer is an Observer that serves itself over HTTP, for
// Config.MetricsAddr (metrics.Metrics is one). ServeMetrics starts serving
// at addr and returns the bound address (with the port chosen for port 0)
// and a stop function that ends the server and waits for its goroutines.
type MetricsServer interface {
	ServeMetrics(addr string) (bound string, stop func() error, err error)
}

func (h *Host) serveMetrics() error {
	srv, ok := h.obs.Observer.(MetricsServer)
	if !ok {
		return payload.NewError(payload.NotConfigured, "actor.Host.Start",
			"Config.MetricsAddr is set but Config.Observer does not serve HTTP (use metrics.New)")
	}
	bound, stop, err := srv.ServeMetrics(h.cfg.MetricsAddr)
	if err != nil {
		return &payload.Error{Kind: payload.Unavailable, Op: "actor.Host.Start", Detail: "Config.MetricsAddr", Err: err}
	}
	h.metrics.addr, h.metrics.stop = bound, stop
	return nil
}

// MetricsAddr returns the address /metrics is served on (with the port
// chosen when Config.MetricsAddr asked for port 0), or "" if none.
func (h *Host) MetricsAddr() string { return h.metrics.addr }

// noteMemberEvent records in the event log what a membership event
// applied to the view says: a join, a drain, a leave that handed its
// work on, and the runs that failed.
func (h *Host) noteMemberEvent(ev membership.Event, failed []peerRun) {
	switch {
	case ev.Type == membership.Joined:
		h.events.add(EventJoined, ev.Member.Name, ev.Member.LeaseGen, 0, "")
	case ev.Type == membership.StateChanged && ev.Member.State == membership.Draining:
		h.events.add(EventDraining, ev.Member.Name, ev.Member.LeaseGen, 0, "")
	case ev.Type == membership.Left && len(failed) == 0:
		h.events.add(EventLeft, ev.Member.Name, ev.Member.LeaseGen, 0, "")
	}
	for _, r := range failed {
		how := "its lease expired in the membership"
		switch ev.Type {
		case membership.Left:
			how = "it left without handing its work on"
		case membership.Sync:
			how = "the membership no longer lists this run"
		case membership.Joined, membership.StateChanged:
			how = "a new run of its name joined"
		}
		h.events.add(EventFailed, r.name, r.run, 0, how)
	}
}

// watchMembers keeps the view up to date from the membership watch until
// the watch ends (the host closes).
// It also applies the runs a suspicion showed dead (suspect.go) as the
// membership's expiry of them, here, one event at a time with the
// membership's own.
func (h *Host) watchMembers(ch <-chan membership.Event) {
	for {
		var ev membership.Event
		select {
		case e, ok := <-ch:
			if !ok {
				return
			}
			ev = e
		case m := <-h.suspects.confirm:
			if cur, ok := h.peers.view.member(m.Name); ok && cur.LeaseGen == m.LeaseGen {
				h.suspects.confirmedDead.Add(1) // else the membership said so first
			}
			h.peers.view.markDead(m.Name, m.LeaseGen)
			ev = confirmedExpiry(m)
		}
		failed := h.peers.view.apply(ev)
		h.noteMemberEvent(ev, failed)
		for _, r := range failed {
			if r.name != h.name {
				// The requests handed to the failed run end now, not
				// at their deadlines (the view already shows the run
				// failed: requests.go).
				h.requests.failRun(r)
				h.gaps.failed(r.name, ev.Type.String())
			}
		}
		h.peers.tellDirectory()
	}
}
