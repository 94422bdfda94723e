package admin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/actor/admin"
	"github.com/berthrt/berth/examples/counter"
	"github.com/berthrt/berth/internal/localnet"
	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/relocation"
)

const writeToken = "the-write-token-of-enough-bytes"

// With a write credential set, the admin credential reads and only reads:
// a route that changes the cluster answers it 403 (and changes nothing),
// the write credential both reads and writes, and each write request's
// audit line names the credential it carried. New refuses a write
// credential that is short or the same as the read one.
func TestAReadCredentialReadsAndOnlyTheWriteCredentialWrites(t *testing.T) {
	net := localnet.New(localnet.Options{})
	hs := startHosts(t, net, nil, "a", "b")
	audit := &testutil.Buffer{}
	for _, bad := range []string{"short", token} {
		if _, err := admin.New(admin.Options{Host: hs[0], Token: token, WriteToken: bad}); err == nil {
			t.Fatalf("New took the write credential %q", bad)
		}
	}
	h, err := admin.New(admin.Options{Host: hs[0], Membership: net.Membership, Store: net.Store, Token: token, WriteToken: writeToken,
		AllowWrites: true, Audit: slog.New(slog.NewTextHandler(audit, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	ref := actor.Ref{Kind: counter.Name, ID: "rw"}
	if _, err := actor.Ask[counter.Read, counter.Counter](bg, hs[0], ref, counter.Read{}); err != nil {
		t.Fatal(err)
	}
	for _, cred := range []string{token, writeToken} {
		if code := call(t, srv, "GET", "/admin/v1/stats", cred, nil); code != http.StatusOK {
			t.Fatalf("a read with the %q credential: %d", cred, code)
		}
	}
	var e admin.Error
	if code := call(t, srv, "POST", "/admin/v1/move/counter/rw?to=b", token, &e); code != http.StatusForbidden || !strings.Contains(e.Error, "write credential") {
		t.Fatalf("a move with the read credential: %d %+v, want 403 naming the write credential", code, e)
	}
	if loc, err := hs[0].Locate(bg, ref); err != nil || loc.Host != "a" {
		t.Fatalf("after a refused move the object is at %+v, %v", loc, err)
	}
	if code := call(t, srv, "POST", "/admin/v1/move/counter/rw?to=b", writeToken, nil); code != http.StatusOK {
		t.Fatalf("a move with the write credential: %d", code)
	}
	lines := strings.Split(strings.TrimSpace(audit.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "credential=read") || !strings.Contains(lines[0], "status=403") ||
		!strings.Contains(lines[1], "credential=write") || !strings.Contains(lines[1], "status=200") {
		t.Fatalf("audit lines:\n%s\nwant the refused read-credential move, then the write-credential one", audit)
	}
}

// RequireToken lets through a request that carries one of its credentials
// as a Bearer token or as HTTP Basic's password (a browser's way, with a
// page's event stream), and answers every other 401 with a Basic
// challenge, before the handler behind it sees it.
func TestRequireTokenTakesBearerOrBasicAndRefusesTheRest(t *testing.T) {
	var served atomic.Int32
	h, err := admin.RequireToken(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { served.Add(1) }), token, writeToken)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RequireToken(h, "short"); err == nil {
		t.Fatal("RequireToken took a short credential")
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	try := func(set func(*http.Request)) int {
		req, _ := http.NewRequest("GET", srv.URL+"/metrics", nil)
		set(req)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic") {
			t.Errorf("a 401 without a Basic challenge: %q", resp.Header.Get("WWW-Authenticate"))
		}
		return resp.StatusCode
	}
	for name, set := range map[string]func(*http.Request){
		"bearer read":  func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) },
		"bearer write": func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+writeToken) },
		"basic":        func(r *http.Request) { r.SetBasicAuth("operator", token) },
	} {
		if code := try(set); code != http.StatusOK {
			t.Errorf("%s: %d", name, code)
		}
	}
	for name, set := range map[string]func(*http.Request){
		"none":         func(*http.Request) {},
		"wrong bearer": func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token+"x") },
		"wrong basic":  func(r *http.Request) { r.SetBasicAuth(token, "nope") },
	} {
		if code := try(set); code != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401", name, code)
		}
	}
	if served.Load() != 3 {
		t.Fatalf("the handler served %d requests, want the 3 with a credential", served.Load())
	}
}

