package tcp_test

import (
	"testing"

	"github.com/berthrt/berth/internal/testutil"
	"github.com/berthrt/berth/transport"
	"github.com/berthrt/berth/transport/tcp"
)

// A peer's role is the one its certificate's identity URI names, on both
// ends of a link: a gateway's certificate (urn:berth:gateway:g) makes it a
// gateway to the node it dials and to the node that dials it; a node's
// stays a node. The transport's own role is its certificate's.
func TestAPeersRoleIsTheOneItsCertificateNames(t *testing.T) {
	c := newCluster(testOptions(), false)
	sa := newSink()
	a := c.start(t, "a", sa)
	t.Cleanup(func() { _ = a.Close(true) })
	cert, err := testCA().IssueTLSAs(transport.RoleGateway, "g")
	if err != nil {
		t.Fatal(err)
	}
	ca := testCA().Pool()
	opts := testOptions()
	opts.TLS = &tcp.TLS{Certificate: cert, CA: ca}
	sg := newSink()
	g, err := tcp.Listen("g", sg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close(true) })
	if err := g.AddPeer("a", a.Addr()); err != nil {
		t.Fatal(err)
	}
	if err := a.AddPeer("g", g.Addr()); err != nil {
		t.Fatal(err)
	}
	if g.Role() != transport.RoleGateway || a.Role() != transport.RoleNode {
		t.Fatalf("own roles: g %v, a %v; want gateway, node", g.Role(), a.Role())
	}
	if err := g.Send("a", transport.Item{Kind: transport.Frame, Data: []byte("from g")}); err != nil {
		t.Fatal(err)
	}
	if err := a.Send("g", transport.Item{Kind: transport.Frame, Data: []byte("from a")}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "an item each way", func() bool { return len(sa.from("g")) == 1 && len(sg.from("a")) == 1 })
	if r := a.PeerRole("g"); r != transport.RoleGateway {
		t.Fatalf("a sees g as %v, want gateway", r)
	}
	if r := g.PeerRole("a"); r != transport.RoleNode {
		t.Fatalf("g sees a as %v, want node", r)
	}
}

// A certificate with identity URIs names exactly the members they name:
// the DNS names added to it for hostname checks (berth certs -hosts, say
// "b") name no member, so its holder cannot act as b. A certificate
// without identity URIs (an earlier version's) names its DNS names, as a
// node.
func TestACertificatesDNSNamesNameNoMemberWhenItHasIdentityURIs(t *testing.T) {
	a, b, sa, sb := pairOf(t, testOptions())
	checkExchange(t, a, b, sa, sb, "before", 3)
	c, err := testCA().IssueTLS("c", "b") // -hosts b
	if err != nil {
		t.Fatal(err)
	}
	refused := a.Stats().Refused
	if conn, err := dialRaw(t, a, testCA(), &c, "b"); err == nil {
		_ = conn.Close()
		t.Fatal("c's certificate, with b among its DNS names, was accepted as b")
	}
	testutil.WaitFor(t, "c claiming b refused", func() bool { return a.Stats().Refused > refused })
	checkExchange(t, a, b, sa, sb, "after", 3)
}
