package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/mailbox"
)

// hostCollector reads the attached hosts' Stats when the registry is
// gathered. It is a Collector rather than a set of GaugeFuncs because hosts
// attach after registration, and each adds a host label value.
type hostCollector struct {
	mu    sync.Mutex
	hosts map[string]actor.StatsSource // by Name(); guarded by mu

	ownersActive     *prometheus.Desc
	laneDepth        *prometheus.Desc
	permitsInUse     *prometheus.Desc
	permitWaiters    *prometheus.Desc
	permitsMax       *prometheus.Desc
	requestsInFlight *prometheus.Desc
	requestsFailed   *prometheus.Desc
	decodes          *prometheus.Desc
	fullCopies       *prometheus.Desc
	fullCopyBytes    *prometheus.Desc
	views            *prometheus.Desc
	heldOutOfOrder   *prometheus.Desc
	waitingToRoute   *prometheus.Desc
	skipsLost        *prometheus.Desc
	gapsClosed       *prometheus.Desc
	late             *prometheus.Desc
	oldestGap        *prometheus.Desc
	overBound        *prometheus.Desc
	pressureWaits    *prometheus.Desc
	peerWaits        *prometheus.Desc
	peerRefused      *prometheus.Desc
	linkRefused      *prometheus.Desc
	dropped          *prometheus.Desc
	droppedOnClose   *prometheus.Desc
	bounced          *prometheus.Desc
	relocations      *prometheus.Desc
	captured         *prometheus.Desc
	relayed          *prometheus.Desc
	forwarded        *prometheus.Desc
	stateWrites      *prometheus.Desc
	stateFlushes     *prometheus.Desc
	stateFenced      *prometheus.Desc
	stateErrors      *prometheus.Desc
	outputsHeld      *prometheus.Desc
	outputsDropped   *prometheus.Desc
	suspicions       *prometheus.Desc
	suspectsDead     *prometheus.Desc
	jeopardy         *prometheus.Desc
	jeopardies       *prometheus.Desc
	jeopardyTime     *prometheus.Desc
	rejoins          *prometheus.Desc
	lostOnRejoin     *prometheus.Desc
	sentAgain        *prometheus.Desc
	repeats          *prometheus.Desc
	leaseLapses      *prometheus.Desc
	ownershipChecks  *prometheus.Desc
	takenOver        *prometheus.Desc
	stateDropped     *prometheus.Desc
}

