package node

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/examples/counter"
	"github.com/berthrt/berth/internal/pgtest"
	"github.com/berthrt/berth/internal/testutil"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// get fetches url and returns its status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// scrapeWith scrapes n's /metrics until it has a line starting with each
// of series (the series of renewals appear once the first renewals have
// been answered), and returns that scrape.
func scrapeWith(t *testing.T, n *Node, series []string) string {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		_, metrics := get(t, "http://"+n.HTTPAddr()+"/metrics")
		var missing []string
		for _, s := range series {
			if !strings.Contains(metrics, "\n"+s) {
				missing = append(missing, strings.TrimSpace(s))
			}
		}
		if len(missing) == 0 {
			return metrics
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics has no %v a minute after the start", missing)
		}
	}
}

// A node started in a program serves its kinds through its host; its
// /metrics has the Go runtime's and the process's series beside berth's;
// Stop drains it (no object left, the stats line written) and ends its
// servers; a second node of the same name, once the first stopped,
// starts at once.
func TestANodeServesItsKindsAndStopsGracefully(t *testing.T) {
	db := pgtest.New(t)
	var out, log testutil.Buffer
	cfg := Config{Name: "n1", Listen: "127.0.0.1:0", Database: db.URL, HTTP: "127.0.0.1:0", Stdout: &out,
		Logger: slog.New(slog.NewJSONHandler(&log, nil))}
	ctx := context.Background()
	n, err := Start(ctx, cfg, counter.Kind())
	if err != nil {
		t.Fatal(err)
	}
	ref := actor.Ref{Kind: counter.Name, ID: "c1"}
	for seq := 1; seq <= 3; seq++ {
		if err := actor.Tell(ctx, n.Host(), ref, counter.Add{Sender: "s", Seq: seq}); err != nil {
			t.Fatal(err)
		}
	}
	if c, err := actor.Ask[counter.Read, counter.Counter](ctx, n.Host(), ref, counter.Read{}); err != nil || c.Count["s"] != 3 || c.OutOfOrder != 0 {
		t.Fatalf("the counter: %+v, %v", c, err)
	}
	if code, body := get(t, "http://"+n.HTTPAddr()+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz: %d %q", code, body)
	}
	series := []string{"go_goroutines ", "go_memstats_heap_alloc_bytes ", "process_cpu_seconds_total ", "process_resident_memory_bytes ",
		"berth_messages_handled_total", "berth_tcp_resent_items_total ", "berth_tcp_refused_connections_total ",
		"berth_lease_renewal_seconds_count{lease=\"store\"} ", "berth_lease_renewal_seconds_count{lease=\"membership\"} ",
		"berth_lease_jeopardy_seconds_total{host=\"n1\"} ", "berth_store_statement_seconds_count{pool=\"renewals\"} ",
		"berth_store_statement_seconds_count{pool=\"work\"} ", "berth_store_statement_seconds_count{pool=\"leases\"} "}
	scrapeWith(t, n, series)
	for _, line := range []string{"http " + n.HTTPAddr() + "\n", "ready n1 " + n.Addr() + "\n"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("stdout %q has no line %q", out.String(), line)
		}
	}
	if err := n.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if !strings.Contains(out.String(), "stats moves=0 pauses-us=") {
		t.Errorf("stdout %q has no stats line", out.String())
	}
	if n.Host().Stats().OwnersActive != 0 {
		t.Errorf("%d objects active after the stop", n.Host().Stats().OwnersActive)
	}
	if _, err := http.Get("http://" + n.HTTPAddr() + "/healthz"); err == nil {
		t.Error("the HTTP server still answers after Stop")
	}
	// The name is free at once: the first node left.
	cfg.HTTP = ""
	began := time.Now()
	n2, err := Start(ctx, cfg, counter.Kind())
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Close()
	if strings.Contains(log.String(), "waiting for its lease to run out") {
		t.Errorf("the second node waited %v for the name the first had left", time.Since(began))
	}
	if c, err := actor.Ask[counter.Read, counter.Counter](ctx, n2.Host(), ref, counter.Read{}); err != nil || c.Count["s"] != 0 {
		t.Errorf("the counter after the stop: %+v, %v; want it fresh (it had nowhere to move, so the stop ended its state)", c, err)
	}
}

