// Package metrics exports a berth host's events and gauges to Prometheus.
//
// A *Metrics is an actor.Observer: pass it as actor.Config.Observer and the
// host reports every admitted, rejected and handled message to it, and
// attaches itself as the source of its gauges when it starts. A *Metrics is
// also an http.Handler serving the registry it was built on, so setting
// actor.Config.MetricsAddr as well serves /metrics while the host runs.
//
//	reg := prometheus.NewRegistry()
//	m := metrics.New(reg)
//	h, err := actor.NewHost(actor.Config{Observer: m, MetricsAddr: ":9090"})
//
// # Series
//
// Event series, counted as the host reports them (namespace "berth"):
//
//	berth_messages_admitted_total{kind,lane}       messages that entered an owner's lane
//	berth_messages_rejected_total{kind,reason}     messages not admitted or not run (actor.Reject*)
//	berth_messages_handled_total{kind,outcome}     turns ended: ok, error or panic
//	berth_handler_duration_seconds{kind}           histogram of handler run time
//	berth_queue_wait_seconds{kind}                 histogram of time queued before the turn
//	berth_payload_admitted_bytes_total{kind}       encoded payload bytes admitted
//	berth_activations_total{kind}                  owners that came
//	berth_deactivations_total{kind}                owners that went
//
// Scrape-time series, read from each attached host's actor.Stats when the
// registry is gathered, labelled host=StatsSource.Name():
//
//	berth_owners_active{host}                      owners on the host
//	berth_lane_depth{host,lane}                    items queued in owners' lanes
//	berth_permits_in_use{host}                     host-wide job permits in use
//	berth_permit_waiters{host}                     senders waiting for a permit
//	berth_permits_max{host}                        job permits in all
//	berth_requests_in_flight{host}                 requests waiting for replies
//	berth_requests_failed_with_peer_total{host}    requests ended at once: the host they were handed to failed
//	berth_payload_decodes_total{host}              codec decodes
//	berth_payload_full_copies_total{host}          whole-buffer copies
//	berth_payload_full_copy_bytes_total{host}      bytes those copies copied
//	berth_payload_views_total{host}                zero-copy views handed out
//	berth_held_out_of_order{host}                  messages held for an older one of their sending host
//	berth_waiting_to_route{host}                   messages waiting to be routed again (the store did not answer their look-up)
//	berth_order_skips_lost_total{host}             skip notices that could not reach their object
//	berth_order_gaps_closed_total{host}            sequence numbers given up on after a host failure
//	berth_order_late_messages_total{host}          messages run after their gap was given up on
//	berth_order_repeats_dropped_total{host}        messages whose stamp had run here (sent again by a sender's new run, or replayed): dropped
//	berth_order_oldest_gap_seconds{host}           how long the oldest gap has waited
//	berth_order_over_bound_total{host}             arrivals past an object's reorder bound
//	berth_order_pressure_waits_total{host}         outside sends that waited for a reorder buffer
//	berth_peer_credit_waits_total{host}            outside sends that waited for credit at the object's host
//	berth_peer_refused_messages_total{host}        peers' messages refused past Config.PeerInbound
//	berth_link_refused_items_total{host}           items not sent: their link was past its bound
//	berth_dropped_messages_total{host}             messages the host could not deliver
//	berth_dropped_on_close_total{host}             accepted messages the host's Close ended unrun
//	berth_bounced_messages_total{host}             messages sent back to their origin to be routed afresh
//	berth_relocations_total{host}                  moves completed with the host as source or target
//	berth_relocation_captured_messages_total{host} queued messages moved in move records from the host
//	berth_relocation_relayed_messages_total{host}  messages relayed from the host after relay-ready
//	berth_forwarded_messages_total{host}           messages handed on to where their object runs
//	berth_state_writes_total{host}                 persistent objects' state writes that landed
//	berth_state_flushes_total{host}                state store calls (each writes every state queued)
//	berth_state_fenced_total{host}                 state writes fenced: the object had a newer owner
//	berth_state_write_errors_total{host}           state store calls that failed and were retried
//	berth_outputs_held{host}                       persistent objects' outputs waiting for their write
//	berth_outputs_dropped_total{host}              such outputs ended as failures (fenced, capture failed)
//	berth_peer_suspicions_total{host}              broken links that made the host check the peer's lease
//	berth_peer_suspicions_confirmed_total{host}    of those, peers whose run the check found ended
//	berth_lease_jeopardy{host}                     1 while the host is in jeopardy (its objects paused)
//	berth_lease_jeopardies_total{host}             times the host went into jeopardy
//	berth_lease_jeopardy_seconds_total{host}       time the host spent in jeopardy, the current spell included
//	berth_lease_renewal_seconds{lease}             histogram: a lease renewal's call time (lease: store or membership)
//	berth_lease_renewal_failures_total{lease}      lease renewals whose call failed
//	berth_rejoins_total{host}                      times the host joined again as a new run after the membership ended its run
//	berth_lost_on_rejoin_total{host}               what the old run's links had not delivered then and was not sent again: lost
//	berth_sent_again_total{host}                   messages the old run's links had not seen taken, sent again by the new run
//	berth_lease_lapses_total{host}                 renewals that found the host's lease lapsed in the store
//	berth_lease_ownership_checks_total{host}       checks of the host's objects' ownership after a lapse
//	berth_objects_taken_over_total{host}           objects a check found no longer this run's, dropped here
//	berth_drain_state_dropped_total{host}          objects whose state moves that a drain deactivated: no host took them (their state ended)
//
// A pgbridge.Broker's series (berth_pgbridge_…: claimed and settled rows,
// claim-to-settle latency, decode failures, lost leases, rollbacks, notify
// wake-ups) come from package pgbridge/pgmetrics, whose package doc lists
// them; it is apart so that this package does not link the Postgres driver.
// Register it on the same registry and a Metrics serves them too.
//
// Label values are the host's own strings: kind is the object kind or
// channel name, lane is mailbox.Lane.String(), outcome is
// actor.Outcome.String(), reason is one of the actor.Reject* constants.
//
// # Invariants
//
//   - Nothing is registered anywhere but the prometheus.Registerer given to
//     New; the global registry is never touched.
//   - The event methods (Admitted, Rejected, Handled, Activated,
//     Deactivated) do not allocate once a label combination has been seen:
//     each combination's child metrics are looked up once and cached for the
//     life of the Metrics. The cache, like the registry, grows with the
//     number of distinct combinations; kinds and channels are fixed at
//     registration, but a "not_found" rejection carries the kind name the
//     sender asked for.
//   - Event series have no host label, because the Observer events do not
//     say which host they come from: when several hosts share one Metrics,
//     their events are summed. Scrape-time series are per host.
//   - Before any host is attached the scrape-time series are absent. A host
//     stays attached after it stops (reporting its final values) until a
//     host of the same name attaches and replaces it.
//   - A *Metrics is safe for concurrent use. Use New; the zero Metrics is
//     not usable.
package metrics
