package metrics

// Built against github.com/prometheus/client_golang v1.25.0, the newest v1
// release when this package was written. The module already had v1.17.0
// indirectly (protoactor-go's OpenTelemetry Prometheus exporter); v1.25.0
// is API-compatible with it and that exporter still builds, so the module
// takes the newer release rather than pinning the old one.

import (
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/mailbox"
)

const namespace = "berth"

// durationBuckets are the upper bounds, in seconds, of the handler-duration
// and queue-wait histograms: 10 µs to 10 s, which covers in-memory handlers
// as well as ones that do I/O.
var durationBuckets = []float64{
	.00001, .00005, .0001, .0005, .001, .005, .01, .05, .1, .5, 1, 5, 10,
}

// notGatherer is ServeHTTP's response when the Registerer is write-only.
const notGatherer = "metrics: the prometheus.Registerer given to metrics.New is not a prometheus.Gatherer; " +
	"serve the registry behind it with promhttp.HandlerFor instead"

// Metrics is the Prometheus adapter for berth's observer hooks: an
// actor.Observer that counts a host's events and reads its gauges at
// scrape time, and an http.Handler that serves the registry (see the
// package doc for the series). It is safe for concurrent use; one Metrics
// may observe several hosts.
type Metrics struct {
	admittedVec    *prometheus.CounterVec
	rejectedVec    *prometheus.CounterVec
	handledVec     *prometheus.CounterVec
	runVec         *prometheus.HistogramVec
	waitVec        *prometheus.HistogramVec
	bytesVec       *prometheus.CounterVec
	activatedVec   *prometheus.CounterVec
	deactivatedVec *prometheus.CounterVec
	admitted       cache[labelPair, admittedSeries]
	rejected       cache[labelPair, prometheus.Counter]
	handled        cache[labelPair, handledSeries]
	activated      cache[string, prometheus.Counter]
	deactivated    cache[string, prometheus.Counter]
	renewVec       *prometheus.HistogramVec // lease renewals' call time, by lease
	renewFailVec   *prometheus.CounterVec   // lease renewals that failed, by lease
	hosts          *hostCollector
	handler        http.Handler
	turns          atomic.Int64 // Handled calls, all kinds (Turns)
}

var (
	_ actor.Observer      = (*Metrics)(nil)
	_ actor.LeaseObserver = (*Metrics)(nil)
	_ http.Handler        = (*Metrics)(nil)
)

// labelPair keys the caches of the series labelled by kind and one more
// label (lane, reason or outcome).
type labelPair struct{ kind, other string }

// admittedSeries are the children one Admitted call updates.
type admittedSeries struct {
	messages prometheus.Counter // by kind and lane
	bytes    prometheus.Counter // by kind
}

// handledSeries are the children one Handled call updates.
type handledSeries struct {
	turns prometheus.Counter  // by kind and outcome
	run   prometheus.Observer // by kind
	wait  prometheus.Observer // by kind
}

// New returns a Metrics whose series are registered with reg; it never
// uses the global registry. Histograms have buckets from 10 µs to 10 s.
//
// If reg is also a prometheus.Gatherer (as *prometheus.Registry is),
// ServeHTTP serves everything reg gathers, berth's series and any others,
// with promhttp.HandlerFor. Otherwise (for example a Registerer wrapped by
// prometheus.WrapRegistererWith) ServeHTTP responds 500 and says so, and
// the caller serves the underlying registry itself.
//
// New panics if reg is nil or refuses a registration, as it does when it
// already holds berth's series: use one Metrics per registry, for all the
// hosts that report to it.
func New(reg prometheus.Registerer) *Metrics {
	if reg == nil {
		panic("metrics: New with a nil prometheus.Registerer")
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
	}
	histogram := func(name, help string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: name, Help: help, Buckets: durationBuckets,
		}, []string{"kind"})
	}
	m := &Metrics{
		admittedVec: counter("messages_admitted_total",
			"Messages that entered an owner's lane.", "kind", "lane"),
		rejectedVec: counter("messages_rejected_total",
			"Messages that were not admitted or did not run, by reason.", "kind", "reason"),
		handledVec: counter("messages_handled_total",
			"Turns that ended, by outcome (ok, error, panic).", "kind", "outcome"),
		runVec: histogram("handler_duration_seconds",
			"Time a turn ran: decode and handler."),
		waitVec: histogram("queue_wait_seconds",
			"Time a message waited in its lane before its turn."),
		bytesVec: counter("payload_admitted_bytes_total",
			"Encoded payload bytes of admitted messages.", "kind"),
		activatedVec: counter("activations_total",
			"Owners (objects and channel subscribers) that came.", "kind"),
		deactivatedVec: counter("deactivations_total",
			"Owners (objects and channel subscribers) that went.", "kind"),
		renewVec: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "lease_renewal_seconds",
			Help: "Time a lease renewal's call took, answered or failed, by lease (store: the Location Store's host lease; membership: the run's lease).",
			// 1 ms to 32 s: a renewal on a database that answers in
			// seconds is a stall to see, not an outlier to cut off.
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"lease"}),
		renewFailVec: counter("lease_renewal_failures_total",
			"Lease renewals whose call failed (the store did not answer, or with an error), by lease.", "lease"),
		hosts: newHostCollector(),
	}
	m.admitted.create = func(k labelPair) admittedSeries {
		return admittedSeries{
			messages: m.admittedVec.WithLabelValues(k.kind, k.other),
			bytes:    m.bytesVec.WithLabelValues(k.kind),
		}
	}
	m.rejected.create = func(k labelPair) prometheus.Counter {
		return m.rejectedVec.WithLabelValues(k.kind, k.other)
	}
	m.handled.create = func(k labelPair) handledSeries {
		return handledSeries{
			turns: m.handledVec.WithLabelValues(k.kind, k.other),
			run:   m.runVec.WithLabelValues(k.kind),
			wait:  m.waitVec.WithLabelValues(k.kind),
		}
	}
	m.activated.create = func(kind string) prometheus.Counter { return m.activatedVec.WithLabelValues(kind) }
	m.deactivated.create = func(kind string) prometheus.Counter { return m.deactivatedVec.WithLabelValues(kind) }

	reg.MustRegister(m.admittedVec, m.rejectedVec, m.handledVec, m.runVec, m.waitVec,
		m.bytesVec, m.activatedVec, m.deactivatedVec, m.renewVec, m.renewFailVec, m.hosts)
	for _, lease := range []string{actor.LeaseStore, actor.LeaseMembership} {
		m.renewFailVec.WithLabelValues(lease) // served at 0 before the first failure: a rate sees it from the start
	}

	if g, ok := reg.(prometheus.Gatherer); ok {
		m.handler = promhttp.HandlerFor(g, promhttp.HandlerOpts{})
	} else {
		m.handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, notGatherer, http.StatusInternalServerError)
		})
	}
	return m
}

