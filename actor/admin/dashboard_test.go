package admin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/actor/admin"
	"github.com/berthrt/berth/examples/counter"
	"github.com/berthrt/berth/internal/localnet"
	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/metrics"
	"github.com/berthrt/berth/relocation"
)

// threeHosts starts a, b and c on one in-process network with the counter
// kind, puts 30 objects on them, and serves a's dashboard (its message
// rate: a's turns, from a metrics.Metrics observer).
func threeHosts(t *testing.T) (hs []*actor.Host, net *localnet.Net, srv *httptest.Server) {
	t.Helper()
	net = localnet.New(localnet.Options{})
	m := metrics.New(prometheus.NewRegistry()) // a's turns, for the page's rate
	hs = startHosts(t, net, m, "a", "b", "c")
	for i := range 30 {
		if _, err := actor.Ask[counter.Read, counter.Counter](bg, hs[i%3], actor.Ref{Kind: counter.Name, ID: strconv.Itoa(i)}, counter.Read{}); err != nil {
			t.Fatal(err)
		}
	}
	d, err := admin.Dashboard(admin.DashboardOptions{Host: hs[0], Membership: net.Membership, Store: net.Store,
		Messages: m.Turns, Every: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv = httptest.NewServer(d)
	t.Cleanup(srv.Close)
	return hs, net, srv
}

// load Tells the 30 objects through h, in turns, until the function it
// returns is called (it waits for the sender to stop).
func load(t *testing.T, h *actor.Host) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			if err := actor.Tell(bg, h, actor.Ref{Kind: counter.Name, ID: strconv.Itoa(i % 30)}, counter.Add{Sender: "load", Seq: i/30 + 1}); err != nil {
				t.Errorf("load: %v", err)
				return
			}
			if i%30 == 29 {
				time.Sleep(time.Millisecond) // a steady trickle, not a flood
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-stopped }) }
}

// onHost returns how many of the 30 objects live on host h.
func onHost(t *testing.T, net *localnet.Net, h string) int {
	n := 0
	for i := range 30 {
		if row, err := net.Store.Get(bg, relocation.Object{Kind: counter.Name, ID: strconv.Itoa(i)}); err == nil && row.Host == h {
			n++
		}
	}
	return n
}

// The dashboard's stream sends snapshots of the cluster while a page
// watches — members, objects per host, rates, pauses — and nothing runs
// once it stops watching.
func TestTheDashboardStreamsSnapshotsWhileWatched(t *testing.T) {
	hs, net, srv := threeHosts(t)
	stopLoad := load(t, hs[0])
	defer stopLoad()
	ctx, cancel := context.WithCancel(bg)
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	next := func() admin.Snapshot {
		t.Helper()
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var s admin.Snapshot
				if err := json.Unmarshal([]byte(data), &s); err != nil {
					t.Fatal(err)
				}
				return s
			}
		}
		t.Fatalf("the stream ended: %v", sc.Err())
		return admin.Snapshot{}
	}
	s := next()
	if s.Host != "a" || len(s.Members) != 3 || s.Total != 30 || len(s.Objects) != 3 {
		t.Fatalf("first snapshot: %+v; want a's view: 3 members, 30 objects on 3 hosts", s)
	}
	// A move shows in the next snapshots: counts, moves, a pause.
	var id string
	for i := range 30 {
		if loc, _ := hs[0].Locate(bg, actor.Ref{Kind: counter.Name, ID: strconv.Itoa(i)}); loc.Host == "a" {
			id = strconv.Itoa(i)
			break
		}
	}
	before := onHost(t, net, "b")
	if err := hs[0].Relocate(bg, actor.Ref{Kind: counter.Name, ID: id}, "b"); err != nil {
		t.Fatal(err)
	}
	var listed []admin.Move // the moves the snapshots carried
	for deadline := time.Now().Add(10 * time.Second); ; {
		s = next()
		listed = append(listed, s.RecentMoves...)
		count := 0
		for _, o := range s.Objects {
			if o.Host == "b" {
				count = o.Objects
			}
		}
		if count == before+1 && s.Moves >= 1 && s.UnderWay == 0 && s.Pauses.Count >= 1 && s.MsgRate > 0 && len(listed) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot shows the move: %+v (b had %d)", s, before)
		}
	}
	if s.Pauses.P50 <= 0 || s.Pauses.Max < s.Pauses.P99 || s.Pauses.P99 < s.Pauses.P50 {
		t.Fatalf("pauses %+v", s.Pauses)
	}
	// The move is carried once, by the first snapshot after it ended.
	for range 3 {
		listed = append(listed, next().RecentMoves...)
	}
	m := listed[0]
	if len(listed) != 1 || m.Kind != counter.Name || m.ID != id || m.From != "a" || m.To != "b" || m.Outcome != "moved" ||
		m.PauseUS != s.Pauses.Max || m.Seq != 1 || m.Ended.Before(m.Started) {
		t.Fatalf("the snapshots carried the moves %+v; want the one move of %s from a to b, once, with its pause (%d µs)", listed, id, s.Pauses.Max)
	}
	// A new stream's first snapshot carries the last moves.
	ctx2, cancel2 := context.WithCancel(bg)
	req2, _ := http.NewRequestWithContext(ctx2, "GET", srv.URL+"/events", nil)
	resp2, err := http.DefaultClient.Do(req2)
	if err != nil {
		t.Fatal(err)
	}
	sc2 := bufio.NewScanner(resp2.Body)
	sc2.Buffer(nil, 1<<20)
	for sc2.Scan() {
		if data, ok := strings.CutPrefix(sc2.Text(), "data: "); ok {
			var first admin.Snapshot
			if err := json.Unmarshal([]byte(data), &first); err != nil {
				t.Fatal(err)
			}
			if len(first.RecentMoves) != 1 || first.RecentMoves[0] != m {
				t.Fatalf("a new stream's first snapshot carries %+v; want the move %+v", first.RecentMoves, m)
			}
			break
		}
	}
	cancel2()
	resp2.Body.Close()
	cancel()
	resp.Body.Close()
	stopLoad()
	srv.Close() // waits for the handlers: the stream's loop has ended
	for _, h := range hs {
		h.Close()
	}
	testutil.CheckNoGoroutines(t)
}

