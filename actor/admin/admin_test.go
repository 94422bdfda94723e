package admin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/actor/admin"
	"github.com/berthrt/berth/examples/counter"
	"github.com/berthrt/berth/internal/localnet"
	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/relocation"
)

const token = "a-token-of-enough-bytes"

var bg = context.Background()

// startHosts starts one host per name on net with the counter kind (the
// first with observer obs, if not nil), and waits until each knows the
// others.
func startHosts(t *testing.T, net *localnet.Net, obs actor.Observer, names ...string) []*actor.Host {
	t.Helper()
	var hs []*actor.Host
	for i, name := range names {
		cfg := actor.Config{Name: name, Transport: net.Transport, Store: net.Store, Membership: net.Membership, Logger: quiet()}
		if i == 0 && obs != nil {
			cfg.Observer = obs
		}
		h, err := actor.NewHost(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Register(counter.Kind()); err != nil {
			t.Fatal(err)
		}
		if err := h.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		hs = append(hs, h)
	}
	testutil.WaitFor(t, "the hosts to know each other", func() bool {
		for _, h := range hs {
			if len(h.Peers()) != len(hs)-1 {
				return false
			}
		}
		return true
	})
	return hs
}

// cluster starts hosts a and b on one in-process network with the
// counter kind, and serves a's admin API (writes as allowed) on a test
// server.
func cluster(t *testing.T, allowWrites bool) (a, b *actor.Host, net *localnet.Net, srv *httptest.Server) {
	t.Helper()
	a, b, net, srv, _ = auditedCluster(t, allowWrites)
	return a, b, net, srv
}

// auditedCluster is cluster, with the API's audit lines kept in audit.
func auditedCluster(t *testing.T, allowWrites bool) (a, b *actor.Host, net *localnet.Net, srv *httptest.Server, audit *testutil.Buffer) {
	t.Helper()
	net = localnet.New(localnet.Options{})
	hs := startHosts(t, net, nil, "a", "b")
	audit = &testutil.Buffer{}
	handler, err := admin.New(admin.Options{Host: hs[0], Membership: net.Membership, Store: net.Store, Token: token, AllowWrites: allowWrites,
		Audit: slog.New(slog.NewTextHandler(audit, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv = httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return hs[0], hs[1], net, srv, audit
}

// Every request of a route that changes the cluster leaves one audit line
// when it ends — refused, failed or done — with its route, object and
// target, the remote address, its status and error; a read leaves none.
func TestEveryRequestToChangeTheClusterLeavesAnAuditLine(t *testing.T) {
	for _, allowed := range []bool{false, true} {
		a, _, _, srv, audit := auditedCluster(t, allowed)
		ref := actor.Ref{Kind: counter.Name, ID: "audited"}
		if _, err := actor.Ask[counter.Read, counter.Counter](bg, a, ref, counter.Read{}); err != nil {
			t.Fatal(err)
		}
		call(t, srv, "GET", "/admin/v1/stats", token, nil)
		code := call(t, srv, "POST", "/admin/v1/move/counter/audited?to=b", token, nil)
		call(t, srv, "POST", "/admin/v1/move/counter/audited?to=nowhere", token, nil)
		lines := strings.Split(strings.TrimSpace(audit.String()), "\n")
		if len(lines) != 2 {
			t.Fatalf("allowed %v: %d audit lines for two write requests and a read:\n%s", allowed, len(lines), audit)
		}
		for i, want := range []string{"status=" + strconv.Itoa(code), "to=nowhere"} {
			for _, w := range []string{"route=\"POST /admin/v1/move/counter/audited\"", "remote=127.0.0.1:", want} {
				if !strings.Contains(lines[i], w) {
					t.Errorf("allowed %v: audit line %d %q lacks %s", allowed, i, lines[i], w)
				}
			}
		}
		if !allowed && (code != http.StatusForbidden || !strings.Contains(lines[0], "status=403")) {
			t.Errorf("a refused move: %d, audit %q", code, lines[0])
		}
		if allowed && (code != http.StatusOK || !strings.Contains(lines[1], "error=")) {
			t.Errorf("a move: %d; the failed one's audit line %q names no error", code, lines[1])
		}
	}
}

// call makes a request with the credential (cred "" sends none) and
// decodes a JSON answer into out (if not nil); it returns the status.
func call(t *testing.T, srv *httptest.Server, method, path, cred string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cred != "" {
		req.Header.Set("Authorization", "Bearer "+cred)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: %d, the answer is no JSON: %v", method, path, resp.StatusCode, err)
		}
	}
	return resp.StatusCode
}

// Every route refuses a request without the admin credential, or with a
// wrong one, before it does anything.
func TestEveryRouteNeedsTheAdminCredential(t *testing.T) {
	a, _, _, srv := cluster(t, true)
	for _, r := range []struct{ method, path string }{
		{"GET", "/admin/v1/members"}, {"GET", "/admin/v1/objects"}, {"GET", "/admin/v1/locate/counter/1"}, {"GET", "/admin/v1/inspect/counter/1"}, {"GET", "/admin/v1/busiest"},
		{"GET", "/admin/v1/stats"}, {"GET", "/admin/v1/moves"}, {"GET", "/admin/v1/events"}, {"GET", "/admin/v1/events/stream"}, {"POST", "/admin/v1/move/counter/1?to=b"}, {"POST", "/admin/v1/drain"},
	} {
		for _, cred := range []string{"", "wrong-token-of-enough-bytes", token + "x"} {
			var e admin.Error
			if code := call(t, srv, r.method, r.path, cred, &e); code != http.StatusUnauthorized || e.Kind != "unauthorized" {
				t.Errorf("%s %s with credential %q: %d %+v, want 401", r.method, r.path, cred, code, e)
			}
		}
	}
	if a.DrainState() != actor.Serving {
		t.Fatalf("a refused drain ran: a is %v", a.DrainState())
	}
	if code := call(t, srv, "GET", "/admin/v1/stats", token, nil); code != http.StatusOK {
		t.Fatalf("stats with the credential: %d", code)
	}
}

// Routes that change the cluster answer 403 unless writes are allowed,
// and change nothing.
func TestRoutesThatChangeTheClusterAreOffUnlessAllowed(t *testing.T) {
	a, _, net, srv := cluster(t, false)
	ref := actor.Ref{Kind: counter.Name, ID: "x"}
	if _, err := actor.Ask[counter.Read, counter.Counter](bg, a, ref, counter.Read{}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/admin/v1/move/counter/x?to=b", "/admin/v1/drain"} {
		var e admin.Error
		if code := call(t, srv, "POST", path, token, &e); code != http.StatusForbidden || e.Kind != "forbidden" {
			t.Errorf("POST %s: %d %+v, want 403", path, code, e)
		}
	}
	if row, err := net.Store.Get(bg, relocation.Object{Kind: ref.Kind, ID: ref.ID}); err != nil || row.Host != "a" {
		t.Fatalf("the object after a refused move: %+v, %v; want it on a", row, err)
	}
	if a.DrainState() != actor.Serving {
		t.Fatalf("after a refused drain a is %v", a.DrainState())
	}
}

// The read routes describe the cluster: its members, the objects on each
// host by kind, where one object lives, and this host's counters.
func TestTheReadRoutesDescribeTheCluster(t *testing.T) {
	a, b, _, srv := cluster(t, false)
	onA, onB := 0, 0
	for i := range 20 {
		ref := actor.Ref{Kind: counter.Name, ID: strconv.Itoa(i)}
		via := a
		if i%2 == 1 {
			via = b
		}
		if _, err := actor.Ask[counter.Read, counter.Counter](bg, via, ref, counter.Read{}); err != nil {
			t.Fatal(err)
		}
		loc, err := a.Locate(bg, ref)
		if err != nil {
			t.Fatal(err)
		}
		if loc.Host == "a" {
			onA++
		} else {
			onB++
		}
	}
	var ms admin.Members
	if code := call(t, srv, "GET", "/admin/v1/members", token, &ms); code != http.StatusOK || ms.Self != "a" || len(ms.Members) != 2 ||
		ms.Members[0].Name != "a" || ms.Members[1].Name != "b" || ms.Members[0].State != "serving" || ms.Members[0].LeaseGen == 0 {
		t.Fatalf("members: %d %+v", code, ms)
	}
	var objs admin.Objects
	if code := call(t, srv, "GET", "/admin/v1/objects", token, &objs); code != http.StatusOK || objs.Total != 20 {
		t.Fatalf("objects: %d %+v, want 20 in all", code, objs)
	}
	want := map[string]int{"a": onA, "b": onB}
	for _, c := range objs.Counts {
		if c.Kind != counter.Name || c.Objects != want[c.Host] {
			t.Fatalf("objects: %+v; want a %d and b %d of kind %s", objs.Counts, onA, onB, counter.Name)
		}
	}
	var loc admin.Location
	if code := call(t, srv, "GET", "/admin/v1/locate/counter/1", token, &loc); code != http.StatusOK || loc.Kind != counter.Name || loc.ID != "1" || loc.Host == "" || loc.Asked != "a" {
		t.Fatalf("locate: %d %+v", code, loc)
	}
	var st admin.Stats
	if code := call(t, srv, "GET", "/admin/v1/stats", token, &st); code != http.StatusOK || st.Host != "a" || st.Ready != "ok" ||
		st.DrainState != "serving" || st.Stats.OwnersActive != onA {
		t.Fatalf("stats: %d %+v; want a ready, serving, %d objects", code, st, onA)
	}
}

// The moves route lists the moves this host was the source of, oldest
// first, with their outcome; after= a move's seq lists only the newer
// ones. It is a read route: on without writes.
func TestTheMovesRouteListsTheMovesFromThisHost(t *testing.T) {
	a, _, _, srv := cluster(t, false)
	var ms admin.Moves
	if code := call(t, srv, "GET", "/admin/v1/moves", token, &ms); code != http.StatusOK || ms.Host != "a" || ms.Moves == nil || len(ms.Moves) != 0 {
		t.Fatalf("moves before any: %d %+v; want an empty list", code, ms)
	}
	ids := moveObjects(t, a, "b", 2)
	if code := call(t, srv, "GET", "/admin/v1/moves", token, &ms); code != http.StatusOK || len(ms.Moves) != 2 {
		t.Fatalf("moves: %d %+v; want the two", code, ms)
	}
	for i, m := range ms.Moves {
		if m.Seq != uint64(i+1) || m.Kind != counter.Name || m.ID != ids[i] || m.From != "a" || m.To != "b" || m.Outcome != "moved" ||
			m.Reason != "" || m.PauseUS < 0 || m.Ended.Before(m.Started) {
			t.Fatalf("move %d: %+v; want #%d, %s/%s from a to b, moved", i, m, i+1, counter.Name, ids[i])
		}
	}
	var newer admin.Moves
	if code := call(t, srv, "GET", "/admin/v1/moves?after=1", token, &newer); code != http.StatusOK || len(newer.Moves) != 1 || newer.Moves[0].ID != ids[1] {
		t.Fatalf("moves?after=1: %d %+v; want the second only", code, newer)
	}
	var e admin.Error
	if code := call(t, srv, "GET", "/admin/v1/moves?after=x", token, &e); code != http.StatusBadRequest || e.Kind != "invalid operation" {
		t.Fatalf("moves?after=x: %d %+v; want 400", code, e)
	}
}

// The inspect route answers from the object's owner (a turn of its
// own there): where it runs, the messages it ran, its kind's summary, and
// its moves from the owner and from the asked host. An object that runs
// nowhere is 404, and is not activated.
func TestTheInspectRouteAnswersFromTheObjectsOwner(t *testing.T) {
	a, b, _, srv := cluster(t, false)
	ids := moveObjects(t, a, "b", 1) // asked once on a, then moved to b
	ref := actor.Ref{Kind: counter.Name, ID: ids[0]}
	for seq := 1; seq <= 3; seq++ {
		if err := actor.Tell(bg, a, ref, counter.Add{Sender: "s", Seq: seq}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := actor.Ask[counter.Read, counter.Counter](bg, a, ref, counter.Read{}); err != nil {
		t.Fatal(err)
	}
	var in admin.Inspection
	if code := call(t, srv, "GET", "/admin/v1/inspect/counter/"+ref.ID, token, &in); code != http.StatusOK {
		t.Fatalf("inspect: %d %+v", code, in)
	}
	loc, err := b.Locate(bg, ref)
	if err != nil {
		t.Fatal(err)
	}
	if in.Kind != ref.Kind || in.ID != ref.ID || in.Host != "b" || in.Asked != "a" || in.OwnerGen != loc.OwnerGeneration || in.Turns != 4 ||
		in.Queued != 0 || in.LastTurn.IsZero() || in.Summary != "3 adds from 1 senders, 0 out of order" {
		t.Fatalf("inspect: %+v; want it on b (owner gen %d), asked at a, 4 messages run, the counter's summary", in, loc.OwnerGeneration)
	}
	if len(in.Moves) != 1 || in.Moves[0].From != "a" || in.Moves[0].To != "b" || in.Moves[0].Outcome != "moved" {
		t.Fatalf("inspect's moves: %+v; want the move from a to b (in a's log)", in.Moves)
	}
	var e admin.Error
	if code := call(t, srv, "GET", "/admin/v1/inspect/counter/never", token, &e); code != http.StatusNotFound || e.Kind != "not found" {
		t.Fatalf("inspect of an object that never ran: %d %+v; want 404", code, e)
	}
	if _, err := a.Locate(bg, actor.Ref{Kind: counter.Name, ID: "never"}); !errors.Is(err, actor.ErrNotActive) {
		t.Fatalf("after inspecting it, an object that never ran: %v; want ErrNotActive (not activated)", err)
	}
}

// The busiest route lists the objects of the asked host that ran the most
// messages in its window, and what all of them ran; a bad n or window,
// or a window not below the API's timeout, is 400.
func TestTheBusiestRouteListsTheObjectsThatRanTheMost(t *testing.T) {
	a, _, _, srv := cluster(t, false)
	ref := actor.Ref{Kind: counter.Name, ID: "busy"}
	if _, err := actor.Ask[counter.Read, counter.Counter](bg, a, ref, counter.Read{}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	sent := make(chan error, 1)
	go func() {
		for seq := 1; ; seq++ {
			select {
			case <-stop:
				sent <- nil
				return
			default:
			}
			if err := actor.Tell(bg, a, ref, counter.Add{Sender: "s", Seq: seq}); err != nil {
				sent <- err
				return
			}
		}
	}()
	var top admin.Busiest
	testutil.WaitFor(t, "the busiest route to list the object sent to", func() bool {
		top = admin.Busiest{}
		if code := call(t, srv, "GET", "/admin/v1/busiest?n=1&window=200ms", token, &top); code != http.StatusOK {
			t.Fatalf("busiest: %d %+v", code, top)
		}
		return len(top.Objects) == 1 && top.Objects[0].ID == ref.ID
	})
	close(stop)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if o := top.Objects[0]; top.Host != "a" || top.WindowMS != 200 || o.Kind != ref.Kind || o.Messages == 0 || top.Messages < o.Messages ||
		o.PerSecond != float64(o.Messages)/0.2 {
		t.Fatalf("busiest: %+v; want a's, over 200 ms, the object sent to first, with its messages and their rate", top)
	}
	for _, q := range []string{"n=0", "n=x", "window=x", "window=0s", "window=10s"} {
		var e admin.Error
		if code := call(t, srv, "GET", "/admin/v1/busiest?"+q, token, &e); code != http.StatusBadRequest || e.Kind != "invalid operation" {
			t.Fatalf("busiest?%s: %d %+v; want 400", q, code, e)
		}
	}
}

// The members route adds what the asked host saw: a host whose run
// failed is listed as failed (the membership no longer lists it) until
// a run of its name joins again.
func TestTheMembersRouteListsAFailedHostUntilItJoinsAgain(t *testing.T) {
	_, b, _, srv := cluster(t, false)
	if _, err := actor.Ask[counter.Read, counter.Counter](bg, b, actor.Ref{Kind: counter.Name, ID: "on-b"}, counter.Read{}); err != nil {
		t.Fatal(err)
	}
	b.Close() // it leaves without handing its work on: a failure
	var ms admin.Members
	testutil.WaitFor(t, "a to list b as failed", func() bool {
		ms = admin.Members{}
		if code := call(t, srv, "GET", "/admin/v1/members", token, &ms); code != http.StatusOK {
			t.Fatalf("members: %d", code)
		}
		i := slices.IndexFunc(ms.Members, func(m admin.Member) bool { return m.Name == "b" })
		return i >= 0 && ms.Members[i].State == "failed" && ms.Members[i].Seen == "failed"
	})
}

// The events route lists the host's event log, oldest first, and after a
// seq only the newer events: here b's join as a saw it, and objects
// moved in from b.
func TestTheEventsRouteListsTheHostsEventLog(t *testing.T) {
	_, b, _, srv := cluster(t, false)
	var es admin.Events
	if code := call(t, srv, "GET", "/admin/v1/events", token, &es); code != http.StatusOK || es.Host != "a" || es.Events == nil {
		t.Fatalf("events: %d %+v", code, es)
	}
	joined := slices.IndexFunc(es.Events, func(e actor.Event) bool { return e.Kind == actor.EventJoined && e.Host == "b" })
	if joined < 0 {
		t.Fatalf("events: %+v; want b's join", es.Events)
	}
	last := es.Events[len(es.Events)-1].Seq
	moved := len(moveObjects(t, b, "a", 3))
	var newer admin.Events
	deadline := time.Now().Add(time.Minute)
	for {
		newer = admin.Events{}
		if code := call(t, srv, "GET", "/admin/v1/events?after="+strconv.FormatUint(last, 10), token, &newer); code != http.StatusOK {
			t.Fatalf("events?after=%d: %d", last, code)
		}
		n := 0
		for _, e := range newer.Events {
			if e.Seq <= last {
				t.Fatalf("events?after=%d lists event %d", last, e.Seq)
			}
			if e.Kind == actor.EventMovedIn && e.Host == "b" {
				n += e.Count
			}
		}
		if n == moved {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events?after=%d: %+v; want %d objects moved in from b", last, newer.Events, moved)
		}
		time.Sleep(50 * time.Millisecond) // the log counts a burst once a second: ask again
	}
	var e admin.Error
	if code := call(t, srv, "GET", "/admin/v1/events?after=-1", token, &e); code != http.StatusBadRequest || e.Kind != "invalid operation" {
		t.Fatalf("events?after=-1: %d %+v; want 400", code, e)
	}
}

// The events stream sends the events the host has, then each new one as
// it is recorded, as server-sent events numbered by their Seq.
func TestTheEventsStreamSendsEachNewEvent(t *testing.T) {
	_, b, _, srv := cluster(t, false)
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+"/admin/v1/events/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events/stream: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	lines := bufio.NewScanner(resp.Body)
	// next reads the stream until an event that want accepts.
	next := func(what string, want func(actor.Event) bool) actor.Event {
		t.Helper()
		var id string
		for lines.Scan() {
			line := lines.Text()
			if v, ok := strings.CutPrefix(line, "id: "); ok {
				id = v
				continue
			}
			v, ok := strings.CutPrefix(line, "data: ")
			if !ok {
				continue
			}
			var e actor.Event
			if err := json.Unmarshal([]byte(v), &e); err != nil || strconv.FormatUint(e.Seq, 10) != id {
				t.Fatalf("events/stream sent %q (id %s): %v", v, id, err)
			}
			if want(e) {
				return e
			}
		}
		t.Fatalf("events/stream ended before %s: %v", what, lines.Err())
		return actor.Event{}
	}
	next("b's join", func(e actor.Event) bool { return e.Kind == actor.EventJoined && e.Host == "b" })
	// A move from b to a: a records it, and the stream sends it.
	moveObjects(t, b, "a", 1)
	if e := next("the object moved in from b", func(e actor.Event) bool { return e.Kind == actor.EventMovedIn }); e.Host != "b" || e.Count != 1 {
		t.Fatalf("events/stream: %+v, want one object moved in from b", e)
	}
}

// moveObjects activates counters through from until n of them live on
// it, and moves each to host to; it returns their ids, in order.
func moveObjects(t *testing.T, from *actor.Host, to string, n int) []string {
	t.Helper()
	var ids []string
	for i := 0; len(ids) < n; i++ {
		ref := actor.Ref{Kind: counter.Name, ID: strconv.Itoa(i)}
		if _, err := actor.Ask[counter.Read, counter.Counter](bg, from, ref, counter.Read{}); err != nil {
			t.Fatal(err)
		}
		if loc, _ := from.Locate(bg, ref); loc.Host == from.Name() {
			if err := from.Relocate(bg, ref, to); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, ref.ID)
		}
	}
	return ids
}

// Errors carry their payload kind and the status it maps to.
func TestErrorsCarryTheirKindAndAStatusFromIt(t *testing.T) {
	_, _, _, srv := cluster(t, true)
	for _, c := range []struct {
		method, path string
		code         int
		kind         string
	}{
		{"GET", "/admin/v1/locate/nokind/1", http.StatusNotFound, "not found"},
		{"GET", "/admin/v1/locate/counter/never", http.StatusNotFound, "not found"},
		{"POST", "/admin/v1/move/counter/1", http.StatusBadRequest, "invalid operation"},
		{"POST", "/admin/v1/move/counter/never?to=b", http.StatusNotFound, ""},
	} {
		var e admin.Error
		code := call(t, srv, c.method, c.path, token, &e)
		if code != c.code || e.Error == "" || (c.kind != "" && e.Kind != c.kind) {
			t.Errorf("%s %s: %d %+v; want %d %q", c.method, c.path, code, e, c.code, c.kind)
		}
	}
}

// With writes allowed, move relocates an object and drain drains the host
// the API speaks for: its objects go to the others, and it stops.
func TestMoveRelocatesAnObjectAndDrainDrainsTheHost(t *testing.T) {
	a, b, net, srv := cluster(t, true)
	ref := actor.Ref{Kind: counter.Name, ID: "x"}
	if err := actor.Tell(bg, a, ref, counter.Add{Sender: "s", Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := actor.Ask[counter.Read, counter.Counter](bg, a, ref, counter.Read{}); err != nil {
		t.Fatal(err)
	}
	from, _ := a.Locate(bg, ref)
	to := "b"
	if from.Host == "b" {
		to = "a"
	}
	var d admin.Done
	if code := call(t, srv, "POST", "/admin/v1/move/counter/x?to="+to, token, &d); code != http.StatusOK || !strings.Contains(d.Done, "moved") {
		t.Fatalf("move: %d %+v", code, d)
	}
	if row, err := net.Store.Get(bg, relocation.Object{Kind: ref.Kind, ID: ref.ID}); err != nil || row.Host != to {
		t.Fatalf("after the move: %+v, %v; want it on %s", row, err, to)
	}
	if c, err := actor.Ask[counter.Read, counter.Counter](bg, b, ref, counter.Read{}); err != nil || c.Count["s"] != 1 {
		t.Fatalf("the moved object: %+v, %v; want its state", c, err)
	}
	for i := range 10 {
		if err := actor.Tell(bg, a, actor.Ref{Kind: counter.Name, ID: "d" + strconv.Itoa(i)}, counter.Add{Sender: "s", Seq: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if code := call(t, srv, "POST", "/admin/v1/drain", token, &d); code != http.StatusOK || !strings.Contains(d.Done, "drained a") {
		t.Fatalf("drain: %d %+v", code, d)
	}
	select {
	case <-a.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("a still runs 30 s after its drain returned")
	}
	for i := range 10 {
		c, err := actor.Ask[counter.Read, counter.Counter](bg, b, actor.Ref{Kind: counter.Name, ID: "d" + strconv.Itoa(i)}, counter.Read{})
		if err != nil || c.Count["s"] != 1 {
			t.Fatalf("object d%d after the drain: %+v, %v; want its state on b", i, c, err)
		}
	}
}

// New refuses Options without a host or with a short token.
func TestNewNeedsAHostAndATokenOfSixteenBytes(t *testing.T) {
	h, err := actor.NewHost(actor.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, o := range []admin.Options{{Token: token}, {Host: h, Token: "short"}} {
		if _, err := admin.New(o); !errors.Is(err, admin.ErrBadOptions) || !errors.Is(err, actor.InvalidOperation) {
			t.Errorf("New(%+v) = %v, want ErrBadOptions (InvalidOperation)", o, err)
		}
	}
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// A drain asked for goes on to its end when the asker leaves before it is
// done: the host does not stay relocating.
func TestADrainGoesOnWhenItsAskerLeaves(t *testing.T) {
	a, _, net, srv := cluster(t, true)
	if _, err := actor.Ask[counter.Read, counter.Counter](bg, a, actor.Ref{Kind: counter.Name, ID: "x"}, counter.Read{}); err != nil {
		t.Fatal(err)
	}
	net.Break("a", "b") // the drain's move waits for the link
	ctx, cancel := context.WithCancel(bg)
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/admin/v1/drain", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	asked := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		asked <- err
	}()
	testutil.WaitFor(t, "the drain to begin", func() bool { return a.DrainState() != actor.Serving })
	cancel() // the asker leaves
	if err := <-asked; err == nil {
		t.Fatal("the request ended with an answer before the drain could")
	}
	net.Heal("a", "b")
	select {
	case <-a.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("a is %v 30 s after its asker left; want the drain finished and a stopped", a.DrainState())
	}
}