// countingStore counts the full-table counts the dashboard makes.
type countingStore struct {
	relocation.Store
	n atomic.Int64
}

func (s *countingStore) CountObjects(ctx context.Context) ([]relocation.ObjectCount, error) {
	s.n.Add(1)
	return s.Store.(relocation.Counter).CountObjects(ctx)
}

// However many pages watch, the dashboard reads one snapshot per
// interval — one full-table count — and hands it to all of them (under
// one Seq); past MaxWatchers a page is answered 503, naming the limit;
// and once the last page leaves, nothing runs. Before, each page cost a
// count a second.
func TestTheDashboardReadsOneSnapshotPerIntervalForAllItsWatchers(t *testing.T) {
	net := localnet.New(localnet.Options{})
	hs := startHosts(t, net, nil, "a")
	store := &countingStore{Store: net.Store}
	const watchers = 6
	d, err := admin.Dashboard(admin.DashboardOptions{Host: hs[0], Membership: net.Membership, Store: store,
		Every: 20 * time.Millisecond, MaxWatchers: watchers})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	defer srv.Close()
	ctx, cancel := context.WithCancel(bg)
	type seen struct {
		seqs  []uint64
		times map[uint64]time.Time
	}
	got := make([]seen, watchers)
	checked := make(chan struct{}) // the seventh was refused: the six may leave
	release := sync.OnceFunc(func() { close(checked) })
	defer release() // on a failure too, before the server closes
	var wg sync.WaitGroup
	for i := range watchers {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/events", nil)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("watcher %d: %d", i, resp.StatusCode)
		}
		got[i].times = map[uint64]time.Time{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer resp.Body.Close()
			defer func() { <-checked }()
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(nil, 1<<20)
			for len(got[i].seqs) < 5 && sc.Scan() {
				if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
					var s admin.Snapshot
					if err := json.Unmarshal([]byte(data), &s); err != nil {
						t.Error(err)
						return
					}
					got[i].seqs = append(got[i].seqs, s.Seq)
					got[i].times[s.Seq] = s.Time
				}
			}
		}()
	}
	// One more is refused while the six watch.
	var e admin.Error
	req, _ := http.NewRequest("GET", srv.URL+"/events", nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(e.Error, "MaxWatchers") {
		t.Fatalf("a seventh watcher: %d %+v, want 503 naming MaxWatchers", resp.StatusCode, e)
	}
	release()
	wg.Wait()
	cancel()
	var maxSeq uint64
	for i, g := range got {
		if len(g.seqs) < 5 {
			t.Fatalf("watcher %d got %d snapshots", i, len(g.seqs))
		}
		for j, seq := range g.seqs {
			if j > 0 && seq <= g.seqs[j-1] {
				t.Fatalf("watcher %d: snapshots %v not in order", i, g.seqs)
			}
			maxSeq = max(maxSeq, seq)
			for _, o := range got {
				if at, ok := o.times[seq]; ok && !at.Equal(g.times[seq]) {
					t.Fatalf("snapshot %d read at %v for one watcher and %v for another", seq, g.times[seq], at)
				}
			}
		}
	}
	if n := store.n.Load(); n > int64(maxSeq)+1 {
		t.Fatalf("%d counts for %d watchers that saw snapshots up to %d: want one per snapshot", n, watchers, maxSeq)
	}
	srv.Close() // the handlers have returned: the last one ended the loop
	after := store.n.Load()
	for _, h := range hs {
		h.Close()
	}
	testutil.CheckNoGoroutines(t)
	if n := store.n.Load(); n != after {
		t.Fatalf("%d counts after every watcher left", n-after)
	}
}
