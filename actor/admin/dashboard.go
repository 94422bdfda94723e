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
	Every time.Duration
}

// Snapshot is what a watching page receives, every DashboardOptions.Every.
type Snapshot struct {
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
// stream of Snapshots (server-sent events) while the page watches. Nothing
// runs while nobody watches: each stream's loop ends with its request. It
// is read-only; it shows what /metrics shows (names and counts), so serve
// it where /metrics is served.
func Dashboard(o DashboardOptions) (http.Handler, error) {
	if o.Host == nil {
		return nil, ErrBadOptions
	}
	if o.Every <= 0 {
		o.Every = time.Second
	}
	static, err := fs.Sub(dashboardFiles, "dashboard")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /", http.FileServerFS(static))
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) { streamSnapshots(w, r, o) })
	return mux, nil
}

// streamSnapshots sends a Snapshot every o.Every until the request ends.
func streamSnapshots(w http.ResponseWriter, r *http.Request, o DashboardOptions) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	tick := time.NewTicker(o.Every)
	defer tick.Stop()
	var last Snapshot
	var lastMsgs int64
	var seen uint64   // the last move the stream sent
	var seenEv uint64 // the last event the stream sent
	for first := true; ; first = false {
		s := snapshot(r.Context(), o)
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
		var msgs int64
		if o.Messages != nil {
			msgs = o.Messages()
		}
		if !first {
			secs := s.Time.Sub(last.Time).Seconds()
			if secs > 0 {
				s.MovesRate = float64(s.Moves-last.Moves) / secs
				s.MsgRate = float64(msgs-lastMsgs) / secs
			}
		}
		last, lastMsgs = s, msgs
		b, err := json.Marshal(s)
		if err != nil {
			return
		}
		if _, err := fmt.Fprintf(w, "event: snapshot\ndata: %s\n\n", b); err != nil {
			return
		}
		flusher.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
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