func newHostCollector() *hostCollector {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help,
			append([]string{"host"}, labels...), nil)
	}
	return &hostCollector{
		hosts: map[string]actor.StatsSource{},
		ownersActive: desc("owners_active",
			"Objects and channel subscribers with an owner on the host."),
		laneDepth: desc("lane_depth",
			"Items queued in the host's owner lanes (held items included).", "lane"),
		permitsInUse: desc("permits_in_use",
			"Host-wide job permits in use."),
		permitWaiters: desc("permit_waiters",
			"Senders waiting for a job permit."),
		permitsMax: desc("permits_max",
			"Host-wide job permits (MaxQueuedApplicationJobs)."),
		requestsInFlight: desc("requests_in_flight",
			"Requests waiting for replies."),
		requestsFailed: desc("requests_failed_with_peer_total",
			"Requests ended at once because the host their message was handed to was declared failed (they may have run)."),
		decodes: desc("payload_decodes_total",
			"Codec decodes: each builds a handler's message once."),
		fullCopies: desc("payload_full_copies_total",
			"Whole-buffer payload copies made by berth."),
		fullCopyBytes: desc("payload_full_copy_bytes_total",
			"Bytes copied by whole-buffer payload copies."),
		views: desc("payload_views_total",
			"Zero-copy views of payload bytes handed out."),
		heldOutOfOrder: desc("held_out_of_order",
			"Messages held because an older message of their sending host has not arrived yet."),
		waitingToRoute: desc("waiting_to_route",
			"Messages waiting on the host to be routed again: their look-up waits for the Location Store to answer, or a skip notice for a way to its object."),
		skipsLost: desc("order_skips_lost_total",
			"Skip notices that could not reach their object (their gaps wait for a failure fact)."),
		gapsClosed: desc("order_gaps_closed_total",
			"Sequence numbers of a sending host given up on after a host failure (lost with that host)."),
		late: desc("order_late_messages_total",
			"Messages run after a gap before them had been given up on."),
		oldestGap: desc("order_oldest_gap_seconds",
			"How long the longest-waiting gap of any object on the host has waited for an older message."),
		overBound: desc("order_over_bound_total",
			"Arrivals that found their sending host past an object's reorder bound (it was told to pause)."),
		pressureWaits: desc("order_pressure_waits_total",
			"Sends from outside handlers that waited for an object's reorder buffer."),
		peerWaits: desc("peer_credit_waits_total",
			"Sends from outside handlers that waited for credit at the object's host (Config.PeerInbound)."),
		peerRefused: desc("peer_refused_messages_total",
			"Messages from peers refused because the host kept Config.PeerInbound of theirs already."),
		linkRefused: desc("link_refused_items_total",
			"Items not sent because the link to their host was past its bound (the host did not take what was sent to it)."),
		dropped: desc("dropped_messages_total",
			"Messages the host could not deliver: their senders got an error and a skip notice followed."),
		droppedOnClose: desc("dropped_on_close_total",
			"Accepted messages the host's Close ended unrun (queued, held, or waiting for a permit or for a leaving host)."),
		bounced: desc("bounced_messages_total",
			"Messages sent back to their origin host to be routed afresh."),
		relocations: desc("relocations_total",
			"Moves completed with the host as source or target."),
		captured: desc("relocation_captured_messages_total",
			"Queued messages moved in move records sent from the host."),
		relayed: desc("relocation_relayed_messages_total",
			"Messages relayed from the host after relay-ready."),
		forwarded: desc("forwarded_messages_total",
			"Messages the host handed on to where their object runs (Message Follow or a route)."),
		stateWrites: desc("state_writes_total",
			"State writes of persistent objects that landed."),
		stateFlushes: desc("state_flushes_total",
			"State store calls made (each flush writes every state queued)."),
		stateFenced: desc("state_fenced_total",
			"State writes fenced because the object had a newer owner (the activation ended)."),
		stateErrors: desc("state_write_errors_total",
			"State store calls that failed and were retried (outputs waited)."),
		outputsHeld: desc("outputs_held",
			"Outputs of persistent objects waiting for their turn's state write."),
		outputsDropped: desc("outputs_dropped_total",
			"Outputs and queued messages of persistent objects ended as failures (fenced, capture failed)."),
		suspicions: desc("peer_suspicions_total",
			"Links to a peer that broke and made the host check the peer's lease in the Location Store."),
		suspectsDead: desc("peer_suspicions_confirmed_total",
			"Suspected peers whose run the membership ended, found by the host's check before the membership's watch told of it."),
		jeopardy: desc("lease_jeopardy",
			"1 while the host is in jeopardy: its lease ran out before a renewal was answered, and its objects run no turn."),
		rejoins: desc("rejoins_total",
			"Times this host joined again as a new run after the membership ended its run (it was paused or starved past its lease), dropping the old run's objects."),
		lostOnRejoin: desc("lost_on_rejoin_total",
			"Items the old run's links had not delivered when this host joined again as a new run that were not sent again: lost with that run."),
		sentAgain: desc("sent_again_total",
			"Messages the old run's links had not seen taken when this host joined again, sent again by the new run."),
		repeats: desc("order_repeats_dropped_total",
			"Messages whose stamp had run here already (sent again by a new run of their sender, or replayed): dropped."),
		jeopardies: desc("lease_jeopardies_total",
			"Times the host went into jeopardy."),
		jeopardyTime: desc("lease_jeopardy_seconds_total",
			"Time the host spent in jeopardy, its objects paused, the current spell included."),
		leaseLapses: desc("lease_lapses_total",
			"Renewals that found the host's lease lapsed in the Location Store."),
		ownershipChecks: desc("lease_ownership_checks_total",
			"Times the host checked its objects' ownership before they ran again (after a lapse, or a renewal whose answer was lost)."),
		takenOver: desc("objects_taken_over_total",
			"Objects another host took over while the host's lease had lapsed, dropped on the host."),
		stateDropped: desc("drain_state_dropped_total",
			"Objects whose state moves that a drain deactivated because every host it tried refused or failed the move: their in-memory state ended."),
	}
}

