package node

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/berthrt/berth/pgstore"
	"github.com/berthrt/berth/transport/tcp"
)

// tcpCollector exports the node's transport/tcp counts (tcp.Stats) at
// each scrape: what its links sent again, dropped and refused; and each
// link's traffic (tcp.Links), by peer.
type tcpCollector struct {
	attacher atomic.Pointer[tcp.Attacher] // the host's, once it started
	name     string
	descs    []tcpSeries
	links    []linkSeries
}

// linkSeries is one count of tcp.LinkStats and its series, by peer.
type linkSeries struct {
	desc          *prometheus.Desc
	kind          prometheus.ValueType
	get           func(tcp.LinkStats) float64
	unknownAtZero bool // 0 means unknown: no sample
}

// tcpSeries is one count of tcp.Stats and its series.
type tcpSeries struct {
	desc *prometheus.Desc
	get  func(tcp.Stats) uint64
}

func newTCPCollector(name string) *tcpCollector {
	d := func(metric, help string, get func(tcp.Stats) uint64) tcpSeries {
		return tcpSeries{prometheus.NewDesc("berth_tcp_"+metric, help, nil, nil), get}
	}
	return &tcpCollector{name: name, descs: []tcpSeries{
		d("resent_items_total", "Items sent on a link again, after a connection ended or a gap.", func(s tcp.Stats) uint64 { return s.Resent }),
		d("duplicate_items_total", "Items received again and dropped.", func(s tcp.Stats) uint64 { return s.Duplicates }),
		d("gap_items_total", "Items that arrived after a missing one and were dropped (they come again).", func(s tcp.Stats) uint64 { return s.Gaps }),
		d("stale_items_total", "Envelopes of another incarnation of a peer, dropped.", func(s tcp.Stats) uint64 { return s.Stale }),
		d("lost_items_total", "Sent items a peer had not taken when it crashed, restarted or was removed.", func(s tcp.Stats) uint64 { return s.Lost }),
		d("dropped_items_total", "Items other than frames a gracefully closed peer had not taken.", func(s tcp.Stats) uint64 { return s.Dropped }),
		d("unknown_connections_total", "Authenticated connections from members that were not peers yet.", func(s tcp.Stats) uint64 { return s.Unknown }),
		d("refused_connections_total", "Connections refused before they carried anything: a failed TLS handshake, a certificate that does not name the member, a bad preamble, or closed in its handshake to make room for a new connection (the door was full).", func(s tcp.Stats) uint64 { return s.Refused }),
		d("malformed_connections_total", "Connections closed for a malformed frame.", func(s tcp.Stats) uint64 { return s.Malformed }),
		d("oversized_items_total", "Items past the transport's item limit that were received (read and dropped).", func(s tcp.Stats) uint64 { return s.Oversized }),
		d("peer_restarts_total", "Times a peer's frames carried a new incarnation of it.", func(s tcp.Stats) uint64 { return s.Restarts }),
		d("backlog_refused_items_total", "Items a send refused because their link held as much of what its peer had not taken as it may.", func(s tcp.Stats) uint64 { return s.Backlog }),
	}, links: newLinkSeries()}
}

func newLinkSeries() []linkSeries {
	l := func(metric, help string, kind prometheus.ValueType, get func(tcp.LinkStats) float64) linkSeries {
		return linkSeries{desc: prometheus.NewDesc("berth_link_"+metric, help, []string{"peer"}, nil), kind: kind, get: get}
	}
	c := prometheus.CounterValue
	rtt := l("rtt_seconds", "The smoothed round-trip time the kernel measures on the connection to the peer (Linux); absent while unknown.",
		prometheus.GaugeValue, func(s tcp.LinkStats) float64 { return s.RTT.Seconds() })
	rtt.unknownAtZero = true
	return []linkSeries{
		l("sent_items_total", "Items sent to the peer (each once, however often it went on the wire).", c, func(s tcp.LinkStats) float64 { return float64(s.SentItems) }),
		l("sent_bytes_total", "Bytes of the items sent to the peer.", c, func(s tcp.LinkStats) float64 { return float64(s.SentBytes) }),
		l("received_items_total", "Items received from the peer and handed to the host.", c, func(s tcp.LinkStats) float64 { return float64(s.ReceivedItems) }),
		l("received_bytes_total", "Bytes of the items received from the peer.", c, func(s tcp.LinkStats) float64 { return float64(s.ReceivedBytes) }),
		l("resent_items_total", "Items sent to the peer again in its current session (after a connection ended, or a gap).", c, func(s tcp.LinkStats) float64 { return float64(s.Resent) }),
		l("backlog_refused_items_total", "Items refused because the link to the peer held as much as it may, in its current session.", c, func(s tcp.LinkStats) float64 { return float64(s.Backlog) }),
		rtt,
		l("up", "1 while the link to the peer is up.", prometheus.GaugeValue, func(s tcp.LinkStats) float64 {
			if s.Up {
				return 1
			}
			return 0
		}),
	}
}

// Describe implements prometheus.Collector.
func (c *tcpCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, s := range c.descs {
		ch <- s.desc
	}
	for _, s := range c.links {
		ch <- s.desc
	}
}

// Collect implements prometheus.Collector: nothing until the host started.
func (c *tcpCollector) Collect(ch chan<- prometheus.Metric) {
	a := c.attacher.Load()
	if a == nil {
		return
	}
	t := a.Transport(c.name)
	if t == nil {
		return
	}
	st := t.Stats()
	for _, s := range c.descs {
		ch <- prometheus.MustNewConstMetric(s.desc, prometheus.CounterValue, float64(s.get(st)))
	}
	for _, l := range t.Links() {
		for _, s := range c.links {
			v := s.get(l)
			if s.unknownAtZero && v == 0 {
				continue // unknown: no sample rather than a 0 s round trip
			}
			ch <- prometheus.MustNewConstMetric(s.desc, s.kind, v, l.Peer)
		}
	}
}

// statementMetrics time the database's statements by pool
// (pgstore.PoolsOptions.OnStatement).
type statementMetrics struct {
	took   *prometheus.HistogramVec
	failed *prometheus.CounterVec
}

func newStatementMetrics() *statementMetrics {
	s := &statementMetrics{
		took: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "berth_store_statement_seconds",
			Help: "Time a statement of the Location Store, the membership or the objects' state took, by pool (work, leases, renewals; a batch counts as one).",
			// 0.25 ms to 16 s: a slow database is a stall to see.
			Buckets: prometheus.ExponentialBuckets(0.00025, 2, 17),
		}, []string{"pool"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berth_store_statement_failures_total",
			Help: "Statements that failed, by pool.",
		}, []string{"pool"}),
	}
	for _, pool := range []string{pgstore.PoolWork, pgstore.PoolLeases, pgstore.PoolRenewals} {
		s.failed.WithLabelValues(pool) // served at 0 before the first failure
	}
	return s
}

// observe records one statement.
func (s *statementMetrics) observe(pool string, took time.Duration, err error) {
	s.took.WithLabelValues(pool).Observe(took.Seconds())
	if err != nil {
		s.failed.WithLabelValues(pool).Inc()
	}
}