// Run returns nil once its Context ends and the node has stopped; a node
// whose name a live node holds gives up after NameWait with ErrNameHeld,
// exit 1, having left the live node alone.
func TestRunStopsWhenItsContextEndsAndANameHeldByALiveNodeIsLeftAlone(t *testing.T) {
	db := pgtest.New(t)
	quiet := slog.New(slog.DiscardHandler)
	live, err := Start(context.Background(), Config{Name: "n1", Listen: "127.0.0.1:0", Database: db.URL, Logger: quiet}, counter.Kind())
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	_, err = Start(context.Background(), Config{Name: "n1", Listen: "127.0.0.1:0", Database: db.URL, Logger: quiet, NameWait: 500 * time.Millisecond}, counter.Kind())
	if !errors.Is(err, ErrNameHeld) || ExitCode(err) != ExitFailed {
		t.Fatalf("a second n1: %v; want ErrNameHeld, exit %d", err, ExitFailed)
	}
	if err := live.Host().Ready(); err != nil {
		t.Fatalf("the live n1 after the second gave up: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out testutil.Buffer
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Name: "n2", Listen: "127.0.0.1:0", Database: db.URL, Logger: quiet, Stdout: &out}, counter.Kind())
	}()
	for !strings.Contains(out.String(), "ready n2 ") {
		select {
		case err := <-done:
			t.Fatalf("Run ended before it served: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after its Context ended: %v; want nil (a graceful stop)", err)
	}
	if !strings.Contains(out.String(), "stats moves=") {
		t.Errorf("no stats line after Run's stop: %q", out.String())
	}
}

