// Package pgmetrics exports a pgbridge.Broker's events to Prometheus.
//
// A *Metrics is a pgbridge.Observer: pass it as pgbridge.Config.Observer and
// the broker reports every claim, settlement, decode failure, lost lease,
// rolled-back claim and notification wake-up to it.
//
//	reg := prometheus.NewRegistry()
//	hm := metrics.New(reg)   // the actor host's series; serves reg at /metrics
//	pm := pgmetrics.New(reg) // the bridge's series, on the same registry
//	h, err := actor.NewHost(actor.Config{Observer: hm, MetricsAddr: ":9090"})
//	b, err := pgbridge.New(pgbridge.Config{Pool: pool, Observer: pm})
//
// It is a package of its own, not part of package metrics, because the
// Observer's methods name pgbridge types: in package metrics they would make
// every program that observes actor hosts link the Postgres driver. Importing
// pgbridge adds 35 packages (pgx, its pool, database/sql, golang.org/x/text
// …), about 1.4 MB of binary, and pgbridge's initialization at start (its
// pgtype map: some 150 KB in 300 allocations). Both packages follow the same
// conventions — registration only on the Registerer given to New, the
// "berth" namespace, cached children — and one registry holds both; a
// metrics.Metrics on that registry serves these series too.
//
// # Series
//
// Event series, counted as the broker reports them (namespace "berth",
// subsystem "pgbridge"):
//
//	berth_pgbridge_claimed_rows_total{subscription}              rows claimed
//	berth_pgbridge_settled_rows_total{subscription,outcome}      rows settled: ack, retry, drop or dead_letter
//	berth_pgbridge_claim_to_settle_seconds{subscription}         histogram of the time from a row's claim to its settlement
//	berth_pgbridge_decode_failures_total{subscription}           rows whose payload did not decode (settled by the decode policy)
//	berth_pgbridge_lease_lost_total{subscription}                lease-form rows whose lease was taken over before they settled
//	berth_pgbridge_rollbacks_total{subscription}                 row-lock claims rolled back (their rows are claimed again)
//	berth_pgbridge_rolled_back_rows_total{subscription}          rows of those claims
//	berth_pgbridge_claim_errors_total{subscription}              claims that failed (nothing claimed)
//	berth_pgbridge_notify_wakeups_total{channel}                 notifications that woke the subscriptions of a channel
//
// Gauges of the backlog — each subscription's claimable rows and how long
// the next one has been ready — are asked of the database at each scrape by
// a BacklogCollector (NewBacklogCollector), registered per broker.
//
// subscription is pgbridge.Subscription.Name; outcome is
// pgbridge.OutcomeKind.String(); channel is the table's pg_notify channel
// ("berth_inbox_" and the table name).
//
// A row that is claimed but does not settle — its claim rolled back, its
// lease lost, its broker closed hard — counts in claimed_rows_total and not
// in settled_rows_total; it is counted again when it is claimed again.
//
// # Invariants
//
//   - Nothing is registered anywhere but the prometheus.Registerer given to
//     New; the global registry is never touched.
//   - The first event of a subscription creates all of its series (every
//     outcome included) at zero, so rates and ratios have both sides from
//     the start. Later events do not allocate: each subscription's and
//     channel's children are looked up once and cached for the life of the
//     Metrics. Subscriptions and channels are fixed by the program, so the
//     cache and the registry stay small.
//   - Series have no broker label: brokers sharing one Metrics are summed
//     per subscription name.
//   - A *Metrics is safe for concurrent use. Use New; the zero Metrics is
//     not usable.
package pgmetrics

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/berthrt/berth/pgbridge"
)

const (
	namespace = "berth"
	subsystem = "pgbridge"
)

// latencyBuckets are the upper bounds, in seconds, of the claim-to-settle
// histogram: 100 µs (a row-lock batch on a local server) to 60 s (a lease-
// form handler that ran for its whole default lease, and then some).
var latencyBuckets = []float64{
	.0001, .0005, .001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60,
}

// outcomes are the settlement outcomes, indexed by pgbridge.OutcomeKind.
var outcomes = [...]pgbridge.OutcomeKind{pgbridge.KindAck, pgbridge.KindRetry, pgbridge.KindDrop, pgbridge.KindDeadLetter}

// Metrics is the Prometheus adapter for a pgbridge.Broker's observer hooks
// (see the package doc for the series). It is safe for concurrent use; one
// Metrics may observe several brokers.
type Metrics struct {
	claimedVec    *prometheus.CounterVec
	settledVec    *prometheus.CounterVec
	latencyVec    *prometheus.HistogramVec
	decodeVec     *prometheus.CounterVec
	leaseLostVec  *prometheus.CounterVec
	rollbacksVec  *prometheus.CounterVec
	rolledRowsVec *prometheus.CounterVec
	claimErrVec   *prometheus.CounterVec
	wakeupsVec    *prometheus.CounterVec
	subs          cache[*subSeries]
	channels      cache[prometheus.Counter]
}

var _ pgbridge.Observer = (*Metrics)(nil)

// subSeries are one subscription's children.
type subSeries struct {
	claimed, decodeFailures, leaseLost, rollbacks, rolledBackRows, claimErrors prometheus.Counter
	settled                                                                    [len(outcomes)]prometheus.Counter
	latency                                                                    prometheus.Observer
}