// ServeHTTP serves the registry given to New in the Prometheus exposition
// formats, or responds 500 if that Registerer is not a Gatherer (see New).
func (m *Metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.handler.ServeHTTP(w, r)
}

var _ actor.MetricsServer = (*Metrics)(nil)

// ServeMetrics serves m at /metrics on addr until stop is called (the
// actor.MetricsServer a host uses for Config.MetricsAddr). It returns the
// bound address — with the port chosen when addr asks for port 0. stop
// closes the listener and open connections and returns once the server's
// goroutine has ended.
func (m *Metrics) ServeMetrics(addr string) (bound string, stop func() error, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // returns http.ErrServerClosed after stop
	}()
	return ln.Addr().String(), func() error {
		err := srv.Close()
		<-done
		return err
	}, nil
}

// Attach adds host's gauges to the scrape-time series, labelled
// host=host.Name(); a host attached earlier under the same name is
// replaced. The host calls it when it starts. It panics if host is nil.
func (m *Metrics) Attach(host actor.StatsSource) {
	if host == nil {
		panic("metrics: Attach with a nil actor.StatsSource")
	}
	m.hosts.attach(host)
}

// Admitted counts a message that entered kind's lane, and its payload
// bytes.
func (m *Metrics) Admitted(kind string, lane mailbox.Lane, payloadBytes int) {
	s := m.admitted.get(labelPair{kind, lane.String()})
	s.messages.Inc()
	s.bytes.Add(float64(payloadBytes))
}

// Rejected counts a message for kind that was not admitted or did not run;
// reason is one of the actor.Reject* constants.
func (m *Metrics) Rejected(kind string, reason string) {
	m.rejected.get(labelPair{kind, reason}).Inc()
}

// Handled counts a turn of kind that ended with outcome and records how
// long it waited in the lane and how long it ran.
func (m *Metrics) Handled(kind string, queueWait, run time.Duration, outcome actor.Outcome) {
	s := m.handled.get(labelPair{kind, outcome.String()})
	s.turns.Inc()
	m.turns.Add(1)
	s.wait.Observe(queueWait.Seconds())
	s.run.Observe(run.Seconds())
}

// Turns returns how many turns Handled has counted, all kinds and
// outcomes together: a count that only grows, for a rate (the admin
// dashboard's messages a second).
func (m *Metrics) Turns() int64 { return m.turns.Load() }

// Activated counts an owner of kind that came.
func (m *Metrics) Activated(kind string) { m.activated.get(kind).Inc() }

// Deactivated counts an owner of kind that went.
func (m *Metrics) Deactivated(kind string) { m.deactivated.get(kind).Inc() }

// LeaseRenewed observes how long a renewal of lease took, and counts it
// if it failed (actor.LeaseObserver).
func (m *Metrics) LeaseRenewed(lease string, took time.Duration, err error) {
	m.renewVec.WithLabelValues(lease).Observe(took.Seconds())
	if err != nil {
		m.renewFailVec.WithLabelValues(lease).Inc()
	}
}
