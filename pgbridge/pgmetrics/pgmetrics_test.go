package pgmetrics_test

import (
	"errors"
	"fmt"
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

	"github.com/berthrt/berth/metrics"
	"github.com/berthrt/berth/pgbridge"
	"github.com/berthrt/berth/pgbridge/pgmetrics"
)

// series are the names of every series the package registers.
var series = []string{
	"berth_pgbridge_claimed_rows_total",
	"berth_pgbridge_settled_rows_total",
	"berth_pgbridge_claim_to_settle_seconds",
	"berth_pgbridge_decode_failures_total",
	"berth_pgbridge_lease_lost_total",
	"berth_pgbridge_rollbacks_total",
	"berth_pgbridge_rolled_back_rows_total",
	"berth_pgbridge_claim_errors_total",
	"berth_pgbridge_notify_wakeups_total",
}

// feed reports a little of everything, for two subscriptions and a channel.
func feed(m *pgmetrics.Metrics) {
	m.Claimed("orders", 16)
	m.Claimed("orders", 4)
	m.Claimed("mail", 1)
	for range 15 {
		m.Settled("orders", pgbridge.KindAck, time.Millisecond)
	}
	m.Settled("orders", pgbridge.KindRetry, time.Millisecond)
	m.Settled("orders", pgbridge.KindDrop, time.Millisecond)
	m.Settled("orders", pgbridge.KindDeadLetter, time.Millisecond)
	m.Settled("mail", pgbridge.KindAck, time.Millisecond)
	m.DecodeFailed("orders")
	m.DecodeFailed("orders")
	m.LeaseLost("mail")
	m.RolledBack("orders", 2)
	m.ClaimFailed("mail", errors.New("relation \"mail\" does not exist"))
	m.ClaimFailed("mail", errors.New("relation \"mail\" does not exist"))
	m.Woken("berth_inbox_orders")
	m.Woken("berth_inbox_orders")
	m.Woken("berth_inbox_mail")
}

func TestEventCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := pgmetrics.New(reg)
	feed(m)
	const want = `
# HELP berth_pgbridge_claimed_rows_total Rows claimed by a subscription.
# TYPE berth_pgbridge_claimed_rows_total counter
berth_pgbridge_claimed_rows_total{subscription="mail"} 1
berth_pgbridge_claimed_rows_total{subscription="orders"} 20
# HELP berth_pgbridge_settled_rows_total Rows settled, by outcome (ack, retry, drop, dead_letter).
# TYPE berth_pgbridge_settled_rows_total counter
berth_pgbridge_settled_rows_total{outcome="ack",subscription="mail"} 1
berth_pgbridge_settled_rows_total{outcome="ack",subscription="orders"} 15
berth_pgbridge_settled_rows_total{outcome="dead_letter",subscription="mail"} 0
berth_pgbridge_settled_rows_total{outcome="dead_letter",subscription="orders"} 1
berth_pgbridge_settled_rows_total{outcome="drop",subscription="mail"} 0
berth_pgbridge_settled_rows_total{outcome="drop",subscription="orders"} 1
berth_pgbridge_settled_rows_total{outcome="retry",subscription="mail"} 0
berth_pgbridge_settled_rows_total{outcome="retry",subscription="orders"} 1
# HELP berth_pgbridge_decode_failures_total Rows whose payload did not decode, settled by the decode policy.
# TYPE berth_pgbridge_decode_failures_total counter
berth_pgbridge_decode_failures_total{subscription="mail"} 0
berth_pgbridge_decode_failures_total{subscription="orders"} 2
# HELP berth_pgbridge_lease_lost_total Lease-form rows whose lease was taken over before they settled.
# TYPE berth_pgbridge_lease_lost_total counter
berth_pgbridge_lease_lost_total{subscription="mail"} 1
berth_pgbridge_lease_lost_total{subscription="orders"} 0
# HELP berth_pgbridge_rollbacks_total Row-lock claims rolled back; their rows are claimed again.
# TYPE berth_pgbridge_rollbacks_total counter
berth_pgbridge_rollbacks_total{subscription="mail"} 0
berth_pgbridge_rollbacks_total{subscription="orders"} 1
# HELP berth_pgbridge_rolled_back_rows_total Rows of the row-lock claims that rolled back.
# TYPE berth_pgbridge_rolled_back_rows_total counter
berth_pgbridge_rolled_back_rows_total{subscription="mail"} 0
berth_pgbridge_rolled_back_rows_total{subscription="orders"} 2
# HELP berth_pgbridge_claim_errors_total Claims of a subscription that failed (nothing claimed; it claims again after its poll interval).
# TYPE berth_pgbridge_claim_errors_total counter
berth_pgbridge_claim_errors_total{subscription="mail"} 2
berth_pgbridge_claim_errors_total{subscription="orders"} 0
# HELP berth_pgbridge_notify_wakeups_total Notifications that woke the subscriptions of a channel.
# TYPE berth_pgbridge_notify_wakeups_total counter
berth_pgbridge_notify_wakeups_total{channel="berth_inbox_mail"} 1
berth_pgbridge_notify_wakeups_total{channel="berth_inbox_orders"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"berth_pgbridge_claimed_rows_total", "berth_pgbridge_settled_rows_total",
		"berth_pgbridge_decode_failures_total", "berth_pgbridge_lease_lost_total",
		"berth_pgbridge_rollbacks_total", "berth_pgbridge_rolled_back_rows_total",
		"berth_pgbridge_claim_errors_total", "berth_pgbridge_notify_wakeups_total"); err != nil {
		t.Fatal(err)
	}
}

func TestLatencyHistogram(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := pgmetrics.New(reg)
	// Binary fractions of a second, so the sum is exact; one beyond the
	// last bucket.
	m.Settled("orders", pgbridge.KindAck, 250*time.Millisecond)
	m.Settled("orders", pgbridge.KindRetry, 2*time.Second)
	m.Settled("orders", pgbridge.KindAck, 128*time.Second)

	h := histogram(t, reg, "orders")
	if h.GetSampleCount() != 3 || h.GetSampleSum() != 130.25 {
		t.Fatalf("count %d sum %v, want 3 and 130.25", h.GetSampleCount(), h.GetSampleSum())
	}
	want := map[float64]uint64{.1: 0, .5: 1, 1: 1, 5: 2, 60: 2}
	seen := 0
	for _, b := range h.GetBucket() {
		if n, ok := want[b.GetUpperBound()]; ok {
			seen++
			if b.GetCumulativeCount() != n {
				t.Errorf("bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), n)
			}
		}
	}
	if seen != len(want) {
		t.Fatalf("found %d of the %d buckets checked", seen, len(want))
	}
}

// histogram returns the claim-to-settle histogram of subscription sub.
func histogram(t *testing.T, reg prometheus.Gatherer, sub string) *dto.Histogram {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "berth_pgbridge_claim_to_settle_seconds" {
			continue
		}
		if mf.GetType() != dto.MetricType_HISTOGRAM {
			t.Fatalf("type %v", mf.GetType())
		}
		for _, mt := range mf.GetMetric() {
			if l := mt.GetLabel(); len(l) == 1 && l[0].GetName() == "subscription" && l[0].GetValue() == sub {
				return mt.GetHistogram()
			}
		}
	}
	t.Fatalf("no claim_to_settle_seconds for %q", sub)
	return nil
}

// A kind newer than the package is counted too (not cached), under its
// String() — OutcomeKind.String's fallback, "ack", for a kind it does not
// name.
func TestUnknownOutcomeKind(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := pgmetrics.New(reg)
	k := pgbridge.OutcomeKind(200)
	m.Settled("orders", k, time.Millisecond)
	m.Settled("orders", k, time.Millisecond)
	want := fmt.Sprintf(`
