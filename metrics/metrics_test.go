package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/mailbox"
	"github.com/berthrt/berth/metrics"
	"github.com/berthrt/berth/payload"
)

// fakeHost is a StatsSource whose stats the test sets.
type fakeHost struct {
	name string
	mu   sync.Mutex
	st   actor.Stats // guarded by mu
}

func (f *fakeHost) Name() string { return f.name }

func (f *fakeHost) Stats() actor.Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st
}

func (f *fakeHost) set(st actor.Stats) {
	f.mu.Lock()
	f.st = st
	f.mu.Unlock()
}

// hostSeries are the names of the scrape-time series.
var hostSeries = []string{
	"berth_owners_active",
	"berth_lane_depth",
	"berth_permits_in_use",
	"berth_permit_waiters",
	"berth_permits_max",
	"berth_requests_in_flight",
	"berth_requests_failed_with_peer_total",
	"berth_payload_decodes_total",
	"berth_payload_full_copies_total",
	"berth_payload_full_copy_bytes_total",
	"berth_payload_views_total",
	"berth_held_out_of_order",
	"berth_waiting_to_route",
	"berth_rejoins_total",
	"berth_lost_on_rejoin_total",
	"berth_sent_again_total",
	"berth_order_repeats_dropped_total",
	"berth_order_skips_lost_total",
	"berth_order_gaps_closed_total",
	"berth_order_late_messages_total",
	"berth_order_oldest_gap_seconds",
	"berth_order_over_bound_total",
	"berth_order_pressure_waits_total",
	"berth_peer_credit_waits_total",
	"berth_peer_refused_messages_total",
	"berth_link_refused_items_total",
	"berth_dropped_messages_total",
	"berth_dropped_on_close_total",
	"berth_bounced_messages_total",
	"berth_relocations_total",
	"berth_relocation_captured_messages_total",
	"berth_relocation_relayed_messages_total",
	"berth_forwarded_messages_total",
	"berth_state_writes_total",
	"berth_state_flushes_total",
	"berth_state_fenced_total",
	"berth_state_write_errors_total",
	"berth_outputs_held",
	"berth_outputs_dropped_total",
	"berth_peer_suspicions_total",
	"berth_peer_suspicions_confirmed_total",
	"berth_lease_jeopardy",
	"berth_lease_jeopardies_total",
	"berth_lease_jeopardy_seconds_total",
	"berth_lease_lapses_total",
	"berth_lease_ownership_checks_total",
	"berth_objects_taken_over_total",
	"berth_drain_state_dropped_total",
}

// eventSeries are the names of the series the Observer methods update.
var eventSeries = []string{
	"berth_messages_admitted_total",
	"berth_messages_rejected_total",
	"berth_messages_handled_total",
	"berth_handler_duration_seconds",
	"berth_queue_wait_seconds",
	"berth_payload_admitted_bytes_total",
	"berth_activations_total",
	"berth_deactivations_total",
	"berth_lease_renewal_seconds",
	"berth_lease_renewal_failures_total",
}

func compare(t *testing.T, reg prometheus.Gatherer, want string, names ...string) {
	t.Helper()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
}

// family returns the gathered family called name, or nil.
func family(t *testing.T, reg prometheus.Gatherer, name string) *dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	return nil
}

// labelValues returns the values of label across the metrics of family
// name, sorted.
func labelValues(t *testing.T, reg prometheus.Gatherer, name, label string) []string {
	t.Helper()
	var vs []string
	mf := family(t, reg, name)
	if mf == nil {
		t.Fatalf("no family %s", name)
	}
	for _, m := range mf.GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				vs = append(vs, lp.GetValue())
			}
		}
	}
	slices.Sort(vs)
	return vs
}

func TestEventCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)

	m.Admitted("counter", mailbox.Application, 100)
	m.Admitted("counter", mailbox.Application, 20)
	m.Admitted("counter", mailbox.Lifecycle, 3)
	m.Admitted("news", mailbox.Application, 7)
	m.Rejected("counter", actor.RejectFull)
	m.Rejected("counter", actor.RejectFull)
	m.Rejected("nope", actor.RejectNotFound)
	m.Handled("counter", time.Millisecond, time.Millisecond, actor.OutcomeOK)
	m.Handled("counter", time.Millisecond, time.Millisecond, actor.OutcomeOK)
	m.Handled("counter", time.Millisecond, time.Millisecond, actor.OutcomeError)
	m.Handled("news", time.Millisecond, time.Millisecond, actor.OutcomePanic)
	m.Activated("counter")
	m.Activated("counter")
	m.Deactivated("counter")
	m.LeaseRenewed(actor.LeaseStore, time.Millisecond, nil)
	m.LeaseRenewed(actor.LeaseMembership, time.Second, errors.New("no answer"))
	if got := m.Turns(); got != 4 {
		t.Fatalf("Turns = %d after 4 Handled, want 4", got)
	}

	compare(t, reg, `
# HELP berth_messages_admitted_total Messages that entered an owner's lane.
# TYPE berth_messages_admitted_total counter
berth_messages_admitted_total{kind="counter",lane="application"} 2
berth_messages_admitted_total{kind="counter",lane="lifecycle"} 1
berth_messages_admitted_total{kind="news",lane="application"} 1
# HELP berth_messages_rejected_total Messages that were not admitted or did not run, by reason.
# TYPE berth_messages_rejected_total counter
berth_messages_rejected_total{kind="counter",reason="lane_full"} 2
berth_messages_rejected_total{kind="nope",reason="not_found"} 1
# HELP berth_messages_handled_total Turns that ended, by outcome (ok, error, panic).
# TYPE berth_messages_handled_total counter
berth_messages_handled_total{kind="counter",outcome="error"} 1
berth_messages_handled_total{kind="counter",outcome="ok"} 2
berth_messages_handled_total{kind="news",outcome="panic"} 1
# HELP berth_payload_admitted_bytes_total Encoded payload bytes of admitted messages.
# TYPE berth_payload_admitted_bytes_total counter
berth_payload_admitted_bytes_total{kind="counter"} 123
berth_payload_admitted_bytes_total{kind="news"} 7
# HELP berth_activations_total Owners (objects and channel subscribers) that came.
# TYPE berth_activations_total counter
berth_activations_total{kind="counter"} 2
# HELP berth_deactivations_total Owners (objects and channel subscribers) that went.
# TYPE berth_deactivations_total counter
berth_deactivations_total{kind="counter"} 1
`, "berth_messages_admitted_total", "berth_messages_rejected_total", "berth_messages_handled_total",
		"berth_payload_admitted_bytes_total", "berth_activations_total", "berth_deactivations_total")
}

func TestHistograms(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)

	// Binary fractions of a second, so the sums are exact.
	m.Handled("counter", 250*time.Millisecond, 125*time.Millisecond, actor.OutcomeOK)
	m.Handled("counter", 500*time.Millisecond, 2*time.Second, actor.OutcomeError)
	m.Handled("counter", 0, 20*time.Second, actor.OutcomePanic) // run beyond the last bucket

	check := func(name string, wantSum float64, wantLE map[float64]uint64) {
		t.Helper()
		mf := family(t, reg, name)
		if mf == nil || len(mf.GetMetric()) != 1 {
			t.Fatalf("%s: want one series, got %v", name, mf)
		}
		if mf.GetType() != dto.MetricType_HISTOGRAM {
			t.Fatalf("%s: type %v", name, mf.GetType())
		}
		mt := mf.GetMetric()[0]
		if got := mt.GetLabel(); len(got) != 1 || got[0].GetName() != "kind" || got[0].GetValue() != "counter" {
			t.Fatalf("%s: labels %v", name, got)
		}
		h := mt.GetHistogram()
		if h.GetSampleCount() != 3 || h.GetSampleSum() != wantSum {
			t.Fatalf("%s: count %d sum %v, want 3 and %v", name, h.GetSampleCount(), h.GetSampleSum(), wantSum)
		}
		seen := 0
		for _, b := range h.GetBucket() {
			if want, ok := wantLE[b.GetUpperBound()]; ok {
				seen++
				if b.GetCumulativeCount() != want {
					t.Errorf("%s: le=%v count %d, want %d", name, b.GetUpperBound(), b.GetCumulativeCount(), want)
				}
			}
		}
		if seen != len(wantLE) {
			t.Fatalf("%s: buckets %v lack some of %v", name, h.GetBucket(), wantLE)
		}
	}
	check("berth_queue_wait_seconds", 0.75, map[float64]uint64{0.00001: 1, 0.1: 1, 0.5: 3, 10: 3})
	check("berth_handler_duration_seconds", 22.125, map[float64]uint64{0.1: 0, 0.5: 1, 5: 2, 10: 2})
}

func TestNoHostNoGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics.New(reg)
	n, err := testutil.GatherAndCount(reg, hostSeries...)
	if err != nil || n != 0 {
		t.Fatalf("before Attach: %d host series, err %v; want none", n, err)
	}
}

func TestHostGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	a := &fakeHost{name: "a"}
	a.set(actor.Stats{
		OwnersActive:           3,
		QueuedApplication:      11,
		QueuedLifecycle:        2,
		PermitsInUse:           9,
		PermitWaiters:          4,
		PermitsMax:             1024,
		RequestsInFlight:       5,
		RequestsFailedWithPeer: 27,
		HeldOutOfOrder:         12,
		GapsClosed:             17,
		Late:                   18,
		OldestGap:              2500 * time.Millisecond,
		OverBound:              22,
		PressureWaits:          23,
		PeerWaits:              24,
		PeerRefused:            25,
		LinkRefused:            26,
		Dropped:                19,
		DroppedOnClose:         21,
		Bounced:                20,
		Relocations:            13,
		Captured:               14,
		Relayed:                15,
		Forwarded:              16,
		StateWrites:            30,
		StateFlushes:           31,
		StateFenced:            32,
		StateWriteErrors:       33,
		OutputsHeld:            34,
		OutputsDropped:         35,
		Suspicions:             36,
		SuspectsConfirmed:      37,
		Jeopardy:               true,
		Jeopardies:             38,
		JeopardyTime:           2500 * time.Millisecond,
		LeaseLapses:            39,
		OwnershipChecks:        41,
		TakenOver:              42,
		WaitingToRoute:         43,
		SkipsLost:              44,
		Rejoins:                45,
		LostOnRejoin:           46,
		SentAgain:              47,
		Repeats:                48,
		DrainStateDropped:      46,
		Payload:                payload.Stats{Decodes: 40, FullCopies: 6, FullCopyBytes: 600, Views: 70, Allocated: 1, Buffers: 2},
	})
	m.Attach(a)

	compare(t, reg, `
# HELP berth_owners_active Objects and channel subscribers with an owner on the host.
# TYPE berth_owners_active gauge
berth_owners_active{host="a"} 3
# HELP berth_lane_depth Items queued in the host's owner lanes (held items included).
# TYPE berth_lane_depth gauge
berth_lane_depth{host="a",lane="application"} 11
berth_lane_depth{host="a",lane="lifecycle"} 2
# HELP berth_permits_in_use Host-wide job permits in use.
# TYPE berth_permits_in_use gauge
berth_permits_in_use{host="a"} 9
# HELP berth_permit_waiters Senders waiting for a job permit.
# TYPE berth_permit_waiters gauge
berth_permit_waiters{host="a"} 4
# HELP berth_permits_max Host-wide job permits (MaxQueuedApplicationJobs).
# TYPE berth_permits_max gauge
berth_permits_max{host="a"} 1024
# HELP berth_requests_in_flight Requests waiting for replies.
# TYPE berth_requests_in_flight gauge
berth_requests_in_flight{host="a"} 5
# HELP berth_requests_failed_with_peer_total Requests ended at once because the host their message was handed to was declared failed (they may have run).
# TYPE berth_requests_failed_with_peer_total counter
berth_requests_failed_with_peer_total{host="a"} 27
# HELP berth_payload_decodes_total Codec decodes: each builds a handler's message once.
# TYPE berth_payload_decodes_total counter
berth_payload_decodes_total{host="a"} 40
# HELP berth_payload_full_copies_total Whole-buffer payload copies made by berth.
# TYPE berth_payload_full_copies_total counter
berth_payload_full_copies_total{host="a"} 6
# HELP berth_payload_full_copy_bytes_total Bytes copied by whole-buffer payload copies.
# TYPE berth_payload_full_copy_bytes_total counter
berth_payload_full_copy_bytes_total{host="a"} 600
# HELP berth_payload_views_total Zero-copy views of payload bytes handed out.
# TYPE berth_payload_views_total counter
berth_payload_views_total{host="a"} 70
# HELP berth_rejoins_total Times this host joined again as a new run after the membership ended its run (it was paused or starved past its lease), dropping the old run's objects.
# TYPE berth_rejoins_total counter
berth_rejoins_total{host="a"} 45
# HELP berth_lost_on_rejoin_total Items the old run's links had not delivered when this host joined again as a new run that were not sent again: lost with that run.
# TYPE berth_lost_on_rejoin_total counter
berth_lost_on_rejoin_total{host="a"} 46
# HELP berth_sent_again_total Messages the old run's links had not seen taken when this host joined again, sent again by the new run.
# TYPE berth_sent_again_total counter
berth_sent_again_total{host="a"} 47
# HELP berth_held_out_of_order Messages held because an older message of their sending host has not arrived yet.
# TYPE berth_held_out_of_order gauge
berth_held_out_of_order{host="a"} 12
# HELP berth_order_gaps_closed_total Sequence numbers of a sending host given up on after a host failure (lost with that host).
# TYPE berth_order_gaps_closed_total counter
berth_order_gaps_closed_total{host="a"} 17
# HELP berth_order_late_messages_total Messages run after a gap before them had been given up on.
# TYPE berth_order_late_messages_total counter
berth_order_late_messages_total{host="a"} 18
# HELP berth_order_repeats_dropped_total Messages whose stamp had run here already (sent again by a new run of their sender, or replayed): dropped.
# TYPE berth_order_repeats_dropped_total counter
berth_order_repeats_dropped_total{host="a"} 48
# HELP berth_order_oldest_gap_seconds How long the longest-waiting gap of any object on the host has waited for an older message.
# TYPE berth_order_oldest_gap_seconds gauge
berth_order_oldest_gap_seconds{host="a"} 2.5
# HELP berth_order_over_bound_total Arrivals that found their sending host past an object's reorder bound (it was told to pause).
# TYPE berth_order_over_bound_total counter
berth_order_over_bound_total{host="a"} 22
# HELP berth_order_skips_lost_total Skip notices that could not reach their object (their gaps wait for a failure fact).
# TYPE berth_order_skips_lost_total counter
berth_order_skips_lost_total{host="a"} 44
# HELP berth_order_pressure_waits_total Sends from outside handlers that waited for an object's reorder buffer.
# TYPE berth_order_pressure_waits_total counter
berth_order_pressure_waits_total{host="a"} 23
# HELP berth_peer_credit_waits_total Sends from outside handlers that waited for credit at the object's host (Config.PeerInbound).
# TYPE berth_peer_credit_waits_total counter
berth_peer_credit_waits_total{host="a"} 24
# HELP berth_peer_refused_messages_total Messages from peers refused because the host kept Config.PeerInbound of theirs already.
# TYPE berth_peer_refused_messages_total counter
berth_peer_refused_messages_total{host="a"} 25
# HELP berth_link_refused_items_total Items not sent because the link to their host was past its bound (the host did not take what was sent to it).
# TYPE berth_link_refused_items_total counter
berth_link_refused_items_total{host="a"} 26
# HELP berth_dropped_messages_total Messages the host could not deliver: their senders got an error and a skip notice followed.
# TYPE berth_dropped_messages_total counter
berth_dropped_messages_total{host="a"} 19
# HELP berth_dropped_on_close_total Accepted messages the host's Close ended unrun (queued, held, or waiting for a permit or for a leaving host).
# TYPE berth_dropped_on_close_total counter
berth_dropped_on_close_total{host="a"} 21
# HELP berth_bounced_messages_total Messages sent back to their origin host to be routed afresh.
# TYPE berth_bounced_messages_total counter
berth_bounced_messages_total{host="a"} 20
# HELP berth_relocations_total Moves completed with the host as source or target.
# TYPE berth_relocations_total counter
berth_relocations_total{host="a"} 13
# HELP berth_relocation_captured_messages_total Queued messages moved in move records sent from the host.
# TYPE berth_relocation_captured_messages_total counter
berth_relocation_captured_messages_total{host="a"} 14
# HELP berth_relocation_relayed_messages_total Messages relayed from the host after relay-ready.
# TYPE berth_relocation_relayed_messages_total counter
berth_relocation_relayed_messages_total{host="a"} 15
# HELP berth_forwarded_messages_total Messages the host handed on to where their object runs (Message Follow or a route).
# TYPE berth_forwarded_messages_total counter
berth_forwarded_messages_total{host="a"} 16
# HELP berth_state_writes_total State writes of persistent objects that landed.
# TYPE berth_state_writes_total counter
berth_state_writes_total{host="a"} 30
# HELP berth_waiting_to_route Messages waiting on the host to be routed again: their look-up waits for the Location Store to answer, or a skip notice for a way to its object.
# TYPE berth_waiting_to_route gauge
berth_waiting_to_route{host="a"} 43
# HELP berth_state_flushes_total State store calls made (each flush writes every state queued).
# TYPE berth_state_flushes_total counter
berth_state_flushes_total{host="a"} 31
# HELP berth_state_fenced_total State writes fenced because the object had a newer owner (the activation ended).
# TYPE berth_state_fenced_total counter
berth_state_fenced_total{host="a"} 32
# HELP berth_state_write_errors_total State store calls that failed and were retried (outputs waited).
# TYPE berth_state_write_errors_total counter
berth_state_write_errors_total{host="a"} 33
# HELP berth_outputs_held Outputs of persistent objects waiting for their turn's state write.
# TYPE berth_outputs_held gauge
berth_outputs_held{host="a"} 34
# HELP berth_outputs_dropped_total Outputs and queued messages of persistent objects ended as failures (fenced, capture failed).
# TYPE berth_outputs_dropped_total counter
berth_outputs_dropped_total{host="a"} 35
# HELP berth_peer_suspicions_total Links to a peer that broke and made the host check the peer's lease in the Location Store.
# TYPE berth_peer_suspicions_total counter
berth_peer_suspicions_total{host="a"} 36
# HELP berth_peer_suspicions_confirmed_total Suspected peers whose run the membership ended, found by the host's check before the membership's watch told of it.
# TYPE berth_peer_suspicions_confirmed_total counter
berth_peer_suspicions_confirmed_total{host="a"} 37
# HELP berth_lease_jeopardy 1 while the host is in jeopardy: its lease ran out before a renewal was answered, and its objects run no turn.
# TYPE berth_lease_jeopardy gauge
berth_lease_jeopardy{host="a"} 1
# HELP berth_lease_jeopardies_total Times the host went into jeopardy.
# TYPE berth_lease_jeopardies_total counter
berth_lease_jeopardies_total{host="a"} 38
# HELP berth_lease_jeopardy_seconds_total Time the host spent in jeopardy, its objects paused, the current spell included.
# TYPE berth_lease_jeopardy_seconds_total counter
berth_lease_jeopardy_seconds_total{host="a"} 2.5
# HELP berth_lease_lapses_total Renewals that found the host's lease lapsed in the Location Store.
# TYPE berth_lease_lapses_total counter
berth_lease_lapses_total{host="a"} 39
# HELP berth_lease_ownership_checks_total Times the host checked its objects' ownership before they ran again (after a lapse, or a renewal whose answer was lost).
# TYPE berth_lease_ownership_checks_total counter
berth_lease_ownership_checks_total{host="a"} 41
# HELP berth_objects_taken_over_total Objects another host took over while the host's lease had lapsed, dropped on the host.
# TYPE berth_objects_taken_over_total counter
berth_objects_taken_over_total{host="a"} 42
# HELP berth_drain_state_dropped_total Objects whose state moves that a drain deactivated because every host it tried refused or failed the move: their in-memory state ended.
# TYPE berth_drain_state_dropped_total counter
berth_drain_state_dropped_total{host="a"} 46
`, hostSeries...)

	// The values are read at scrape time, not at Attach.
	a.set(actor.Stats{OwnersActive: 1, QueuedLifecycle: 8, PermitsMax: 1024})
	compare(t, reg, `
# HELP berth_owners_active Objects and channel subscribers with an owner on the host.
# TYPE berth_owners_active gauge
berth_owners_active{host="a"} 1
# HELP berth_lane_depth Items queued in the host's owner lanes (held items included).
# TYPE berth_lane_depth gauge
berth_lane_depth{host="a",lane="application"} 0
berth_lane_depth{host="a",lane="lifecycle"} 8
`, "berth_owners_active", "berth_lane_depth")
}