// chromiumPath finds a Chromium or Chrome binary, or "".
func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// In a real browser (headless Chromium), the page lists the three members
// and their objects, and shows a move's change of the counts and the move
// itself in its Moves panel; when a member fails, it marks it failed with
// the objects it still holds, and lists the failure in its Events panel. A
// screenshot is saved in $BERTH_TEST_ARTIFACTS (default: the test's
// temporary directory). Without Chromium the test skips, unless
// BERTH_REQUIRE_BROWSER=1 (CI installs it and sets that).
func TestTheDashboardShowsTheClusterInABrowser(t *testing.T) {
	browser := chromiumPath()
	if browser == "" {
		if os.Getenv("BERTH_REQUIRE_BROWSER") == "1" {
			t.Fatal("no Chromium on PATH, and BERTH_REQUIRE_BROWSER=1")
		}
		t.Skip("no Chromium on PATH (set BERTH_REQUIRE_BROWSER=1 to fail instead)")
	}
	hs, net, srv := threeHosts(t)
	stopLoad := load(t, hs[0])
	defer stopLoad()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1280, 760))
	actx, cancelAlloc := chromedp.NewExecAllocator(bg, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 2*time.Minute)
	defer cancel()

	countOf := func(host string) string {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.querySelector('#objects [data-host="`+host+`"] .count') || {}).textContent || ""`))
		if err != nil {
			t.Fatalf("the page's count of %s: %v", host, err)
		}
		return v
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#members tbody tr[data-member="c"]`))); err != nil {
		t.Fatalf("the page never listed the members: %v", err)
	}
	members, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#members tbody tr")].map(r => r.dataset.member)`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(members, ",") != "a,b,c" {
		t.Fatalf("the page lists %v, want a, b and c", members)
	}
	wantB := strconv.Itoa(onHost(t, net, "b"))
	for deadline := time.Now().Add(10 * time.Second); countOf("b") != wantB; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#objects").outerHTML`))
			t.Fatalf("the page shows b with %q objects, want %s: %s", countOf("b"), wantB, html)
		}
	}

	// A move from a to b: the page's counts follow.
	var id string
	for i := range 30 {
		if loc, _ := hs[0].Locate(bg, actor.Ref{Kind: counter.Name, ID: strconv.Itoa(i)}); loc.Host == "a" {
			id = strconv.Itoa(i)
			break
		}
	}
	if err := hs[0].Relocate(bg, actor.Ref{Kind: counter.Name, ID: id}, "b"); err != nil {
		t.Fatal(err)
	}
	wantB, wantA := strconv.Itoa(onHost(t, net, "b")), strconv.Itoa(onHost(t, net, "a"))
	testutil.WaitFor(t, "the page to show the move", func() bool { return countOf("b") == wantB && countOf("a") == wantA })
	testutil.WaitFor(t, "the page to count the move", func() bool {
		moves, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#moves`)))
		return err == nil && moves == "1"
	})
	// The Moves panel lists it, as it is drawn: the object, from a to b,
	// moved, with its pause.
	feedRow := func() []string {
		cells, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
			`[...((document.querySelector('#feed tbody tr') || {}).cells || [])].map(td => td.innerText)`))
		if err != nil {
			t.Fatalf("the page's Moves panel: %v", err)
		}
		return cells
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		row := feedRow()
		if len(row) == 5 && row[1] == counter.Name+"/"+id && row[2] == "a → b" && strings.HasPrefix(row[4], "moved") && strings.HasSuffix(row[3], "s") {
			break
		}
		if time.Now().After(deadline) {
			html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#feed").outerHTML`))
			t.Fatalf("the Moves panel's newest row is %q; want %s/%s, a → b, moved, its pause: %s", row, counter.Name, id, html)
		}
	}

	// c fails — it closes without handing its work on: the page marks it
	// failed, still with its objects (they are taken over at their next
	// message, and none comes), and the Events panel lists the failure.
	stopLoad()
	wantC := strconv.Itoa(onHost(t, net, "c"))
	hs[2].Close()
	eval := func(js string) string {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return v
	}
	testutil.WaitFor(t, "the page to mark c failed", func() bool {
		return eval(`(document.querySelector('#members tbody tr[data-member="c"]') || {dataset: {}}).dataset.state || ""`) == "failed"
	})
	if got := eval(`document.querySelector('#members tbody tr[data-member="c"]').cells[2].innerText`); got != wantC {
		t.Fatalf("the page lists failed c with %s objects, want %s (none taken over yet)", got, wantC)
	}
	if got := eval(`String(document.querySelector('#objects [data-host="c"]').classList.contains("failed"))`); got != "true" {
		t.Fatalf("c's bar is not marked failed")
	}
	testutil.WaitFor(t, "the Events panel to list c's failure", func() bool {
		return eval(`String(!!document.querySelector('#timeline tbody tr[data-kind="failed"][data-host="c"]'))`) == "true"
	})

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("BERTH_TEST_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "dashboard.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
}
