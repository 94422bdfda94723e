package admin

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/relocation"
)

//go:embed dashboard
var dashboardFiles embed.FS

// DashboardOptions configure Dashboard.
type DashboardOptions struct {
	// Host is the host the page speaks for (required).
	Host *actor.Host
	// Membership lists the members (nil: none listed).
	Membership membership.Membership
	// Store counts the objects per host when it is a relocation.Counter.
	Store relocation.Store
	// Messages, if set, returns a count of the messages this host has
	// admitted that only grows (metrics.Metrics.Admitted is one): the page
	// shows its rate.
	Messages func() int64
	// Every is how often a watching page gets a snapshot (default 1 s).
	// One snapshot is read per interval, however many pages watch.
	Every time.Duration
	// MaxWatchers bounds the pages watching at once (default 16): one
	// more is answered 503, naming the limit.
	MaxWatchers int
}

// DefaultMaxWatchers is DashboardOptions.MaxWatchers' default.
const DefaultMaxWatchers = 16

// Snapshot is what a watching page receives, every DashboardOptions.Every.
type Snapshot struct {
	// Seq numbers the snapshots the host read for its watchers: pages
	// watching at once get the same snapshot under the same Seq (its
	// moves, events and rates are each page's own). A page that reads
	// slowly skips to the latest.
	Seq       uint64        `json:"seq"`
	Host      string        `json:"host"`
	Time      time.Time     `json:"time"`
	Members   []Member      `json:"members"`
	Objects   []ObjectCount `json:"objects"`
	Total     int           `json:"total"`
	Here      int           `json:"here"`        // objects with an owner on this host
	Moves     int64         `json:"moves"`       // moves this host took part in, ever
	UnderWay  int           `json:"under_way"`   // moves this host takes part in now
	MovesRate float64       `json:"moves_per_s"` // since the last snapshot
	MsgRate   float64       `json:"messages_per_s"`
	Pauses    PauseSummary  `json:"pauses"`
	// RecentMoves are the moves this host was the source of that ended
	// since the stream's previous snapshot, oldest first: at most the
	// last 256 (actor.Host.RecentMoves keeps no more; a drain may end
	// more between two snapshots). A stream's first snapshot carries the
	// last 50. Moves to this host are in their sources' lists.
	RecentMoves []Move `json:"recent_moves"`
	// Events are the host's events (actor.Host.Events) recorded since
	// the stream's previous snapshot, oldest first; a stream's first
	// snapshot carries the last 50.
	Events []actor.Event `json:"events"`
	// Unreachable are the members whose link to this host broke and
	// whose lease it is checking: a crash, until the lease runs out.
	Unreachable []string `json:"unreachable"`
	// Failed are the hosts whose run this host saw fail and that no run
	// of the name joined since. Their objects still count in Objects
	// until they are taken over (each at its next message).
	Failed []string `json:"failed"`
	Errors []string `json:"errors,omitempty"` // what could not be read this time
}

// firstMoves is how many of the last moves a stream's first snapshot
// carries: as many as the page lists.
const firstMoves = 50

// PauseSummary is the distribution of the recent moves' pauses
// (actor.Host.RecentPauses), in microseconds.
type PauseSummary struct {
	Count int   `json:"count"`
	P50   int64 `json:"p50_us"`
	P99   int64 `json:"p99_us"`
	Max   int64 `json:"max_us"`
	// Buckets counts the pauses by power of two of microseconds: bucket
	// i holds pauses below 2^i µs (the last one, the rest).
	Buckets []int `json:"buckets"`
}

