package tests

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/internal/wire"
	"github.com/berthrt/berth/membership"
	"github.com/berthrt/berth/payload"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport"
	"github.com/berthrt/berth/transport/tcp"
)

// These tests attack a node process (n1, transport/tcp with mutual TLS)
// as a client on the network would, while a gateway host in the test's
// process (a real peer) keeps using it. The attacker speaks the wire by
// hand: the preamble, then frames (a 4-byte length, the 44-byte header of
// transport/tcp's frame.go, the data).

// hostile is the set-up of the tests below: node n1 in a child process,
// the gateway gw in this one, the object ref activated on n1, and ghost, a
// member of the cluster (it holds a lease in the membership, so n1 takes
// it as a peer) that runs nowhere: the attacker holds its certificate.
// (A running member would reconnect and replace the attacker's
// connections.)
type hostile struct {
	n1    *child
	gw    *actor.Host
	ref   actor.Ref
	ghost tls.Certificate
	run   uint64 // the ghost's run: its lease generation in the membership
	db    string // the cluster's database
	seq   uint64 // the number of the ghost's last item on the wire
}

func newHostile(t *testing.T, env ...string) *hostile {
	t.Helper()
	db := pgtestNew(t)
	x := &hostile{n1: startNodeChild(t, db, "n1", env...), ref: actor.Ref{Kind: "tally", ID: "attacked"}, db: db}
	x.gw = procsGateway(t, db, 1, false)
	x.ghost, x.run = joinGhost(t, db, "ghost")
	x.ask(t, 1)
	if !waitFor(time.Minute, func() bool {
		c, err := x.dial("ghost", &x.ghost)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	}) {
		t.Fatal("n1 did not take ghost, a member, as a peer within a minute")
	}
	return x
}