func TestTwoHosts(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	a, b := &fakeHost{name: "a"}, &fakeHost{name: "b"}
	a.set(actor.Stats{OwnersActive: 1, PermitsMax: 10})
	b.set(actor.Stats{OwnersActive: 2, PermitsMax: 20})
	m.Attach(a)
	m.Attach(b)

	for _, name := range hostSeries {
		if got := labelValues(t, reg, name, "host"); name == "berth_lane_depth" {
			if !slices.Equal(got, []string{"a", "a", "b", "b"}) {
				t.Fatalf("%s: host labels %v", name, got)
			}
		} else if !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("%s: host labels %v", name, got)
		}
	}
	compare(t, reg, `
# HELP berth_owners_active Objects and channel subscribers with an owner on the host.
# TYPE berth_owners_active gauge
berth_owners_active{host="a"} 1
berth_owners_active{host="b"} 2
# HELP berth_permits_max Host-wide job permits (MaxQueuedApplicationJobs).
# TYPE berth_permits_max gauge
berth_permits_max{host="a"} 10
berth_permits_max{host="b"} 20
`, "berth_owners_active", "berth_permits_max")

	// A host of the same name (a restarted host) replaces the old one
	// rather than duplicating the series.
	a2 := &fakeHost{name: "a"}
	a2.set(actor.Stats{OwnersActive: 7})
	m.Attach(a2)
	compare(t, reg, `
# HELP berth_owners_active Objects and channel subscribers with an owner on the host.
# TYPE berth_owners_active gauge
berth_owners_active{host="a"} 7
berth_owners_active{host="b"} 2
`, "berth_owners_active")
}