func (c *hostCollector) attach(s actor.StatsSource) {
	name := s.Name()
	c.mu.Lock()
	c.hosts[name] = s
	c.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (c *hostCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.ownersActive, c.laneDepth, c.permitsInUse, c.permitWaiters, c.permitsMax,
		c.requestsInFlight, c.requestsFailed, c.decodes, c.fullCopies, c.fullCopyBytes, c.views,
		c.heldOutOfOrder, c.waitingToRoute, c.skipsLost, c.gapsClosed, c.late, c.oldestGap, c.overBound, c.pressureWaits, c.peerWaits, c.peerRefused, c.linkRefused, c.dropped, c.droppedOnClose, c.bounced, c.relocations, c.captured, c.relayed, c.forwarded,
		c.stateWrites, c.stateFlushes, c.stateFenced, c.stateErrors, c.outputsHeld, c.outputsDropped,
		c.suspicions, c.suspectsDead, c.jeopardy, c.jeopardies, c.jeopardyTime, c.rejoins, c.lostOnRejoin, c.sentAgain, c.repeats, c.leaseLapses, c.ownershipChecks, c.takenOver, c.stateDropped,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *hostCollector) Collect(ch chan<- prometheus.Metric) {
	// Stats is called outside mu: it is the host's code, and a slow host
	// must not hold up Attach.
	type attached struct {
		name string
		src  actor.StatsSource
	}
	c.mu.Lock()
	all := make([]attached, 0, len(c.hosts))
	for name, s := range c.hosts {
		all = append(all, attached{name, s})
	}
	c.mu.Unlock()

	for _, a := range all {
		host := a.name
		st := a.src.Stats()
		gauge := func(d *prometheus.Desc, v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{host}, labels...)...)
		}
		counter := func(d *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), host)
		}
		gauge(c.ownersActive, float64(st.OwnersActive))
		gauge(c.laneDepth, float64(st.QueuedApplication), mailbox.Application.String())
		gauge(c.laneDepth, float64(st.QueuedLifecycle), mailbox.Lifecycle.String())
		gauge(c.permitsInUse, float64(st.PermitsInUse))
		gauge(c.permitWaiters, float64(st.PermitWaiters))
		gauge(c.permitsMax, float64(st.PermitsMax))
		gauge(c.requestsInFlight, float64(st.RequestsInFlight))
		counter(c.requestsFailed, uint64(st.RequestsFailedWithPeer))
		counter(c.decodes, st.Payload.Decodes)
		counter(c.fullCopies, st.Payload.FullCopies)
		counter(c.fullCopyBytes, st.Payload.FullCopyBytes)
		counter(c.views, st.Payload.Views)
		gauge(c.heldOutOfOrder, float64(st.HeldOutOfOrder))
		gauge(c.waitingToRoute, float64(st.WaitingToRoute))
		counter(c.skipsLost, uint64(st.SkipsLost))
		counter(c.gapsClosed, uint64(st.GapsClosed))
		counter(c.late, uint64(st.Late))
		gauge(c.oldestGap, st.OldestGap.Seconds())
		counter(c.overBound, uint64(st.OverBound))
		counter(c.pressureWaits, uint64(st.PressureWaits))
		counter(c.peerWaits, uint64(st.PeerWaits))
		counter(c.peerRefused, uint64(st.PeerRefused))
		counter(c.linkRefused, uint64(st.LinkRefused))
		counter(c.dropped, uint64(st.Dropped))
		counter(c.droppedOnClose, uint64(st.DroppedOnClose))
		counter(c.bounced, uint64(st.Bounced))
		counter(c.relocations, uint64(st.Relocations))
		counter(c.captured, uint64(st.Captured))
		counter(c.relayed, uint64(st.Relayed))
		counter(c.forwarded, uint64(st.Forwarded))
		counter(c.stateWrites, uint64(st.StateWrites))
		counter(c.stateFlushes, uint64(st.StateFlushes))
		counter(c.stateFenced, uint64(st.StateFenced))
		counter(c.stateErrors, uint64(st.StateWriteErrors))
		gauge(c.outputsHeld, float64(st.OutputsHeld))
		counter(c.outputsDropped, uint64(st.OutputsDropped))
		counter(c.suspicions, uint64(st.Suspicions))
		counter(c.suspectsDead, uint64(st.SuspectsConfirmed))
		jeo := 0.0
		if st.Jeopardy {
			jeo = 1
		}
		gauge(c.jeopardy, jeo)
		counter(c.jeopardies, uint64(st.Jeopardies))
		ch <- prometheus.MustNewConstMetric(c.jeopardyTime, prometheus.CounterValue, st.JeopardyTime.Seconds(), host)
		counter(c.rejoins, uint64(st.Rejoins))
		counter(c.lostOnRejoin, uint64(st.LostOnRejoin))
		counter(c.sentAgain, uint64(st.SentAgain))
		counter(c.repeats, uint64(st.Repeats))
		counter(c.leaseLapses, uint64(st.LeaseLapses))
		counter(c.ownershipChecks, uint64(st.OwnershipChecks))
		counter(c.takenOver, uint64(st.TakenOver))
		counter(c.stateDropped, uint64(st.DrainStateDropped))
	}
}