// Dashboard returns a handler serving a live page of the cluster as host
// sees it: GET / is the page (embedded; no build step) and GET /events a
// stream of Snapshots (server-sent events) while the page watches. One
// snapshot is read per DashboardOptions.Every, however many pages watch
// (at most MaxWatchers), and nothing runs while nobody watches: the
// reading loop ends with the last watcher's request. It is read-only; it
// shows what /metrics shows (names and counts), so serve it where
// /metrics is served, behind the same credential (RequireToken).
func Dashboard(o DashboardOptions) (http.Handler, error) {
	if o.Host == nil {
		return nil, ErrBadOptions
	}
	if o.Every <= 0 {
		o.Every = time.Second
	}
	if o.MaxWatchers <= 0 {
		o.MaxWatchers = DefaultMaxWatchers
	}
	static, err := fs.Sub(dashboardFiles, "dashboard")
	if err != nil {
		return nil, err
	}
	h := &hub{o: o}
	mux := http.NewServeMux()
	mux.Handle("GET /", http.FileServerFS(static))
	mux.HandleFunc("GET /events", h.stream)
	return mux, nil
}

// hub reads one snapshot per interval while any page watches, and hands
// the latest to every watcher. Lock: mu, a leaf (no call under it).
type hub struct {
	o        DashboardOptions
	mu       sync.Mutex
	watchers int           // guarded by mu
	stop     chan struct{} // closed to end the reading loop; guarded by mu
	cur      *frame        // the latest snapshot read (nil: none yet); guarded by mu
	changed  chan struct{} // closed when cur changes; guarded by mu
	loopDone chan struct{} // closed when the current reading loop has ended; guarded by mu
}

// frame is one snapshot the hub read, with the message count then.
type frame struct {
	s    Snapshot
	msgs int64
}

// join counts a watcher, starting the reading loop for the first, and
// reports false (counting nothing) past MaxWatchers.
func (h *hub) join() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.watchers >= h.o.MaxWatchers {
		return false
	}
	h.watchers++
	if h.watchers == 1 {
		h.stop, h.changed, h.cur = make(chan struct{}), make(chan struct{}), nil
		done := make(chan struct{})
		h.loopDone = done
		go h.loop(h.stop, done)
	}
	return true
}

// leave ends a watcher; the last one ends the reading loop and waits for
// it.
func (h *hub) leave() {
	h.mu.Lock()
	h.watchers--
	if h.watchers > 0 {
		h.mu.Unlock()
		return
	}
	stop, done := h.stop, h.loopDone
	h.stop, h.cur = nil, nil
	h.mu.Unlock()
	close(stop)
	<-done
}