func TestServeHTTP(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.Attach(&fakeHost{name: "a"})
	m.Admitted("counter", mailbox.Application, 1)
	m.Rejected("counter", actor.RejectExpired)
	m.Handled("counter", time.Millisecond, time.Millisecond, actor.OutcomeOK)
	m.Activated("counter")
	m.Deactivated("counter")
	m.LeaseRenewed(actor.LeaseStore, time.Millisecond, nil)
	m.LeaseRenewed(actor.LeaseMembership, time.Second, errors.New("no answer"))

	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("Content-Type %q", ct)
	}
	body := rec.Body.String()
	for _, name := range append(slices.Clone(eventSeries), hostSeries...) {
		if !strings.Contains(body, "\n# TYPE "+name+" ") {
			t.Errorf("response lacks %s", name)
		}
	}
	if !strings.Contains(body, `berth_messages_admitted_total{kind="counter",lane="application"} 1`) {
		t.Errorf("response lacks the admitted sample:\n%s", body)
	}
}

func TestServeHTTPNotGatherer(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(prometheus.WrapRegistererWith(prometheus.Labels{"zone": "z1"}, reg))
	m.Admitted("counter", mailbox.Application, 1)

	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "not a prometheus.Gatherer") {
		t.Fatalf("status %d, body %q; want 500 saying the Registerer is not a Gatherer", rec.Code, rec.Body)
	}
	// The series still went to the registry behind the wrapper.
	compare(t, reg, `
# HELP berth_messages_admitted_total Messages that entered an owner's lane.
# TYPE berth_messages_admitted_total counter
berth_messages_admitted_total{kind="counter",lane="application",zone="z1"} 1
`, "berth_messages_admitted_total")
}

