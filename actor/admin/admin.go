// Package admin is an operator's HTTP/JSON API over one host of a berth
// cluster: the members, where objects live and how many each host has,
// the host's counters, and — when allowed — moving an object and draining
// the host. berth node serves it (-admin); a program that embeds a host
// can mount New's handler on a server of its own. berth admin is its
// command-line client.
//
// Routes (all under /admin/v1/, JSON answers):
//
//	GET  members               the membership: name, state, address, kinds, lease generation, version; and what the host saw:
//	                           members unreachable, and hosts failed since (listed as failed)
//	GET  objects               objects per host and kind, from the Location Store (relocation.Counter)
//	GET  locate/{kind}/{id}    where an object lives (actor.Host.Locate)
//	GET  stats                 this host's counters (actor.Host.Stats: moves under way among them), drain state, recent move pauses
//	GET  moves?after=          the last moves this host was the source of, oldest first (actor.Host.RecentMoves): after a Seq, only newer ones
//	GET  events?after=         the host's event log, oldest first (actor.Host.Events): members joined, draining, left, failed;
//	                           its jeopardy, new run, drains; objects taken over and moved in. After a Seq, only newer ones
//	GET  events/stream?after=  the same as server-sent events ("event: event", the Seq as its id), then each new one as
//	                           it is recorded, until the asker leaves
//	POST move/{kind}/{id}?to=  move an object to a host (actor.Host.Relocate): Options.AllowWrites
//	POST drain                 drain this host (actor.Host.Drain), then it stops: Options.AllowWrites;
//	                           the drain goes on if the asker leaves; the answer comes when it ends
//
// Invariants: every request carries an admin credential (Authorization:
// Bearer <token>, or HTTP Basic with the token as its password), compared
// in constant time, or is refused 401 before anything is read; a route
// that changes the cluster answers 403 unless Options.AllowWrites, and,
// when Options.WriteToken is set, unless it carries that one (the read
// credential, Options.Token, then only reads); each such request leaves
// an audit line naming the credential it carried; a request body is never read (the routes take
// none), and an answer is bounded by what it lists. Errors are JSON
// {"error": ..., "kind": ...} with the payload kind's name, and a status
// from the kind (NotFound 404, InvalidOperation 400, Unavailable 503,
// DeadlineExceeded 504, ShuttingDown 503, others 500).
//
// The API is no way in for peers: serve it on an address operators reach,
// over TLS (berth node uses its own certificate), and keep the token as a
// secret apart from the hosts' certificates.
package admin

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
)

// Options configure the API.
type Options struct {
	// Host is the host the API speaks for (required).
	Host *actor.Host
	// Membership lists the members (nil: members answers 501).
	Membership membership.Membership
	// Store counts the objects when it is a relocation.Counter (else
	// objects answers 501).
	Store relocation.Store
	// Token is the admin credential every request must carry (required,
	// at least 16 bytes).
	Token string
	// WriteToken, when set (at least 16 bytes, not Token), is the
	// credential the routes that change the cluster need: Token then
	// reads only (a write route answers it 403), and WriteToken reads
	// too. Unset, Token does both.
	WriteToken string
	// AllowWrites turns on the routes that change the cluster (move,
	// drain).
	AllowWrites bool
	// Timeout bounds each read route's calls (default 10 s); move is
	// bounded by the request's own context, and drain runs to its end.
	Timeout time.Duration
	// Audit receives one line per request of a route that changes the
	// cluster, allowed or not, when it ends: its method and path (the
	// object and the target host), the remote address, the status and
	// the error (nil: slog.Default()).
	Audit *slog.Logger
}

// ErrBadOptions: New's Options lack the host, or a token of at least 16
// bytes, or have a WriteToken shorter than that or equal to Token.
var ErrBadOptions = payload.NewError(payload.InvalidOperation, "admin.New", "Options need a Host and a Token of at least 16 bytes (and a WriteToken, if any, of at least 16 bytes other than Token)")