# HELP berth_pgbridge_settled_rows_total Rows settled, by outcome (ack, retry, drop, dead_letter).
# TYPE berth_pgbridge_settled_rows_total counter
berth_pgbridge_settled_rows_total{outcome=%q,subscription="orders"} 2
berth_pgbridge_settled_rows_total{outcome="dead_letter",subscription="orders"} 0
berth_pgbridge_settled_rows_total{outcome="drop",subscription="orders"} 0
berth_pgbridge_settled_rows_total{outcome="retry",subscription="orders"} 0
`, k.String())
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "berth_pgbridge_settled_rows_total"); err != nil {
		t.Fatal(err)
	}
}

func TestLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	feed(pgmetrics.New(reg))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != len(series) {
		t.Fatalf("gathered %d families, want %d", len(mfs), len(series))
	}
	for _, mf := range mfs {
		if !slices.Contains(series, mf.GetName()) {
			t.Errorf("unexpected family %s", mf.GetName())
		}
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil || len(problems) > 0 {
		t.Fatalf("promlint: %v %v", problems, err)
	}
}

// The package doc lists every series the package registers, with its
// labels, and nothing else.
func TestDocListsEverySeries(t *testing.T) {
	src, err := os.ReadFile("pgmetrics.go")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{} // name → "{labels}"
	for _, line := range strings.Split(string(src), "\n") {
		f := strings.Fields(strings.TrimPrefix(line, "//"))
		if len(f) == 0 || !strings.HasPrefix(f[0], "berth_pgbridge_") {
			continue
		}
		name, labels, _ := strings.Cut(f[0], "{")
		documented[name] = "{" + labels
	}
	reg := prometheus.NewRegistry()
	feed(pgmetrics.New(reg))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		var labels []string
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		got, ok := documented[mf.GetName()]
		if !ok {
			t.Errorf("%s is not in the package doc's list", mf.GetName())
			continue
		}
		delete(documented, mf.GetName())
		if want := "{" + strings.Join(labels, ",") + "}"; !sameLabels(got, want) {
			t.Errorf("%s: documented labels %s, registered %s", mf.GetName(), got, want)
		}
	}
	for name := range documented {
		t.Errorf("the package doc lists %s, which is not registered", name)
	}
}

// sameLabels compares two "{a,b}" label lists as sets.
func sameLabels(a, b string) bool {
	split := func(s string) []string {
		l := strings.Split(strings.Trim(s, "{}"), ",")
		slices.Sort(l)
		return l
	}
	return slices.Equal(split(a), split(b))
}

// One registry holds the host's series and the bridge's, and a
// metrics.Metrics on it serves both.
func TestSharesARegistryWithPackageMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	hm := metrics.New(reg)
	pm := pgmetrics.New(reg)
	pm.Claimed("orders", 3)
	hm.Activated("tally")
	rec := httptest.NewRecorder()
	hm.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if body := rec.Body.String(); !strings.Contains(body, `berth_pgbridge_claimed_rows_total{subscription="orders"} 3`) ||
		!strings.Contains(body, `berth_activations_total{kind="tally"} 1`) {
		t.Fatalf("metrics.Metrics does not serve both packages' series:\n%s", body)
	}
}

func TestMisusePanics(t *testing.T) {
	mustPanic := func(what, want string, fn func()) {
		t.Helper()
		defer func() {
			r := recover()
			if r == nil || !strings.Contains(fmt.Sprint(r), want) {
				t.Fatalf("%s: recovered %v, want a panic containing %q", what, r, want)
			}
		}()
		fn()
	}
	mustPanic("New(nil)", "pgmetrics: New with a nil", func() { pgmetrics.New(nil) })
	reg := prometheus.NewRegistry()
	pgmetrics.New(reg)
	mustPanic("a second New on one registry", "duplicate metrics collector registration", func() { pgmetrics.New(reg) })
}

// TestEventsDoNotAllocate pins the Observer contract: once a subscription
// and a channel have been seen, the event methods cost no allocation.
func TestEventsDoNotAllocate(t *testing.T) {
	m := pgmetrics.New(prometheus.NewRegistry())
	sub, ch := strings.Repeat("s", 8), strings.Repeat("c", 8) // not constants, as the broker's are not
	run := func() {
		m.Claimed(sub, 8)
		m.Settled(sub, pgbridge.KindAck, time.Millisecond)
		m.Settled(sub, pgbridge.KindDeadLetter, time.Millisecond)
		m.DecodeFailed(sub)
		m.LeaseLost(sub)
		m.RolledBack(sub, 8)
		m.Woken(ch)
	}
	run()
	if n := testing.AllocsPerRun(1000, run); n != 0 {
		t.Fatalf("event methods allocate %v times per round after warm-up; want 0", n)
	}
}

// TestConcurrent runs the event methods from many goroutines while the
// registry is gathered; under -race it checks the cache, and the totals are
// exact.
func TestConcurrent(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := pgmetrics.New(reg)
	const workers, rounds = 8, 500
	subs := []string{"a", "b", "c", "d"}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				s := subs[(w+i)%len(subs)]
				m.Claimed(s, 2)
				m.Settled(s, pgbridge.KindAck, time.Microsecond)
				m.Woken("berth_inbox_" + s)
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			if _, err := reg.Gather(); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
	var want strings.Builder
	want.WriteString("# HELP berth_pgbridge_claimed_rows_total Rows claimed by a subscription.\n")
	want.WriteString("# TYPE berth_pgbridge_claimed_rows_total counter\n")
	for _, s := range subs {
		fmt.Fprintf(&want, "berth_pgbridge_claimed_rows_total{subscription=%q} %d\n", s, 2*workers*rounds/len(subs))
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want.String()), "berth_pgbridge_claimed_rows_total"); err != nil {
		t.Fatal(err)
	}
}
