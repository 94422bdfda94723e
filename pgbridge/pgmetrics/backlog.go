package pgmetrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/berthrt/berth/pgbridge"
)

// BacklogSource reports subscriptions' backlogs: a *pgbridge.Broker.
type BacklogSource interface {
	Backlog(ctx context.Context) ([]pgbridge.Backlog, error)
}

// BacklogCollector is a prometheus.Collector of a broker's backlog gauges,
// asked of the database at each scrape (pgbridge.Broker.Backlog: one
// statement per subscription, within the collector's timeout):
//
//	berth_pgbridge_ready_rows{subscription}             rows claimable now (counted up to 1,000,000)
//	berth_pgbridge_oldest_ready_seconds{subscription}   how long the next row to be claimed has been ready
//	berth_pgbridge_backlog_errors_total                  scrapes whose backlog query failed (the gauges are then left out)
//
// Register one per broker: reg.MustRegister(pgmetrics.NewBacklogCollector(b, 5*time.Second)).
type BacklogCollector struct {
	src     BacklogSource
	timeout time.Duration
	ready   *prometheus.Desc
	oldest  *prometheus.Desc
	errs    prometheus.Counter
}

// NewBacklogCollector returns a collector of src's backlog gauges whose
// query at each scrape is bounded by timeout (0: 5 s).
func NewBacklogCollector(src BacklogSource, timeout time.Duration) *BacklogCollector {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	name := func(n string) string { return prometheus.BuildFQName(namespace, subsystem, n) }
	return &BacklogCollector{
		src: src, timeout: timeout,
		ready: prometheus.NewDesc(name("ready_rows"),
			"Rows a subscription can claim now (counted up to 1,000,000).", []string{"subscription"}, nil),
		oldest: prometheus.NewDesc(name("oldest_ready_seconds"),
			"How long the next row a subscription will claim has been ready (0: none is).", []string{"subscription"}, nil),
		errs: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: subsystem,
			Name: "backlog_errors_total", Help: "Scrapes whose backlog query failed; their backlog gauges were left out."}),
	}
}

// Describe sends the collector's descriptors.
func (c *BacklogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.ready
	ch <- c.oldest
	c.errs.Describe(ch)
}

// Collect asks the source for the backlog and sends the gauges.
func (c *BacklogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	bl, err := c.src.Backlog(ctx)
	if err != nil {
		c.errs.Inc()
	} else {
		for _, b := range bl {
			ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, float64(b.Ready), b.Subscription)
			ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, b.OldestReady.Seconds(), b.Subscription)
		}
	}
	c.errs.Collect(ch)
}