// joinGhost makes name a member of the cluster whose address takes no
// connections, serving no kinds (so nothing is placed on it), renews its
// lease until the test ends, and returns a certificate naming it and its
// run (its lease generation: the incarnation its frames must carry).
func joinGhost(t *testing.T, db, name string) (tls.Certificate, uint64) {
	t.Helper()
	_, members, closePG := openPostgres(t, db)
	ctx := context.Background()
	lease, err := members.Join(ctx, membership.Member{Name: name, Address: "127.0.0.1:1",
		LeaseGen: uint64(time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(lease.TTL / 4):
			}
			if _, err := members.Renew(ctx, name, lease.Gen); err != nil {
				t.Errorf("renew %s: %v", name, err)
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
		_ = members.Leave(ctx, name, lease.Gen)
		closePG()
	})
	cert, err := testCA().IssueTLS(name)
	if err != nil {
		t.Fatal(err)
	}
	return cert, lease.Gen
}

// waitFor polls cond every 20 ms for up to d.
func waitFor(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

// dial opens a TLS connection to n1 with cert (nil: none), sends the
// preamble of a dialer claiming to be from, and reads n1's answer: an
// error if n1 refused or closed the connection instead.
func (x *hostile) dial(from string, cert *tls.Certificate) (net.Conn, error) {
	return dialHost(x.n1.addr, "n1", from, cert)
}

// dialHost is dial to host to at addr.
func dialHost(addr, to, from string, cert *tls.Certificate) (net.Conn, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: testCA().Pool(), ServerName: to}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	pre := append([]byte("berth/tcp/2\n"), byte(len(from)))
	pre = append(append(pre, from...), byte(len(to)))
	pre = append(pre, to...)
	if _, err := c.Write(pre); err != nil {
		_ = c.Close()
		return nil, err
	}
	var ok [5]byte // 'k' and n1's item limit
	if _, err := io.ReadFull(c, ok[:]); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// ask asks ref on n1 from the gateway and checks the answer.
func (x *hostile) ask(t *testing.T, seq int) {
	t.Helper()
	got, err := actor.Ask[numberedAsk, int](context.Background(), x.gw, x.ref, numberedAsk{Sender: "gw", Seq: seq})
	if err != nil || got != seq {
		t.Fatalf("Ask %d from the gateway: %d, %v; n1's log:\n%s", seq, got, err, x.n1.stderr())
	}
}

// tally reads ref's state from the gateway.
func (x *hostile) tally(t *testing.T) tally {
	t.Helper()
	got, err := actor.Ask[readTally, tally](context.Background(), x.gw, x.ref, readTally{})
	if err != nil {
		t.Fatalf("read %v: %v", x.ref, err)
	}
	return got
}

// stats returns n1's transport counts.
func (x *hostile) stats(t *testing.T) tcp.Stats {
	return decode[tcp.Stats](t, x.n1.must(t, "tcpstats"))
}

// hostStats returns n1's host counts.
func (x *hostile) hostStats(t *testing.T) actor.Stats {
	return decode[actor.Stats](t, x.n1.must(t, "stats"))
}

// alive fails the test if n1 exited.
func (x *hostile) alive(t *testing.T) {
	t.Helper()
	select {
	case <-x.n1.done:
		t.Fatalf("n1 exited (%v); its log:\n%s", x.n1.cmd.ProcessState, x.n1.stderr())
	default:
	}
}

// linkFrame is a frame of transport/tcp's session: op (1 item, 3 hello),
// an item's kind, the sender's incarnation, the item's number, data.
func linkFrame(op byte, kind transport.Kind, fromInc, seq uint64, data []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(44+len(data)))
	b = append(b, op, 0, byte(kind), 0)
	b = binary.BigEndian.AppendUint64(b, fromInc)
	b = binary.BigEndian.AppendUint64(b, 0) // the incarnation of n1 it knows: none
	b = binary.BigEndian.AppendUint64(b, seq)
	b = binary.BigEndian.AppendUint64(b, 0) // ack
	b = binary.BigEndian.AppendUint64(b, 0) // taken
	return append(b, data...)
}

// tellFrame is the data of a Frame item: a Tell of numbered{sender, 1} to
// ref, first sent (hop 0) by origin.
func tellFrame(t *testing.T, ref actor.Ref, origin, sender string) []byte {
	t.Helper()
	return jsonFrame(t, payload.Header{Type: actor.TypeName[numbered](), Origin: origin,
		Target: payload.Target{Scope: payload.ScopeObject, Name: ref.Kind, ID: ref.ID}}, numbered{Sender: sender, Seq: 1})
}

// jsonFrame is the data of a Frame item: body in JSON with header h (a
// new operation id).
func jsonFrame(t *testing.T, h payload.Header, body any) []byte {
	t.Helper()
	h.ContentType, h.Op = "application/json", payload.NewOpID()
	b, err := payload.AppendHeader(nil, &h)
	if err != nil {
		t.Fatal(err)
	}
	j, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return append(b, j...)
}

// session sends items on a new connection as ghost, of its run and
// numbered after its earlier ones (the session goes on across
// connections), and closes it once n1 has read them.
func (x *hostile) session(t *testing.T, items ...[]byte) {
	t.Helper()
	c, err := x.dial("ghost", &x.ghost)
	if err != nil {
		t.Fatalf("dial as ghost: %v", err)
	}
	defer c.Close()
	var w []byte
	for _, it := range items {
		x.seq++
		w = append(w, linkFrame(1, transport.Kind(it[0]), x.run, x.seq, it[1:])...)
	}
	if _, err := c.Write(w); err != nil {
		t.Fatalf("write as ghost: %v", err)
	}
}

// item is an item of kind k for session.
func item(k transport.Kind, data []byte) []byte { return append([]byte{byte(k)}, data...) }

// A client without a certificate, with another CA's, or with a valid
// certificate of one member claiming to be another — and a valid
// certificate of a name that is no member — is refused and counted; the
// node process keeps serving its peer.
func TestANodeProcessRefusesAMemberClaimingAnotherMembersName(t *testing.T) {
	x := newHostile(t)
	before := x.stats(t)
	stranger, err := testCA().IssueTLS("stranger")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what string
		from string
		cert *tls.Certificate
	}{
		{"no certificate", "gateway", nil},
		{"ghost's certificate claiming to be the gateway", "gateway", &x.ghost},
		{"ghost's certificate claiming to be n1", "n1", &x.ghost},
		{"a certificate of no member", "stranger", &stranger},
	} {
		if c, err := x.dial(tc.from, tc.cert); err == nil {
			_ = c.Close()
			t.Fatalf("%s: n1 accepted the connection", tc.what)
		}
	}
	if !waitFor(30*time.Second, func() bool {
		s := x.stats(t)
		return s.Refused >= before.Refused+3 && s.Unknown >= before.Unknown+1
	}) {
		t.Fatalf("n1 counted %+v after %+v; want 3 more refused and 1 more unknown", x.stats(t), before)
	}
	x.ask(t, 2)
	x.alive(t)
	if c, err := x.dial("ghost", &x.ghost); err != nil { // the control: ghost as itself is taken
		t.Fatalf("ghost as itself: %v", err)
	} else {
		_ = c.Close()
	}
}