// Every series the Grafana dashboard in docs/grafana names is one a node
// serves (a histogram's by its _bucket, _sum or _count), once it has run
// a message, renewed its leases and linked to a peer: a query of the dashboard never comes
// back empty for want of a series.
func TestTheGrafanaDashboardNamesOnlySeriesANodeServes(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "grafana", "berth.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`\b(?:berth|go|process)_[a-z0-9_]+\b`)
	used := map[string]string{} // series: the panel that names it
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			for _, name := range names.FindAllString(q.Expr, -1) {
				used[name] = p.Title
			}
		}
	}
	if len(used) < 20 {
		t.Fatalf("the dashboard names %d series: %v", len(used), used)
	}
	db := pgtest.New(t)
	n, err := Start(context.Background(), Config{Name: "n1", Listen: "127.0.0.1:0", Database: db.URL, HTTP: "127.0.0.1:0",
		Logger: slog.New(slog.DiscardHandler)}, counter.Kind())
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	peer, err := Start(context.Background(), Config{Name: "n2", Listen: "127.0.0.1:0", Database: db.URL,
		Logger: slog.New(slog.DiscardHandler)}, counter.Kind())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	ref := actor.Ref{Kind: counter.Name, ID: "c1"}
	if _, err := actor.Ask[counter.Read, counter.Counter](context.Background(), n.Host(), ref, counter.Read{}); err != nil {
		t.Fatal(err)
	}
	scrape := scrapeWith(t, n, []string{"berth_lease_renewal_seconds_count{lease=\"store\"} ", "berth_store_statement_seconds_count{pool=\"renewals\"} ",
		"berth_link_rtt_seconds{peer=\"n2\"} "})
	families := map[string]string{} // name: type
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) (\S+)$`).FindAllStringSubmatch(scrape, -1) {
		families[m[1]] = m[2]
	}
	for name, panel := range used {
		if _, ok := families[name]; ok {
			continue
		}
		base := regexp.MustCompile(`_(bucket|sum|count)$`).ReplaceAllString(name, "")
		if families[base] == "histogram" && base != name {
			continue
		}
		t.Errorf("panel %q names %s, which a node does not serve", panel, name)
	}
}

// A node's /metrics counts each link's traffic by peer: two nodes on one
// database, an object moved to the second and told through the first —
// the first's series for its link to the second count the items and
// bytes it sent, and say the link is up.
func TestANodesMetricsCountEachLinksTraffic(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	start := func(name string) *Node {
		n, err := Start(ctx, Config{Name: name, Listen: "127.0.0.1:0", Database: db.URL, HTTP: "127.0.0.1:0", Stdout: io.Discard,
			Logger: slog.New(slog.DiscardHandler)}, counter.Kind())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Close() })
		return n
	}
	n1, n2 := start("n1"), start("n2")
	ref := actor.Ref{Kind: counter.Name, ID: "linked"}
	if err := actor.Tell(ctx, n1.Host(), ref, counter.Add{Sender: "s", Seq: 1}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		err := n1.Host().Relocate(ctx, ref, "n2")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Relocate to n2: %v", err)
		}
	}
	for seq := 2; seq <= 21; seq++ {
		if err := actor.Tell(ctx, n1.Host(), ref, counter.Add{Sender: "s", Seq: seq}); err != nil {
			t.Fatal(err)
		}
	}
	if c, err := actor.Ask[counter.Read, counter.Counter](ctx, n1.Host(), ref, counter.Read{}); err != nil || c.Count["s"] != 21 {
		t.Fatalf("the counter on n2: %+v, %v", c, err)
	}
	metrics := scrapeWith(t, n1, []string{`berth_link_up{peer="n2"} 1`, `berth_link_sent_items_total{peer="n2"} `,
		`berth_link_sent_bytes_total{peer="n2"} `, `berth_link_received_items_total{peer="n2"} `, `berth_link_resent_items_total{peer="n2"} `, `berth_link_rtt_seconds{peer="n2"} `})
	var sent float64
	for _, line := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, `berth_link_sent_items_total{peer="n2"} `); ok {
			sent, _ = strconv.ParseFloat(v, 64)
		}
	}
	if sent < 21 { // the move's records, 20 Tells and an Ask at least
		t.Fatalf("n1 counts %v items sent to n2, want at least 21", sent)
	}
	if got := n2.Host().Stats().OwnersActive; got != 1 {
		t.Fatalf("n2 owns %d objects, want the one moved there", got)
	}
}

// Off loopback (-http-public), /metrics and /dashboard/ answer only a
// request with the admin credential — a Bearer token, or HTTP Basic's
// password as a browser sends it — and 401 otherwise; /healthz and
// /readyz, for probes, need none.
func TestOffLoopbackTheMetricsAndDashboardNeedTheAdminCredential(t *testing.T) {
	db := pgtest.New(t)
	const tok = "an-admin-token-of-enough-bytes"
	cfg := Config{Name: "n1", Listen: "127.0.0.1:0", Database: db.URL, HTTP: "0.0.0.0:0", HTTPPublic: true, AdminToken: tok,
		Stdout: io.Discard, Logger: slog.New(slog.DiscardHandler)}
	ctx := context.Background()
	n, err := Start(ctx, cfg, counter.Kind())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = n.Stop(ctx) }()
	_, port, err := net.SplitHostPort(n.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	base := "http://127.0.0.1:" + port
	do := func(path string, set func(*http.Request)) int {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		set(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	none := func(*http.Request) {}
	bearer := func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
	basic := func(r *http.Request) { r.SetBasicAuth("me", tok) }
	for _, path := range []string{"/metrics", "/dashboard/"} {
		if code := do(path, none); code != http.StatusUnauthorized {
			t.Errorf("%s without a credential: %d, want 401", path, code)
		}
		if code := do(path, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok+"x") }); code != http.StatusUnauthorized {
			t.Errorf("%s with a wrong credential: %d, want 401", path, code)
		}
		for _, set := range []func(*http.Request){bearer, basic} {
			if code := do(path, set); code != http.StatusOK {
				t.Errorf("%s with the credential: %d", path, code)
			}
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code := do(path, none); code != http.StatusOK {
			t.Errorf("%s without a credential: %d, want 200", path, code)
		}
	}
}