func TestMisusePanics(t *testing.T) {
	mustPanic := func(what, want string, f func()) {
		t.Helper()
		defer func() {
			t.Helper()
			r := recover()
			if r == nil {
				t.Fatalf("%s did not panic", what)
			}
			if msg := fmt.Sprint(r); !strings.Contains(msg, want) {
				t.Fatalf("%s panicked with %q; want it to mention %q", what, msg, want)
			}
		}()
		f()
	}
	mustPanic("New(nil)", "metrics: New with a nil", func() { metrics.New(nil) })
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	mustPanic("a second New on one registry", "duplicate metrics collector registration", func() { metrics.New(reg) })
	mustPanic("Attach(nil)", "metrics: Attach with a nil", func() { m.Attach(nil) })
}

func TestLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.Attach(&fakeHost{name: "a"})
	m.Admitted("counter", mailbox.Application, 1)
	m.Rejected("counter", actor.RejectFull)
	m.Handled("counter", time.Millisecond, time.Millisecond, actor.OutcomeOK)
	m.Activated("counter")
	m.Deactivated("counter")
	m.LeaseRenewed(actor.LeaseStore, time.Millisecond, nil)
	m.LeaseRenewed(actor.LeaseMembership, time.Second, errors.New("no answer"))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != len(eventSeries)+len(hostSeries) {
		t.Fatalf("gathered %d families, want %d", len(mfs), len(eventSeries)+len(hostSeries))
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil || len(problems) > 0 {
		t.Fatalf("promlint: %v %v", problems, err)
	}
}