// Every truncation of a valid frame, and garbage after a valid handshake,
// close that connection only: nothing of them reaches an object, the
// garbage is counted as malformed, and the node process keeps serving its
// peer. The seed is printed.
func TestANodeProcessClosesOnlyTheConnectionOfGarbageOrATruncatedFrame(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 2))
	x := newHostile(t)
	frame := linkFrame(1, transport.Frame, uint64(time.Now().UnixNano()), 1, tellFrame(t, x.ref, "ghost", "truncated"))
	for k := range len(frame) {
		c, err := x.dial("ghost", &x.ghost)
		if err != nil {
			t.Fatalf("truncated at %d: %v", k, err)
		}
		if _, err := c.Write(frame[:k]); err != nil {
			t.Fatalf("truncated at %d: %v", k, err)
		}
		_ = c.Close()
	}
	malformed := x.stats(t).Malformed
	const garbage = 20
	for i := range garbage {
		c, err := x.dial("ghost", &x.ghost)
		if err != nil {
			t.Fatalf("garbage %d: %v", i, err)
		}
		g := make([]byte, 48+rng.IntN(512))
		for j := range g {
			g[j] = byte(rng.Uint32())
		}
		binary.BigEndian.PutUint32(g, 44)
		g[4] = 99 // no such op: the header is refused
		if _, err := c.Write(g); err != nil {
			t.Fatalf("garbage %d: %v", i, err)
		}
		if _, err := io.ReadAll(c); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("garbage %d: n1 kept the connection open", i)
			}
		}
		_ = c.Close()
	}
	if !waitFor(30*time.Second, func() bool { return x.stats(t).Malformed >= malformed+garbage }) {
		t.Fatalf("n1 counted %d malformed connections, want %d", x.stats(t).Malformed, malformed+garbage)
	}
	x.ask(t, 2)
	x.alive(t)
	if n := x.tally(t).Count["truncated"]; n != 0 {
		t.Fatalf("a truncated frame ran %d times", n)
	}
	// The control: the whole frame runs.
	x.session(t, item(transport.Frame, tellFrame(t, x.ref, "ghost", "whole")))
	if !waitFor(30*time.Second, func() bool { return x.tally(t).Count["whole"] == 1 }) {
		t.Fatalf("the whole frame did not run: %+v", x.tally(t))
	}
}