// New returns the API's handler. It serves only /admin/v1/ paths.
func New(o Options) (http.Handler, error) {
	if o.Host == nil || len(o.Token) < 16 || (o.WriteToken != "" && (len(o.WriteToken) < 16 || o.WriteToken == o.Token)) {
		return nil, ErrBadOptions
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Audit == nil {
		o.Audit = slog.Default()
	}
	a := &api{o: o, token: []byte(o.Token)}
	if o.WriteToken != "" {
		a.writeToken = []byte(o.WriteToken)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/v1/members", a.members)
	mux.HandleFunc("GET /admin/v1/objects", a.objects)
	mux.HandleFunc("GET /admin/v1/locate/{kind}/{id}", a.locate)
	mux.HandleFunc("GET /admin/v1/inspect/{kind}/{id}", a.inspect)
	mux.HandleFunc("GET /admin/v1/busiest", a.busiest)
	mux.HandleFunc("GET /admin/v1/stats", a.stats)
	mux.HandleFunc("GET /admin/v1/moves", a.moves)
	mux.HandleFunc("GET /admin/v1/events", a.events)
	mux.HandleFunc("GET /admin/v1/events/stream", a.eventStream)
	mux.HandleFunc("POST /admin/v1/move/{kind}/{id}", a.write(a.move))
	mux.HandleFunc("POST /admin/v1/drain", a.write(a.drain))
	return a.auth(mux), nil
}

type api struct {
	o          Options
	token      []byte
	writeToken []byte // nil: token writes too
}

// credential is which credential a request carried.
type credential int

const (
	credNone  credential = iota
	credRead             // Options.Token, with a WriteToken set
	credAdmin            // Options.Token, with no WriteToken: reads and writes
	credWrite            // Options.WriteToken
)

func (c credential) String() string {
	switch c {
	case credRead:
		return "read"
	case credAdmin:
		return "admin"
	case credWrite:
		return "write"
	}
	return "none"
}

type credKey struct{}

// presented returns the credential a request carries: "Authorization:
// Bearer <token>", or HTTP Basic with the token as the password (what a
// browser sends for a page and its event stream), compared in constant
// time.
func presented(r *http.Request) []byte {
	auth := r.Header.Get("Authorization")
	if tok, ok := strings.CutPrefix(auth, "Bearer "); ok {
		return []byte(tok)
	}
	if _, pass, ok := r.BasicAuth(); ok {
		return []byte(pass)
	}
	return nil
}

// matches reports whether got is want, in constant time (want non-empty).
func matches(got, want []byte) bool {
	return len(want) > 0 && subtle.ConstantTimeCompare(got, want) == 1
}

// RequireToken returns next behind a credential: a request must carry one
// of tokens (each at least 16 bytes), as "Authorization: Bearer <token>"
// or as the password of HTTP Basic (a browser asks for it, and sends it
// with the page's event stream), or it is answered 401 before next sees
// it. berth node puts /metrics and the dashboard behind the admin
// credentials this way when it serves them off loopback.
func RequireToken(next http.Handler, tokens ...string) (http.Handler, error) {
	var want [][]byte
	for _, t := range tokens {
		if len(t) < 16 {
			return nil, ErrBadOptions
		}
		want = append(want, []byte(t))
	}
	if len(want) == 0 {
		return nil, ErrBadOptions
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := presented(r)
		ok := false
		for _, t := range want {
			ok = matches(got, t) || ok // every one compared: no early exit
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="berth", charset="UTF-8"`)
			writeJSON(w, http.StatusUnauthorized, Error{Error: "the admin credential is missing or wrong", Kind: "unauthorized"})
			return
		}
		next.ServeHTTP(w, r)
	}), nil
}

// Member is a member as the members route lists it.
type Member struct {
	Name     string   `json:"name"`
	State    string   `json:"state"`
	Address  string   `json:"address"`
	Kinds    []string `json:"kinds"`
	LeaseGen uint64   `json:"lease_gen"`
	// Version is the application version the member runs (""
	// when it states none).
	Version string `json:"version,omitempty"`
	// Seen is what the asked host's event log last says of the member
	// when it is down: "unreachable" (its link broke; its lease is being
	// checked), or "failed" (its run ended without handing its work on;
	// such a host is listed, with State "failed", until a run of its
	// name joins again, though the membership no longer lists it).
	Seen string `json:"seen,omitempty"`
}

// Members is the members route's answer.
type Members struct {
	Self    string   `json:"self"`
	Members []Member `json:"members"`
}

// ObjectCount is how many objects of one kind one host owns.
type ObjectCount struct {
	Host    string `json:"host"`
	Kind    string `json:"kind"`
	Objects int    `json:"objects"`
}

// Objects is the objects route's answer.
type Objects struct {
	Counts []ObjectCount `json:"counts"`
	Total  int           `json:"total"`
}

// countObjects reads the counts from store, if it is a relocation.Counter.
func countObjects(ctx context.Context, store relocation.Store) ([]ObjectCount, int, error) {
	c, ok := store.(relocation.Counter)
	if !ok {
		return nil, 0, payload.NewError(payload.NotConfigured, "admin", "the Location Store does not count its objects (relocation.Counter)")
	}
	counts, err := c.CountObjects(ctx)
	if err != nil {
		return nil, 0, err
	}
	out, total := make([]ObjectCount, 0, len(counts)), 0
	for _, n := range counts {
		out = append(out, ObjectCount{Host: n.Host, Kind: n.Kind, Objects: n.Objects})
		total += n.Objects
	}
	return out, total, nil
}

// Location is the locate route's answer.
type Location struct {
	Kind      string `json:"kind"`
	ID        string `json:"id"`
	Host      string `json:"host"`
	ObjectGen uint64 `json:"object_gen"`
	OwnerGen  uint64 `json:"owner_gen"`
	Asked     string `json:"asked"` // the host whose API answered
}

// Inspection is the inspect route's answer (actor.Host.Inspect): what the
// object's owner found in a turn of its own.
type Inspection struct {
	Kind      string    `json:"kind"`
	ID        string    `json:"id"`
	Host      string    `json:"host"` // the owner, which ran the inspection
	ObjectGen uint64    `json:"object_gen"`
	OwnerGen  uint64    `json:"owner_gen"`
	Since     time.Time `json:"since"`              // the activation, or the move to host
	Queued    int       `json:"queued"`             // application messages queued behind the inspection
	Turns     uint64    `json:"turns"`              // messages this activation ran
	LastTurn  time.Time `json:"last_turn,omitzero"` // when the last of them ended
	Summary   string    `json:"summary,omitempty"`  // the kind's summary of the state
	Moves     []Move    `json:"moves"`              // its moves from host and from the asked host, by end
	Asked     string    `json:"asked"`              // the host whose API answered
}

// ObjectRate is one object of the busiest route's answer.
type ObjectRate struct {
	Kind      string  `json:"kind"`
	ID        string  `json:"id"`
	Messages  uint64  `json:"messages"`   // run in the window
	PerSecond float64 `json:"per_second"` // the same a second
	Queued    int     `json:"queued"`     // at the window's end
}

// Busiest is the busiest route's answer (actor.Host.Busiest).
type Busiest struct {
	Host      string       `json:"host"`
	WindowMS  int64        `json:"window_ms"`
	Messages  uint64       `json:"messages"`   // all the host's objects ran in the window
	PerSecond float64      `json:"per_second"` // the same a second
	Objects   []ObjectRate `json:"objects"`    // the busiest, most first
}

// Stats is the stats route's answer.
type Stats struct {
	Host       string       `json:"host"`
	Ready      string       `json:"ready"` // "ok", or why not
	DrainState string       `json:"drain_state"`
	Stats      actor.Stats  `json:"stats"`  // MovesUnderWay and Relocations among them
	Pauses     PauseSummary `json:"pauses"` // of the last moves from this host (actor.Host.RecentPauses)
}

// Move is one move this host was the source of, as it ended
// (actor.MoveEntry): the moves route and the dashboard list them.
type Move struct {
	Seq     uint64    `json:"seq"` // numbers the moves from this host: 1, 2, 3, …
	Kind    string    `json:"kind"`
	ID      string    `json:"id"`
	From    string    `json:"from"`
	To      string    `json:"to"`
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
	PauseUS int64     `json:"pause_us"` // the time the object ran nowhere, µs; 0 unless it moved
	Outcome string    `json:"outcome"`  // moved, refused, aborted, abandoned, lost or closed (actor.MoveOutcome)
	Reason  string    `json:"reason,omitempty"`
}

// Moves is the moves route's answer.
type Moves struct {
	Host  string `json:"host"`
	Moves []Move `json:"moves"` // oldest first
}

// movesOf converts the host's entries.
func movesOf(es []actor.MoveEntry) []Move {
	out := make([]Move, 0, len(es))
	for _, e := range es {
		out = append(out, Move{Seq: e.Seq, Kind: e.Ref.Kind, ID: e.Ref.ID, From: e.From, To: e.To, Started: e.Started, Ended: e.Ended,
			PauseUS: e.Pause.Microseconds(), Outcome: e.Outcome.String(), Reason: e.Reason})
	}
	return out
}

// Done is the answer of move and drain.
type Done struct {
	Done string `json:"done"`
}

// Error is an error answer.
type Error struct {
	Error string `json:"error"`
	Kind  string `json:"kind"`
}

func (a *api) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := presented(r)
		cred := credNone
		isToken, isWrite := matches(got, a.token), matches(got, a.writeToken)
		switch {
		case isWrite:
			cred = credWrite
		case isToken && a.writeToken != nil:
			cred = credRead
		case isToken:
			cred = credAdmin
		}
		if cred == credNone {
			w.Header().Set("WWW-Authenticate", `Bearer realm="berth admin"`)
			writeJSON(w, http.StatusUnauthorized, Error{Error: "the admin credential is missing or wrong", Kind: "unauthorized"})
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), credKey{}, cred)))
	})
}

func (a *api) write(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		cred, _ := r.Context().Value(credKey{}).(credential)
		defer func() {
			a.o.Audit.Info("admin: a request to change the cluster", "route", r.Method+" "+r.URL.Path, "query", r.URL.RawQuery,
				"remote", r.RemoteAddr, "credential", cred.String(), "status", rec.status, "error", rec.err, "took", time.Since(began).Round(time.Millisecond))
		}()
		if !a.o.AllowWrites {
			writeJSON(rec, http.StatusForbidden, Error{Error: "routes that change the cluster are off (berth node -admin-write)", Kind: "forbidden"})
			return
		}
		if cred == credRead {
			writeJSON(rec, http.StatusForbidden, Error{Error: "this route changes the cluster: it needs the write credential (berth node -admin-write-token-file), not the read one", Kind: "forbidden"})
			return
		}
		h(rec, r)
	}
}

// recorder keeps a write route's status and error for its audit line.
type recorder struct {
	http.ResponseWriter
	status int
	err    string
}

func (r *recorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (a *api) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), a.o.Timeout)
}

func (a *api) members(w http.ResponseWriter, r *http.Request) {
	if a.o.Membership == nil {
		writeErr(w, payload.NewError(payload.NotConfigured, "admin", "no membership"))
		return
	}
	ctx, cancel := a.ctx(r)
	defer cancel()
	list, err := a.o.Membership.Members(ctx)
	if err != nil {
		writeErr(w, err)
		return
	}
	out := Members{Self: a.o.Host.Name(), Members: make([]Member, 0, len(list))}
	unreachable, failed := hostsDown(a.o.Host.Events(0))
	listed := map[string]bool{}
	for _, m := range list {
		listed[m.Name] = true
		mb := Member{Name: m.Name, State: m.State.String(), Address: m.Address, Kinds: m.Kinds, LeaseGen: m.LeaseGen, Version: m.Version}
		if slices.Contains(unreachable, m.Name) {
			mb.Seen = string(actor.EventUnreachable)
		}
		out.Members = append(out.Members, mb)
	}
	for _, f := range failed {
		if !listed[f] {
			out.Members = append(out.Members, Member{Name: f, State: "failed", Kinds: []string{}, Seen: string(actor.EventFailed)})
		}
	}
	sort.Slice(out.Members, func(i, j int) bool { return out.Members[i].Name < out.Members[j].Name })
	writeJSON(w, http.StatusOK, out)
}

func (a *api) objects(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := a.ctx(r)
	defer cancel()
	counts, total, err := countObjects(ctx, a.o.Store)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, Objects{Counts: counts, Total: total})
}

func (a *api) locate(w http.ResponseWriter, r *http.Request) {
	ref := actor.Ref{Kind: r.PathValue("kind"), ID: r.PathValue("id")}
	ctx, cancel := a.ctx(r)
	defer cancel()
	loc, err := a.o.Host.Locate(ctx, ref)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, Location{Kind: ref.Kind, ID: ref.ID, Host: loc.Host, ObjectGen: loc.ObjectGeneration,
		OwnerGen: loc.OwnerGeneration, Asked: a.o.Host.Name()})
}

func (a *api) inspect(w http.ResponseWriter, r *http.Request) {
	ref := actor.Ref{Kind: r.PathValue("kind"), ID: r.PathValue("id")}
	ctx, cancel := a.ctx(r)
	defer cancel()
	h := a.o.Host
	in, err := h.Inspect(ctx, ref)
	if err != nil {
		writeErr(w, err)
		return
	}
	moves := in.Moves
	if in.Host != h.Name() {
		for _, m := range h.RecentMoves(0) {
			if m.Ref == ref {
				moves = append(moves, m)
			}
		}
		sort.SliceStable(moves, func(i, j int) bool { return moves[i].Ended.Before(moves[j].Ended) })
	}
	writeJSON(w, http.StatusOK, Inspection{Kind: ref.Kind, ID: ref.ID, Host: in.Host, ObjectGen: in.ObjectGeneration,
		OwnerGen: in.OwnerGeneration, Since: in.Since, Queued: in.Queued, Turns: in.Turns, LastTurn: in.LastTurn,
		Summary: in.Summary, Moves: movesOf(moves), Asked: h.Name()})
}

func (a *api) busiest(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	n, window := 10, time.Second
	if v := q.Get("n"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			writeErr(w, payload.NewError(payload.InvalidOperation, "admin", "busiest?n= takes a number of objects, not "+strconv.Quote(v)))
			return
		}
	}
	if v := q.Get("window"); v != "" {
		var err error
		if window, err = time.ParseDuration(v); err != nil {
			writeErr(w, payload.NewError(payload.InvalidOperation, "admin", "busiest?window= takes a duration (1s), not "+strconv.Quote(v)))
			return
		}
	}
	if window >= a.o.Timeout {
		writeErr(w, payload.NewError(payload.InvalidOperation, "admin", "busiest?window="+window.String()+
			" is not below the admin API's request timeout ("+a.o.Timeout.String()+", Options.Timeout)"))
		return
	}
	ctx, cancel := a.ctx(r)
	defer cancel()
	h := a.o.Host
	top, total, err := h.Busiest(ctx, n, window)
	if err != nil {
		writeErr(w, err)
		return
	}
	out := Busiest{Host: h.Name(), WindowMS: window.Milliseconds(), Messages: total, PerSecond: float64(total) / window.Seconds(),
		Objects: make([]ObjectRate, 0, len(top))}
	for _, o := range top {
		out.Objects = append(out.Objects, ObjectRate{Kind: o.Ref.Kind, ID: o.Ref.ID, Messages: o.Messages, PerSecond: o.PerSecond, Queued: o.Queued})
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *api) stats(w http.ResponseWriter, _ *http.Request) {
	h := a.o.Host
	ready := "ok"
	if err := h.Ready(); err != nil {
		ready = err.Error()
	}
	writeJSON(w, http.StatusOK, Stats{Host: h.Name(), Ready: ready, DrainState: h.DrainState().String(), Stats: h.Stats(),
		Pauses: summarize(h.RecentPauses())})
}

func (a *api) moves(w http.ResponseWriter, r *http.Request) {
	after, ok := afterParam(w, r, "moves", "a move's seq")
	if !ok {
		return
	}
	h := a.o.Host
	writeJSON(w, http.StatusOK, Moves{Host: h.Name(), Moves: movesOf(h.RecentMoves(after))})
}

// Events is the events route's answer.
type Events struct {
	Host   string        `json:"host"`
	Events []actor.Event `json:"events"` // oldest first
}

func (a *api) events(w http.ResponseWriter, r *http.Request) {
	after, ok := afterParam(w, r, "events", "an event's seq")
	if !ok {
		return
	}
	h := a.o.Host
	es := h.Events(after)
	if es == nil {
		es = []actor.Event{}
	}
	writeJSON(w, http.StatusOK, Events{Host: h.Name(), Events: es})
}

// eventStreamEvery is how often the events stream looks for new events.
const eventStreamEvery = 250 * time.Millisecond

// eventStream sends the host's events after ?after= (or after the
// Last-Event-ID a reconnecting EventSource sends), then each new one, as
// server-sent events until the request ends.
func (a *api) eventStream(w http.ResponseWriter, r *http.Request) {
	after, ok := afterParam(w, r, "events/stream", "an event's seq")
	if !ok {
		return
	}
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		if n, err := strconv.ParseUint(id, 10, 64); err == nil {
			after = n
		}
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeErr(w, payload.NewError(payload.NotConfigured, "admin", "the server cannot stream"))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	tick := time.NewTicker(eventStreamEvery)
	defer tick.Stop()
	for {
		for _, e := range a.o.Host.Events(after) {
			b, err := json.Marshal(e)
			if err != nil {
				return
			}
			if _, err := fmt.Fprintf(w, "id: %d\nevent: event\ndata: %s\n\n", e.Seq, b); err != nil {
				return
			}
			after = e.Seq
		}
		flusher.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}

// afterParam reads the ?after= of route (what: what it numbers); a bad
// one is answered InvalidOperation and ok is false.
func afterParam(w http.ResponseWriter, r *http.Request, route, what string) (after uint64, ok bool) {
	v := r.URL.Query().Get("after")
	if v == "" {
		return 0, true
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		writeErr(w, payload.NewError(payload.InvalidOperation, "admin", route+"?after= takes "+what+", not "+strconv.Quote(v)))
		return 0, false
	}
	return n, true
}

func (a *api) move(w http.ResponseWriter, r *http.Request) {
	ref := actor.Ref{Kind: r.PathValue("kind"), ID: r.PathValue("id")}
	to := r.URL.Query().Get("to")
	if to == "" {
		writeErr(w, payload.NewError(payload.InvalidOperation, "admin", "move needs ?to=<host>"))
		return
	}
	if err := a.o.Host.Relocate(r.Context(), ref, to); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, Done{Done: "moved " + ref.String() + " to " + to})
}

func (a *api) drain(w http.ResponseWriter, r *http.Request) {
	// A drain asked for goes on to its end even if the asker leaves (a
	// client's timeout would otherwise cut it short, and leave the host
	// relocating, serving, for a later drain).
	if err := a.o.Host.Drain(context.WithoutCancel(r.Context())); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, Done{Done: "drained " + a.o.Host.Name()})
}

// status is the HTTP status of err, from its payload kind, and the kind's
// name.
func status(err error) (int, string) {
	k := payload.KindOf(err)
	switch {
	case k == 0 && errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, payload.DeadlineExceeded.String()
	case k == 0:
		return http.StatusInternalServerError, "internal"
	case k == payload.NotFound:
		return http.StatusNotFound, k.String()
	case k == payload.InvalidOperation:
		return http.StatusBadRequest, k.String()
	case k == payload.Unavailable, k == payload.ShuttingDown:
		return http.StatusServiceUnavailable, k.String()
	case k == payload.DeadlineExceeded:
		return http.StatusGatewayTimeout, k.String()
	case k == payload.NotConfigured:
		return http.StatusNotImplemented, k.String()
	}
	return http.StatusInternalServerError, k.String()
}

func writeErr(w http.ResponseWriter, err error) {
	if rec, ok := w.(*recorder); ok {
		rec.err = err.Error()
	}
	code, kind := status(err)
	writeJSON(w, code, Error{Error: err.Error(), Kind: kind})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