// TestEventsDoNotAllocate pins the Observer contract: once a label
// combination has been seen, the event methods cost no allocation.
func TestEventsDoNotAllocate(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	// Label values that are not constants, as the host's are not.
	kind := strings.Repeat("k", 8)
	run := func() {
		m.Admitted(kind, mailbox.Application, 64)
		m.Admitted(kind, mailbox.Lifecycle, 8)
		m.Rejected(kind, actor.RejectFull)
		m.Handled(kind, time.Microsecond, time.Millisecond, actor.OutcomeOK)
		m.Handled(kind, time.Microsecond, time.Millisecond, actor.OutcomePanic)
		m.Activated(kind)
		m.Deactivated(kind)
	}
	run() // warm-up: creates and caches the children
	if n := testing.AllocsPerRun(1000, run); n != 0 {
		t.Fatalf("event methods allocate %v times per round after warm-up; want 0", n)
	}
}

// TestConcurrent runs the event methods, Attach and scrapes at once; under
// -race it checks the cache and the host list, and the totals are exact.
func TestConcurrent(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	const workers, rounds = 8, 500
	kinds := []string{"a", "b", "c", "d"}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				k := kinds[(w+i)%len(kinds)]
				m.Admitted(k, mailbox.Application, 2)
				m.Rejected(k, actor.RejectCancelled)
				m.Handled(k, time.Microsecond, time.Microsecond, actor.OutcomeOK)
			}
		})
	}
	wg.Go(func() {
		for i := range 50 {
			m.Attach(&fakeHost{name: fmt.Sprint("h", i%5)})
			if _, err := reg.Gather(); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()

	var want strings.Builder
	want.WriteString("# HELP berth_messages_handled_total Turns that ended, by outcome (ok, error, panic).\n")
	want.WriteString("# TYPE berth_messages_handled_total counter\n")
	for _, k := range kinds {
		fmt.Fprintf(&want, "berth_messages_handled_total{kind=%q,outcome=\"ok\"} %d\n", k, workers*rounds/len(kinds))
	}
	compare(t, reg, want.String(), "berth_messages_handled_total")
	if got := labelValues(t, reg, "berth_owners_active", "host"); !slices.Equal(got, []string{"h0", "h1", "h2", "h3", "h4"}) {
		t.Fatalf("hosts %v", got)
	}
}

type tally struct{ n int }

type add struct{ By int }

type boom struct{}

// TestHostEndToEnd runs messages through a real host observed by a Metrics
// and scrapes it through ServeHTTP.
func TestHostEndToEnd(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)

	k := actor.NewKind("tally", func(*actor.Context, string) (*tally, error) { return &tally{}, nil })
	actor.Handle(k, func(_ *actor.Context, s *tally, msg add) error { s.n += msg.By; return nil })
	actor.Handle(k, func(*actor.Context, *tally, boom) error { return errors.New("boom") })
	const name = "metrics-e2e"
	h, err := actor.NewHost(actor.Config{Name: name, Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Register(k); err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 10 {
		ref := actor.Ref{Kind: "tally", ID: fmt.Sprint("id", i%2)}
		if err := actor.Tell(ctx, h, ref, add{By: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := actor.Tell(ctx, h, actor.Ref{Kind: "tally", ID: "id0"}, boom{}); err != nil {
		t.Fatal(err)
	}
	if err := actor.Tell(ctx, h, actor.Ref{Kind: "nope", ID: "x"}, add{}); err == nil {
		t.Fatal("Tell to an unknown kind succeeded")
	}

	// While the host runs, its gauges are scraped live.
	if got := labelValues(t, reg, "berth_owners_active", "host"); !slices.Equal(got, []string{name}) {
		t.Fatalf("host labels %v", got)
	}
	if err := h.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	body, _ := io.ReadAll(rec.Body)
	for _, line := range []string{
		`berth_messages_admitted_total{kind="tally",lane="application"} 11`,
		`berth_messages_handled_total{kind="tally",outcome="ok"} 10`,
		`berth_messages_handled_total{kind="tally",outcome="error"} 1`,
		`berth_messages_rejected_total{kind="nope",reason="not_found"} 1`,
		`berth_handler_duration_seconds_count{kind="tally"} 11`,
		`berth_queue_wait_seconds_count{kind="tally"} 11`,
		`berth_activations_total{kind="tally"} 2`,
		`berth_deactivations_total{kind="tally"} 2`,
		`berth_owners_active{host="metrics-e2e"} 0`,
		`berth_lane_depth{host="metrics-e2e",lane="application"} 0`,
		`berth_permits_in_use{host="metrics-e2e"} 0`,
		`berth_payload_decodes_total{host="metrics-e2e"} 11`,
	} {
		if !strings.Contains(string(body), "\n"+line+"\n") {
			t.Errorf("scrape lacks %s", line)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", body)
	}
}

func TestHostServesMetricsOnConfiguredAddress(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	h, err := actor.NewHost(actor.Config{Observer: m, MetricsAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	resp, err := http.Get("http://" + h.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "berth_permits_max") {
		t.Fatalf("GET /metrics = %d:\n%s", resp.StatusCode, body)
	}
}

// TestDocListsEverySeries: go doc ./metrics lists every series the package
// serves, with its labels, and nothing it does not serve.
func TestDocListsEverySeries(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{} // name → "{labels}"
	for _, line := range strings.Split(string(src), "\n") {
		f := strings.Fields(strings.TrimPrefix(line, "//"))
		if len(f) == 0 || !strings.HasPrefix(f[0], "berth_") || strings.HasPrefix(f[0], "berth_pgbridge_") {
			continue
		}
		name, labels, _ := strings.Cut(f[0], "{")
		documented[name] = "{" + labels
	}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.Admitted("k", mailbox.Application, 1)
	m.Rejected("k", actor.RejectFull)
	m.Handled("k", time.Millisecond, time.Millisecond, actor.OutcomeOK)
	m.Activated("k")
	m.Deactivated("k")
	m.LeaseRenewed(actor.LeaseStore, time.Millisecond, nil)
	m.LeaseRenewed(actor.LeaseMembership, time.Second, errors.New("no answer"))
	h := &fakeHost{name: "a"}
	h.set(actor.Stats{})
	m.Attach(h)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, mf := range mfs {
		served[mf.GetName()] = true
		var labels []string
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		got, ok := documented[mf.GetName()]
		if !ok {
			t.Errorf("%s is served but not listed in doc.go", mf.GetName())
			continue
		}
		if want := "{" + strings.Join(labels, ",") + "}"; got != want {
			t.Errorf("%s: doc.go lists labels %s, served with %s", mf.GetName(), got, want)
		}
	}
	for name := range documented {
		if !served[name] {
			t.Errorf("doc.go lists %s, which is not served", name)
		}
	}
}