// Items an authenticated member forges have no effect beyond its own
// link: a message naming another host as its origin on its first hop is
// refused; a Prepare declaring 2^32-1 chunks, or naming another host as
// the source of a move of an object that host does not own, allocates
// nothing and moves nothing; hellos with the highest incarnations — not
// the run the membership lists for the forger — are dropped as stale and
// restart nothing, not even the forger's own session. Each forged item is followed, on its
// link, by one that must run (so the forged one was read and handled
// first); the node process keeps serving its peer throughout.
func TestForgedItemsFromAnAuthenticatedMemberHaveNoEffect(t *testing.T) {
	x := newHostile(t)
	rss := x.n1RSS(t)

	// A Tell claiming the gateway sent it first; then one as itself.
	x.session(t, item(transport.Frame, tellFrame(t, x.ref, "gateway", "forged")),
		item(transport.Frame, tellFrame(t, x.ref, "ghost", "after-origin")))
	if !waitFor(30*time.Second, func() bool { return x.tally(t).Count["after-origin"] == 1 }) {
		t.Fatalf("the message after the forged one did not run: %+v", x.tally(t))
	}
	if n := x.tally(t).Count["forged"]; n != 0 {
		t.Fatalf("a message naming another origin ran %d times", n)
	}

	// Prepares: 2^32-1 chunks; and a move of ref "from the gateway".
	obj := relocation.Object{Kind: x.ref.Kind, ID: x.ref.ID}
	huge := relocation.AppendRecord(nil, obj, &relocation.Prepare{Move: relocation.MoveID{1}, Object: obj,
		Source: "ghost", Owner: relocation.Ownership{Host: "ghost", LeaseGen: 1, ObjectGen: 1, OwnerGen: 1}, TotalLen: 88, ChunkCount: math.MaxUint32})
	hijack := relocation.AppendRecord(nil, obj, &relocation.Prepare{Move: relocation.MoveID{2}, Object: obj,
		Source: "gateway", Owner: relocation.Ownership{Host: "gateway", LeaseGen: 1, ObjectGen: 1, OwnerGen: 1 << 40}, TotalLen: 1, ChunkCount: 1})
	x.session(t, item(transport.Record, huge), item(transport.Record, hijack),
		item(transport.Frame, tellFrame(t, x.ref, "ghost", "after-prepare")))
	if !waitFor(30*time.Second, func() bool { return x.tally(t).Count["after-prepare"] == 1 }) {
		t.Fatalf("the message after the forged Prepares did not run: %+v", x.tally(t))
	}
	if owner := x.n1.must(t, "owner tally "+x.ref.ID); owner != "n1" {
		t.Fatalf("after the forged Prepares the store names %s as the owner, want n1", owner)
	}
	if grown := x.n1RSS(t) - rss; grown > 256<<20 {
		t.Fatalf("n1 grew by %d MiB", grown>>20)
	}

	// Hellos from the highest incarnations: not ghost's run (n1's
	// membership says which it is), so dropped as stale — no restart, not
	// even of ghost's own session.
	// One at a time: a newer connection of ghost's replaces an older one,
	// whose frames not yet read go with it (a real peer sends them again).
	before := x.stats(t)
	for i, inc := range []uint64{math.MaxUint64 - 1, math.MaxUint64} {
		c, err := x.dial("ghost", &x.ghost)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(linkFrame(3, 0, inc, 0, nil)); err != nil {
			t.Fatal(err)
		}
		if !waitFor(30*time.Second, func() bool { return x.stats(t).Stale >= before.Stale+uint64(i)+1 }) {
			t.Fatalf("n1 did not drop the hello of run %d of ghost as stale: %+v, before %+v", inc, x.stats(t), before)
		}
		_ = c.Close()
	}
	if s := x.stats(t); s.Restarts != before.Restarts {
		t.Fatalf("hellos of another run than the membership's restarted ghost's session: %+v, before %+v", s, before)
	}
	// ghost's own session goes on.
	x.session(t, item(transport.Frame, tellFrame(t, x.ref, "ghost", "after-hellos")))
	if !waitFor(30*time.Second, func() bool { return x.tally(t).Count["after-hellos"] == 1 }) {
		t.Fatalf("ghost's message after the forged hellos did not run: %+v", x.tally(t))
	}
	for i := range 20 {
		x.ask(t, 2+i)
	}
	if got := x.tally(t).Count["gw"]; got != 21 {
		t.Fatalf("the gateway's Asks ran %d times, want 21", got)
	}
	x.alive(t)
}

