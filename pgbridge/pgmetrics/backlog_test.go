package pgmetrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/berthrt/berth/pgbridge"
	"github.com/berthrt/berth/pgbridge/pgmetrics"
)

// fakeBacklog is a BacklogSource that reports bl, or fails with err.
type fakeBacklog struct {
	bl  []pgbridge.Backlog
	err error
}

func (f *fakeBacklog) Backlog(context.Context) ([]pgbridge.Backlog, error) { return f.bl, f.err }

// The backlog collector exports each subscription's ready rows and the
// next row's wait at each scrape; a failed query leaves the gauges out and
// is counted.
func TestTheBacklogCollectorExportsReadyRowsAndTheOldestsWait(t *testing.T) {
	src := &fakeBacklog{bl: []pgbridge.Backlog{
		{Subscription: "orders", Ready: 42, OldestReady: 1500 * time.Millisecond},
		{Subscription: "mail"},
	}}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(pgmetrics.NewBacklogCollector(src, time.Second))
	want := `
# HELP berth_pgbridge_backlog_errors_total Scrapes whose backlog query failed; their backlog gauges were left out.
# TYPE berth_pgbridge_backlog_errors_total counter
berth_pgbridge_backlog_errors_total 0
# HELP berth_pgbridge_oldest_ready_seconds How long the next row a subscription will claim has been ready (0: none is).
# TYPE berth_pgbridge_oldest_ready_seconds gauge
berth_pgbridge_oldest_ready_seconds{subscription="mail"} 0
berth_pgbridge_oldest_ready_seconds{subscription="orders"} 1.5
# HELP berth_pgbridge_ready_rows Rows a subscription can claim now (counted up to 1,000,000).
# TYPE berth_pgbridge_ready_rows gauge
berth_pgbridge_ready_rows{subscription="mail"} 0
berth_pgbridge_ready_rows{subscription="orders"} 42
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	src.err = errors.New("connection refused")
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP berth_pgbridge_backlog_errors_total Scrapes whose backlog query failed; their backlog gauges were left out.
# TYPE berth_pgbridge_backlog_errors_total counter
berth_pgbridge_backlog_errors_total 1
`)); err != nil {
		t.Fatal(err)
	}
}