// New returns a Metrics whose series are registered with reg; it never uses
// the global registry. It panics if reg is nil or refuses a registration,
// as it does when it already holds the bridge's series: use one Metrics per
// registry, for all the brokers that report to it.
func New(reg prometheus.Registerer) *Metrics {
	if reg == nil {
		panic("pgmetrics: New with a nil prometheus.Registerer")
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: name, Help: help,
		}, labels)
	}
	m := &Metrics{
		claimedVec: counter("claimed_rows_total",
			"Rows claimed by a subscription.", "subscription"),
		settledVec: counter("settled_rows_total",
			"Rows settled, by outcome (ack, retry, drop, dead_letter).", "subscription", "outcome"),
		latencyVec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "claim_to_settle_seconds",
			Help:    "Time from a row's claim to its settlement: the handler's run and the settlement.",
			Buckets: latencyBuckets,
		}, []string{"subscription"}),
		decodeVec: counter("decode_failures_total",
			"Rows whose payload did not decode, settled by the decode policy.", "subscription"),
		leaseLostVec: counter("lease_lost_total",
			"Lease-form rows whose lease was taken over before they settled.", "subscription"),
		rollbacksVec: counter("rollbacks_total",
			"Row-lock claims rolled back; their rows are claimed again.", "subscription"),
		rolledRowsVec: counter("rolled_back_rows_total",
			"Rows of the row-lock claims that rolled back.", "subscription"),
		claimErrVec: counter("claim_errors_total",
			"Claims of a subscription that failed (nothing claimed; it claims again after its poll interval).", "subscription"),
		wakeupsVec: counter("notify_wakeups_total",
			"Notifications that woke the subscriptions of a channel.", "channel"),
	}
	m.subs.create = func(sub string) *subSeries {
		s := &subSeries{
			claimed:        m.claimedVec.WithLabelValues(sub),
			decodeFailures: m.decodeVec.WithLabelValues(sub),
			leaseLost:      m.leaseLostVec.WithLabelValues(sub),
			rollbacks:      m.rollbacksVec.WithLabelValues(sub),
			rolledBackRows: m.rolledRowsVec.WithLabelValues(sub),
			claimErrors:    m.claimErrVec.WithLabelValues(sub),
			latency:        m.latencyVec.WithLabelValues(sub),
		}
		for i, k := range outcomes {
			s.settled[i] = m.settledVec.WithLabelValues(sub, k.String())
		}
		return s
	}
	m.channels.create = func(ch string) prometheus.Counter { return m.wakeupsVec.WithLabelValues(ch) }

	reg.MustRegister(m.claimedVec, m.settledVec, m.latencyVec, m.decodeVec, m.leaseLostVec,
		m.rollbacksVec, m.rolledRowsVec, m.claimErrVec, m.wakeupsVec)
	return m
}

// Claimed counts n rows claimed by subscription sub.
func (m *Metrics) Claimed(sub string, n int) { m.subs.get(sub).claimed.Add(float64(n)) }

// Settled counts a row of sub settled with outcome and records the time
// from its claim.
func (m *Metrics) Settled(sub string, outcome pgbridge.OutcomeKind, d time.Duration) {
	s := m.subs.get(sub)
	if int(outcome) < len(s.settled) {
		s.settled[outcome].Inc()
	} else { // a kind newer than this package: not cached
		m.settledVec.WithLabelValues(sub, outcome.String()).Inc()
	}
	s.latency.Observe(d.Seconds())
}

// DecodeFailed counts a row of sub whose payload did not decode.
func (m *Metrics) DecodeFailed(sub string) { m.subs.get(sub).decodeFailures.Inc() }

// LeaseLost counts a lease-form row of sub whose lease was taken over.
func (m *Metrics) LeaseLost(sub string) { m.subs.get(sub).leaseLost.Inc() }

// RolledBack counts a row-lock claim of n rows of sub that rolled back.
func (m *Metrics) RolledBack(sub string, n int) {
	s := m.subs.get(sub)
	s.rollbacks.Inc()
	s.rolledBackRows.Add(float64(n))
}

// ClaimFailed counts a failed claim of sub.
func (m *Metrics) ClaimFailed(sub string, _ error) { m.subs.get(sub).claimErrors.Inc() }

// Woken counts a notification on channel that woke its subscriptions.
func (m *Metrics) Woken(channel string) { m.channels.get(channel).Inc() }

// cache maps a label value to the children it selects, so that the event
// methods do not call WithLabelValues per row (package metrics has the same
// copy-on-write cache, which is unexported). Readers load an immutable map
// through an atomic pointer, taking no lock; a miss copies the map under
// mu, once per subscription or channel.
type cache[V any] struct {
	m      atomic.Pointer[map[string]V] // never modified once stored
	mu     sync.Mutex                   // serializes misses
	create func(string) V               // makes the children of a new key; set by New
}

// get returns the children of k, creating them on first use.
func (c *cache[V]) get(k string) V {
	if p := c.m.Load(); p != nil {
		if v, ok := (*p)[k]; ok {
			return v
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var old map[string]V
	if p := c.m.Load(); p != nil {
		old = *p
		if v, ok := old[k]; ok {
			return v // another goroutine created it while we waited
		}
	}
	next := make(map[string]V, len(old)+1)
	maps.Copy(next, old)
	v := c.create(k)
	next[k] = v
	c.m.Store(&next)
	return v
}