// Incoming moves of objects the sender does not own keep nothing: a
// member's Prepares, each declaring a 1 GiB move record of an object the
// Location Store does not name it the owner of (no Preflight answered
// them), and 24 MiB of chunks of each — 384 MiB in all, no record ever
// whole — are refused and dropped as they arrive; the node's memory does not grow by them (at most 256 MiB
// above where it was, and the node serves on). Before, the node kept every
// chunk of up to 256 such moves per peer, each up to MaxMoveRecord (1 GiB):
// 758 MiB of them took a node from 110 MB to 1.6 GB, and it died.
func TestIncomingMovesOfObjectsTheSenderDoesNotOwnKeepNothing(t *testing.T) {
	x := newHostile(t)
	rss := x.n1RSS(t)
	const moves, chunks, chunkLen, declared = 16, 384, 64 << 10, 1 << 30
	data := make([]byte, chunkLen)
	for m := range moves {
		obj := relocation.Object{Kind: x.ref.Kind, ID: "fake-" + strconv.Itoa(m)}
		mv := relocation.MoveID{0xa1, byte(m)}
		its := [][]byte{item(transport.Record, relocation.AppendRecord(nil, obj, &relocation.Prepare{Move: mv, Object: obj,
			Source: "ghost", Owner: relocation.Ownership{Host: "ghost", LeaseGen: x.run, ObjectGen: 1, OwnerGen: 1},
			TotalLen: declared, ChunkCount: declared / chunkLen}))}
		for c := range chunks {
			its = append(its, item(transport.Record, relocation.AppendRecord(nil, obj, &relocation.Chunk{Move: mv, Index: uint32(c), Data: data})))
		}
		x.session(t, append(its, item(transport.Frame, tellFrame(t, x.ref, "ghost", "after-move-"+strconv.Itoa(m))))...)
		if !waitFor(time.Minute, func() bool { return x.tally(t).Count["after-move-"+strconv.Itoa(m)] == 1 }) {
			t.Fatalf("the message after fake move %d did not run: %+v", m, x.tally(t))
		}
	}
	grown := x.n1RSS(t) - rss
	t.Logf("n1's RSS grew by %d MiB under %d MiB of chunks of fake moves", grown>>20, moves*chunks*chunkLen>>20)
	if grown > 256<<20 {
		t.Fatalf("n1 grew by %d MiB under %d MiB of chunks of moves it never accepted", grown>>20, moves*chunks*chunkLen>>20)
	}
	x.ask(t, 2) // the node serves on
}

// A flood from an authenticated member is bounded by what n1 keeps of
// that member's messages (Config.PeerInbound, 500 here): its messages for
// objects that need a look-up (an activation, a store call each) wait on
// its slow lane up to the bound, and past it are refused, counted — none
// is queued without end. Every message of the flood either ran once or
// was refused; the gateway is served throughout, its link untouched.
func TestAFloodFromAnAuthenticatedMemberIsRefusedPastItsBound(t *testing.T) {
	const bound, flood = 500, 5000
	x := newHostile(t, "BERTH_CHILD_PEER_INBOUND="+strconv.Itoa(bound))
	items := make([][]byte, flood)
	for i := range items {
		items[i] = item(transport.Frame, tellFrame(t, actor.Ref{Kind: "tally", ID: "flood" + strconv.Itoa(i)}, "ghost", "flood"))
	}
	x.session(t, items...)
	stats := func() actor.Stats { return x.hostStats(t) }
	if !waitFor(30*time.Second, func() bool { return stats().PeerRefused > 0 }) {
		t.Fatalf("n1 refused none of a flood of %d past a bound of %d: %+v", flood, bound, stats())
	}
	for i := range 5 { // served while the flood's look-ups run
		x.ask(t, 2+i)
	}
	var ran map[string]int
	if !waitFor(2*time.Minute, func() bool {
		if err := json.Unmarshal([]byte(x.n1.must(t, "owners flood "+strconv.Itoa(flood))), &ran); err != nil {
			t.Fatal(err)
		}
		return int64(ran["n1"])+stats().PeerRefused >= flood
	}) {
		t.Fatalf("of a flood of %d, %v activated and %d refused; want every one either", flood, ran, stats().PeerRefused)
	}
	if s := stats(); int64(ran["n1"])+s.PeerRefused != flood || ran["n1"] < bound || s.PeerRefused < flood-3*bound {
		t.Fatalf("of a flood of %d: %d ran, %d refused; want every one either, the bound's worth at least taken and most refused",
			flood, ran["n1"], s.PeerRefused)
	}
	t.Logf("of a flood of %d: %d ran, %d refused", flood, ran["n1"], stats().PeerRefused)
	x.ask(t, 7)
	x.alive(t)
}

