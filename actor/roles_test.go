package actor

import (
	"errors"
	"sync"
	"testing"

	"github.com/berthrt/berth/internal/devca"
	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport"
	"github.com/berthrt/berth/transport/tcp"
)

// roleAttacher attaches each host on transport/tcp with TLS and a
// certificate of its own name, a gateway's for the names in gateways.
type roleAttacher struct {
	ca       *devca.CA
	gateways map[string]bool

	mu sync.Mutex
	m  map[string]*tcp.Transport // guarded by mu
}

func (a *roleAttacher) Attach(name string, h transport.Handler) (transport.Transport, error) {
	return a.AttachRun(name, 0, h)
}

func (a *roleAttacher) AttachRun(name string, run uint64, h transport.Handler) (transport.Transport, error) {
	role := transport.RoleNode
	if a.gateways[name] {
		role = transport.RoleGateway
	}
	cert, err := a.ca.IssueTLSAs(role, name)
	if err != nil {
		return nil, err
	}
	t, err := tcp.Listen(name, h, tcp.Options{TLS: &tcp.TLS{Certificate: cert, CA: a.ca.Pool()}, Run: run})
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	if a.m == nil {
		a.m = map[string]*tcp.Transport{}
	}
	a.m[name] = t
	a.mu.Unlock()
	return t, nil
}

func (a *roleAttacher) get(name string) *tcp.Transport {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.m[name]
}

// A node takes from a peer whose certificate names it a gateway its
// messages, asks and flow control, and nothing a node sends: a relocation
// record, a route hint, a relocation request and a pause from it are each
// dropped, counted, with no effect — where the same items from a node's
// certificate are taken. Before, any certificate of the CA was a full
// member: a gateway's could send records, control items and pauses.
func TestANodeRefusesFromAGatewayEverythingButMessages(t *testing.T) {
	ca, err := devca.New("roles")
	if err != nil {
		t.Fatal(err)
	}
	att := &roleAttacher{ca: ca, gateways: map[string]bool{"g": true}}
	n := NewNetwork(nil)
	obs := &rejections{}
	withTLS := func(c Config) Config { c = n.With(c); c.Transport = att; return c }
	a := startHost(t, withTLS(Config{Name: "a", Logger: quietLogger(), Observer: obs}), counterKind(newGates()))
	g := startHost(t, withTLS(Config{Name: "g", Logger: quietLogger(), Gateway: true}), counterKind(newGates()))
	waitViews(t, a, g)
	ref := Ref{"counter", "c1"}
	obj := relocation.Object{Kind: ref.Kind, ID: ref.ID}
	for range 3 { // the gateway's messages and asks run
		if err := Tell(bg, g, ref, Inc{By: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := Ask[Get, int](bg, g, ref, Get{}); err != nil || v != 3 {
		t.Fatalf("the gateway's Ask: %d, %v; want 3", v, err)
	}
	if r := a.peers.peerRole("g"); r != transport.RoleGateway {
		t.Fatalf("a sees g as %v, want gateway", r)
	}
	if obs.snapshot()[RejectProtocol] != 0 {
		t.Fatalf("the gateway's messages and flow control were refused: %v", obs.snapshot())
	}
	gt := att.get("g")
	items := []transport.Item{
		{Kind: transport.Record, Data: relocation.AppendRecord(nil, obj, &relocation.Preflight{Move: relocation.MoveID{1}, Object: obj})},
		{Kind: transport.Hint, Data: appendHint(nil, obj, routeHint{host: "g", gen: 1 << 40})},
		{Kind: transport.Control, Data: appendControl(nil, &relocateRequest{ref: ref, target: "g", deadline: 1 << 62})},
		{Kind: transport.Control, Data: appendControl(nil, &pressureItem{obj: obj, paused: true})},
	}
	for i, it := range items {
		if err := gt.Send("a", it); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the gateway's "+it.Kind.String()+" refused", func() bool { return obs.snapshot()[RejectProtocol] == i+1 })
	}
	// A frame it says it forwards, as another host's (a gateway forwards
	// none): refused, and it does not run.
	sendFrame(t, gt, "a", transport.Frame, a, ref, payload.Header{Origin: "z", Hops: 1, Epoch: 1 << 60, Seq: 1})
	waitFor(t, "the gateway's forwarded frame refused", func() bool { return obs.snapshot()[RejectProtocol] == len(items)+1 })
	if e, ok := a.routes.lookup(obj); ok {
		t.Fatalf("the gateway's hint made a route on a: %+v", e)
	}
	a.moves.mu.Lock()
	checking := len(a.moves.checking)
	a.moves.mu.Unlock()
	if a.moves.underWay.Load() != 0 || checking != 0 || a.pressure.len() != 0 {
		t.Fatalf("the gateway's items left %d moves, %d preflight checks, %d pauses on a", a.moves.underWay.Load(), checking, a.pressure.len())
	}
	if a.owners.kinds[ref.Kind].local(ref.ID) == nil {
		t.Fatal("the object left a after the gateway's items")
	}
	if v, err := Ask[Get, int](bg, a, ref, Get{}); err != nil || v != 3 {
		t.Fatalf("the object after the gateway's items: %d, %v; want 3, still on a", v, err)
	}
	// Placement: g is never a candidate, whatever kinds it claims — here
	// a membership record of g's run offering the kind (a gateway holds
	// the store's credential: it can write one).
	m, ok := a.peers.view.member("g")
	if !ok {
		t.Fatal("a does not list g")
	}
	m.Kinds, m.State = []string{ref.Kind}, membership.Serving
	a.peers.view.apply(membership.Event{Type: membership.StateChanged, Member: m})
	if m, _ := a.peers.view.member("g"); len(m.Kinds) != 1 {
		t.Fatalf("the forged record was not applied: %+v", m)
	}
	for _, c := range a.peers.candidates(ref.Kind, true) {
		if c.name == "g" {
			t.Fatal("the gateway is a placement candidate")
		}
	}
}

// A host whose certificate names it a gateway does not start with kinds:
// the membership never lists a gateway offering any.
func TestAHostWithAGatewaysCertificateDoesNotStartWithKinds(t *testing.T) {
	ca, err := devca.New("roles")
	if err != nil {
		t.Fatal(err)
	}
	att := &roleAttacher{ca: ca, gateways: map[string]bool{"g": true}}
	n := NewNetwork(nil)
	cfg := n.With(Config{Name: "g", Logger: quietLogger()})
	cfg.Transport = att
	h, err := NewHost(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Register(counterKind(newGates())); err != nil {
		t.Fatal(err)
	}
	err = h.Start()
	if err == nil {
		_ = h.Close()
		t.Fatal("a host with a gateway's certificate started with kinds")
	}
	if !errors.Is(err, payload.InvalidOperation) {
		t.Fatalf("Start: %v, want InvalidOperation", err)
	}
	if ms, _ := n.Membership.Members(bg); len(ms) != 0 {
		t.Fatalf("the membership lists %v", ms)
	}
}
