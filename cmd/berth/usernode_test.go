package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthrt/berth/actor"
	"github.com/berthrt/berth/examples/cart"
	"github.com/berthrt/berth/examples/counter"
	"github.com/berthrt/berth/internal/pgtest"
	"github.com/berthrt/berth/node"
	"github.com/berthrt/berth/relocation"
	"github.com/berthrt/berth/transport/tcp"
)

// buildCartNode builds the example program of package node's users,
// examples/cart/cartnode, into a temporary directory.
func buildCartNode(t *testing.T) string {
	return buildProgram(t, "cartnode", "github.com/berthrt/berth/examples/cart/cartnode")
}

// A program's own kind runs as a cluster of nodes beside berth node: two
// cartnode processes (examples/cart/cartnode, one call to node.Main) and a
// berth node share one database. Carts activate only on the cartnodes,
// counters only on the berth node. One cartnode is configured by a
// -config file and logs JSON; the other drains on SIGTERM, exits 0 and
// its carts go on, state and all, on the first.
func TestAProgramsOwnKindsRunAsNodesBesideBerthNodes(t *testing.T) {
	const carts, counters = 40, 10
	db := pgtest.New(t)
	berth, cartnode := buildBerth(t), buildCartNode(t)
	ca := testCA(t, "node-1", "cart-1", "cart-2", "client")
	ctx := context.Background()
	start := func(command []string, name string, extra ...string) *nodeProc {
		t.Helper()
		n, err := startNodeCommand(ctx, command, name, db.URL, ca, extra...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.cmd.Process.Kill(); <-n.done })
		return n
	}
	conf := filepath.Join(t.TempDir(), "cart-1.conf")
	if err := os.WriteFile(conf, []byte("# cart-1's settings\nlog-format = json\nhttp = 127.0.0.1:0\nstop-timeout = 45s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start([]string{berth, "node"}, "node-1")
	cart1 := start([]string{cartnode}, "cart-1", "-config", conf)
	cart2 := start([]string{cartnode}, "cart-2")
	if cart1.http == "" {
		t.Fatalf("cart-1 did not serve HTTP, which its -config file sets:\n%s", cart1.stderr())
	}
	if code, body := get(t, "http://"+cart1.http+"/readyz"); code != 200 {
		t.Fatalf("cart-1's /readyz: %d %q", code, body)
	}
	client, store, closeClient, err := startGateway(ctx, db.URL, "client", tcp.Options{TLS: testHostTLS(t, ca, "client")}, 3, cart.Kind())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeClient)

	cartRef := func(i int) actor.Ref { return actor.Ref{Kind: cart.Name, ID: strconv.Itoa(i)} }
	hostOf := func(kind string, i int) string {
		row, err := store.Get(ctx, relocation.Object{Kind: kind, ID: strconv.Itoa(i)})
		if err != nil {
			t.Fatalf("%s %d: %v", kind, i, err)
		}
		return row.Host
	}
	onCart2 := 0
	for i := range carts {
		for q := 1; q <= 3; q++ {
			if err := actor.Tell(ctx, client, cartRef(i), cart.Add{Item: "item-" + strconv.Itoa(q), Qty: i + q}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := actor.Ask[cart.Get, cart.Cart](ctx, client, cartRef(i), cart.Get{}); err != nil {
			t.Fatalf("cart %d: %v", i, err)
		}
		switch h := hostOf(cart.Name, i); h {
		case "cart-2":
			onCart2++
		case "cart-1":
		default:
			t.Fatalf("cart %d activated on %s, which does not host carts", i, h)
		}
	}
	for i := range counters {
		if err := actor.Tell(ctx, client, counterRef(i), counter.Add{Sender: "s", Seq: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := actor.Ask[counter.Read, counter.Counter](ctx, client, counterRef(i), counter.Read{}); err != nil {
			t.Fatalf("counter %d: %v", i, err)
		}
		if h := hostOf(counter.Name, i); h != "node-1" {
			t.Fatalf("counter %d activated on %s; only node-1 hosts counters", i, h)
		}
	}
	if onCart2 == 0 {
		t.Fatal("no cart on cart-2")
	}
	t.Logf("%d of %d carts on cart-2; stopping it", onCart2, carts)
	if st := cart2.signal(syscall.SIGTERM, time.Minute); cart2.cmd.ProcessState.ExitCode() != node.ExitOK {
		t.Fatalf("cart-2 %s after SIGTERM, want exit 0:\n%s", st, cart2.stderr())
	}
	if moves, _ := parseStats(lastStats(cart2)); moves != onCart2 {
		t.Errorf("cart-2 made %d moves draining, want %d (its carts)", moves, onCart2)
	}
	for i := range carts {
		c, err := actor.Ask[cart.Get, cart.Cart](ctx, client, cartRef(i), cart.Get{})
		want := map[string]int{"item-1": i + 1, "item-2": i + 2, "item-3": i + 3}
		if err != nil || fmt.Sprint(c.Items) != fmt.Sprint(want) {
			t.Fatalf("cart %d: %v, %v; want %v", i, c.Items, err, want)
		}
		if h := hostOf(cart.Name, i); h != "cart-1" {
			t.Fatalf("cart %d on %s after cart-2 drained, want cart-1", i, h)
		}
	}
	for i := range counters {
		c, err := actor.Ask[counter.Read, counter.Counter](ctx, client, counterRef(i), counter.Read{})
		if err != nil || c.Count["s"] != 1 {
			t.Fatalf("counter %d: %+v, %v", i, c, err)
		}
	}
	// cart-1 logs JSON, as its file says: every line is an object with a
	// level, a message and its name.
	lines := 0
	sc := bufio.NewScanner(strings.NewReader(cart1.stderr()))
	for sc.Scan() {
		var rec struct{ Level, Msg, Node string }
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil || rec.Level == "" || rec.Msg == "" || rec.Node != "cart-1" {
			t.Fatalf("cart-1's log line %q is not a JSON record of cart-1 (%v)", sc.Text(), err)
		}
		lines++
	}
	if lines == 0 {
		t.Fatal("cart-1 logged nothing")
	}
}

// lastStats is the last "stats" line n wrote.
func lastStats(n *nodeProc) string {
	n.statsMu.Lock()
	defer n.statsMu.Unlock()
	if len(n.stats) == 0 {
		return "stats"
	}
	return n.stats[len(n.stats)-1]
}