// A member that asks and never reads what n1 sends it (here: it never
// connects again, so its link stays down) makes n1 keep at most its link's
// hard bound (tcp.Options.MaxPendingItems, 300 here) of what it sends it:
// past that the replies are refused, counted, never queued. Every Ask ran
// once; n1 serves the gateway throughout.
func TestAMemberThatNeverReadsMakesANodeKeepOnlyItsLinksBound(t *testing.T) {
	const bound, asks = 300, 3000
	x := newHostile(t, "BERTH_CHILD_MAX_PENDING="+strconv.Itoa(bound))
	items := make([][]byte, asks)
	for i := range items {
		items[i] = item(transport.Frame, jsonFrame(t, payload.Header{Type: actor.TypeName[numberedAsk](), Origin: "ghost", ReplyTo: "ghost",
			Target: payload.Target{Scope: payload.ScopeObject, Name: x.ref.Kind, ID: x.ref.ID}}, numberedAsk{Sender: "ghost", Seq: i + 1}))
	}
	x.session(t, items...)
	stats := func() actor.Stats { return x.hostStats(t) }
	if !waitFor(time.Minute, func() bool { return x.tally(t).Count["ghost"] == asks }) {
		t.Fatalf("%d of ghost's %d Asks ran", x.tally(t).Count["ghost"], asks)
	}
	// Every reply was either kept for ghost (at most the bound, with what
	// else n1 sent it) or refused.
	if !waitFor(30*time.Second, func() bool { return stats().LinkRefused >= asks-bound }) {
		t.Fatalf("n1 refused %d items to ghost, want at least %d: %+v", stats().LinkRefused, asks-bound, x.stats(t))
	}
	if s := x.stats(t); s.Backlog < uint64(asks-bound) {
		t.Fatalf("n1's transport refused %d items, want at least %d", s.Backlog, asks-bound)
	}
	x.ask(t, 2)
	x.alive(t)
}

// n1RSS returns n1's resident memory in bytes.
func (x *hostile) n1RSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(x.n1.cmd.Process.Pid) + "/status")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/<pid>/status")
	return 0
}

// pauseItem is the data of a Control item asking the receiving host to
// pause its outside sends to kind/id: the wire items' version 1, the
// pressure tag 5, the object, paused (actor/wireitems.go), spoken by hand
// as an attacker would.
func pauseItem(kind, id string) []byte {
	b := []byte{1, 5}
	b = wire.AppendString(b, kind)
	b = wire.AppendString(b, id)
	return wire.AppendBool(b, true)
}