// loop reads a snapshot every o.Every until stop closes, and publishes
// each (while its loop is the current one).
func (h *hub) loop(stop, done chan struct{}) {
	defer close(done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	tick := time.NewTicker(h.o.Every)
	defer tick.Stop()
	for seq := uint64(1); ; seq++ {
		s := snapshot(ctx, h.o)
		s.Seq = seq
		var msgs int64
		if h.o.Messages != nil {
			msgs = h.o.Messages()
		}
		h.mu.Lock()
		if h.stop != stop {
			h.mu.Unlock()
			return
		}
		h.cur = &frame{s: s, msgs: msgs}
		close(h.changed)
		h.changed = make(chan struct{})
		h.mu.Unlock()
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

// stream sends the hub's snapshots to one page until its request ends,
// each with the moves and events recorded since the page's previous one
// and the rates over the time between them.
func (h *hub) stream(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	if !h.join() {
		writeJSON(w, http.StatusServiceUnavailable, Error{
			Error: "the dashboard has " + strconv.Itoa(h.o.MaxWatchers) + " pages watching, its limit (DashboardOptions.MaxWatchers): try again later",
			Kind:  "unavailable"})
		return
	}
	defer h.leave()
	o := h.o
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	var last *frame
	var seen uint64   // the last move the stream sent
	var seenEv uint64 // the last event the stream sent
	for first := true; ; first = false {
		var f *frame
		for f == nil {
			h.mu.Lock()
			cur, changed := h.cur, h.changed
			h.mu.Unlock()
			if cur != nil && (last == nil || cur.s.Seq > last.s.Seq) {
				f = cur
				break
			}
			select {
			case <-r.Context().Done():
				return
			case <-changed:
			}
		}
		s := f.s // the members and objects slices are shared, read only
		moves := o.Host.RecentMoves(seen)
		if first && len(moves) > firstMoves {
			moves = moves[len(moves)-firstMoves:]
		}
		if len(moves) > 0 {
			seen = moves[len(moves)-1].Seq
		}
		s.RecentMoves = movesOf(moves)
		evs := o.Host.Events(seenEv)
		if first && len(evs) > firstMoves {
			evs = evs[len(evs)-firstMoves:]
		}
		if len(evs) > 0 {
			seenEv = evs[len(evs)-1].Seq
		}
		if evs != nil {
			s.Events = evs
		}
		if last != nil {
			if secs := s.Time.Sub(last.s.Time).Seconds(); secs > 0 {
				s.MovesRate = float64(s.Moves-last.s.Moves) / secs
				s.MsgRate = float64(f.msgs-last.msgs) / secs
			}
		}
		last = f
		b, err := json.Marshal(s)
		if err != nil {
			return
		}
		if _, err := fmt.Fprintf(w, "event: snapshot\ndata: %s\n\n", b); err != nil {
			return
		}
		flusher.Flush()
	}
}

// snapshot reads what the page shows; a part that cannot be read is
// named in Errors.
func snapshot(ctx context.Context, o DashboardOptions) Snapshot {
	h := o.Host
	st := h.Stats()
	s := Snapshot{Host: h.Name(), Time: time.Now(), Here: st.OwnersActive, Moves: st.Relocations, UnderWay: st.MovesUnderWay, Members: []Member{}, Objects: []ObjectCount{},
		RecentMoves: []Move{}, Events: []actor.Event{}}
	s.Unreachable, s.Failed = hostsDown(h.Events(0))
	ctx, cancel := context.WithTimeout(ctx, o.Every)
	defer cancel()
	if o.Membership != nil {
		if list, err := o.Membership.Members(ctx); err != nil {
			s.Errors = append(s.Errors, "members: "+err.Error())
		} else {
			for _, m := range list {
				s.Members = append(s.Members, Member{Name: m.Name, State: m.State.String(), Address: m.Address, Kinds: m.Kinds, LeaseGen: m.LeaseGen, Version: m.Version})
			}
			sort.Slice(s.Members, func(i, j int) bool { return s.Members[i].Name < s.Members[j].Name })
		}
	}
	if _, ok := o.Store.(relocation.Counter); ok {
		if counts, total, err := countObjects(ctx, o.Store); err != nil {
			s.Errors = append(s.Errors, "objects: "+err.Error())
		} else {
			s.Objects, s.Total = counts, total
		}
	}
	s.Pauses = summarize(h.RecentPauses())
	return s
}

// hostsDown reads an event log, oldest first, for the hosts whose last
// word is that their link broke (unreachable), or that their run failed
// with no run of the name joined since (failed). Both lists are sorted
// and never nil.
func hostsDown(events []actor.Event) (unreachable, failed []string) {
	last := map[string]actor.EventKind{}
	for _, e := range events {
		switch e.Kind {
		case actor.EventJoined, actor.EventLeft, actor.EventFailed, actor.EventUnreachable, actor.EventReachable:
			last[e.Host] = e.Kind
		}
	}
	unreachable, failed = []string{}, []string{}
	for host, k := range last {
		switch k {
		case actor.EventUnreachable:
			unreachable = append(unreachable, host)
		case actor.EventFailed:
			failed = append(failed, host)
		}
	}
	sort.Strings(unreachable)
	sort.Strings(failed)
	return unreachable, failed
}

// pauseBuckets is how many buckets a PauseSummary has: below 1 µs … below
// 2^(n-2) µs, and the rest.
const pauseBuckets = 22

func summarize(p []time.Duration) PauseSummary {
	out := PauseSummary{Count: len(p), Buckets: make([]int, pauseBuckets)}
	if len(p) == 0 {
		return out
	}
	p = slices.Clone(p)
	slices.Sort(p)
	out.P50, out.P99, out.Max = p[len(p)/2].Microseconds(), p[len(p)*99/100].Microseconds(), p[len(p)-1].Microseconds()
	for _, d := range p {
		us, i := d.Microseconds(), 0
		for i < pauseBuckets-1 && us >= 1<<i {
			i++
		}
		out.Buckets[i]++
	}
	return out
}