// A member's pauses keep nothing where they do not hold, and cannot stop
// another host's sends: 100,000 pauses of objects n1 sends nothing to
// (200-byte ids) leave n1's memory where it was and n1 serving; and a
// pause sent to the gateway for the object it sends to — an object n1
// owns, not the member — is refused (the Location Store names n1), and
// the gateway's sends to it go on. Before, one such 30-byte item made all
// of a gateway's sends to the object fail for as long as the member
// stayed, and 400,000 of them took a node from 27 to 360 MB.
func TestAMembersPausesKeepNothingAndCannotStopAnothersSends(t *testing.T) {
	x := newHostile(t)
	rss := x.n1RSS(t)
	const pauses = 100_000
	long := strings.Repeat("p", 190)
	items := make([][]byte, 0, pauses+1)
	for i := range pauses {
		items = append(items, item(transport.Control, pauseItem(x.ref.Kind, long+strconv.Itoa(i))))
	}
	items = append(items, item(transport.Frame, tellFrame(t, x.ref, "ghost", "after-pauses")))
	x.session(t, items...)
	if !waitFor(2*time.Minute, func() bool { return x.tally(t).Count["after-pauses"] == 1 }) {
		t.Fatalf("the message after the pauses did not run: %+v", x.tally(t))
	}
	grown := x.n1RSS(t) - rss
	t.Logf("n1's RSS grew by %d MiB under %d pauses of objects it sends nothing to", grown>>20, pauses)
	if grown > 48<<20 {
		t.Fatalf("n1 grew by %d MiB under %d pauses it should keep nothing of", grown>>20, pauses)
	}
	x.alive(t)

	// A second gateway, which counts what it refuses, sends to ref.
	store, members, closePG := openPostgres(t, x.db)
	t.Cleanup(closePG)
	rej := &rejectLog{}
	gw, err := actor.NewHost(actor.Config{Name: "gw2", Transport: newTLSAttacher(tcp.Options{}), Store: store,
		Membership: members, Logger: quietLogger(), Gateway: true, Observer: rej, SendTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	gw.Register(tallyKind())
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	ctx := context.Background()
	send := func(seq int) {
		t.Helper()
		if got, err := actor.Ask[numberedAsk, int](ctx, gw, x.ref, numberedAsk{Sender: "gw2", Seq: seq}); err != nil || got != seq {
			t.Fatalf("gw2's Ask %d: %d, %v", seq, got, err)
		}
	}
	send(1)
	if !waitFor(time.Minute, func() bool {
		c, err := dialHost(gw.Addr(), "gw2", "ghost", &x.ghost)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	}) {
		t.Fatal("gw2 did not take ghost, a member, as a peer within a minute")
	}
	c, err := dialHost(gw.Addr(), "gw2", "ghost", &x.ghost)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Write(linkFrame(1, transport.Control, x.run, 1, pauseItem(x.ref.Kind, x.ref.ID)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !waitFor(time.Minute, func() bool {
		rej.mu.Lock()
		defer rej.mu.Unlock()
		return rej.m[actor.RejectProtocol] >= 1
	}) {
		t.Fatalf("gw2 did not refuse ghost's pause: %s", rej)
	}
	for i := range 10 { // each would wait SendTimeout and fail if the pause had been taken
		if err := actor.Tell(ctx, gw, x.ref, numbered{Sender: "gw2-tell", Seq: i + 1}); err != nil {
			t.Fatalf("gw2's Tell %d after ghost's pause: %v", i+1, err)
		}
	}
	send(2)
	x.alive(t)
}

// A frame a member sends again as a new link item — a replay, which the
// link's own numbering does not catch — runs once in a node process: its
// stamp had run, so the copy is a repeat, dropped and counted. Before, it
// ran a second time, as late.
func TestAReplayedFrameRunsOnceInANodeProcess(t *testing.T) {
	x := newHostile(t)
	frame := jsonFrame(t, payload.Header{Type: actor.TypeName[numbered](), Origin: "ghost", Epoch: 77, Seq: 1,
		Target: payload.Target{Scope: payload.ScopeObject, Name: x.ref.Kind, ID: x.ref.ID}}, numbered{Sender: "replayed", Seq: 1})
	before := x.hostStats(t).Repeats
	x.session(t, item(transport.Frame, frame), item(transport.Frame, frame), item(transport.Frame, frame),
		item(transport.Frame, tellFrame(t, x.ref, "ghost", "after-replays")))
	if !waitFor(30*time.Second, func() bool { return x.tally(t).Count["after-replays"] == 1 }) {
		t.Fatalf("the message after the replays did not run: %+v", x.tally(t))
	}
	if n := x.tally(t).Count["replayed"]; n != 1 {
		t.Fatalf("a frame sent three times ran %d times", n)
	}
	if got := x.hostStats(t).Repeats - before; got != 2 {
		t.Fatalf("%d repeats counted, want the 2 copies", got)
	}
	x.ask(t, 2)
	x.alive(t)
}
