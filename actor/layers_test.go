package actor

import (
	"regexp"
	"testing"

	"github.com/berthrt/berth/internal/archcheck"
)

// partRank is the order of the host's parts (docs/architecture.md,
// "Inside actor"): a part may call methods of its own part and of parts
// below it, never of a part above it nor of Host, which only wires the
// parts and holds the API. Types not listed are values any part may use.
var partRank = map[string]int{
	// Leaves: serial work runners, the route table, counters, the
	// background services, the peer view, the move log, the event log.
	"serial": 0, "routes": 0, "hostStats": 0, "services": 0, "schedule": 0, "peerView": 0, "moveLog": 0, "eventLog": 0,
	// The host's life (running, draining, closed), the lease as turns
	// read it, the objects outside senders wait for.
	"lifecycle": 0, "leaseGate": 0, "pressureSet": 0,
	// What is sent to peers, and the credit to send.
	"peers": 1,
	// Failure suspicions from the links, checked against the store.
	"suspicions": 1,
	// Asks waiting for their reply, and replies on their way.
	"requestTable": 2,
	// The owners: the kinds' shards, each owner's turns and receive side.
	"ownerTable": 3, "owner": 3, "kindRuntime": 3, "channelRuntime": 3,
	// The owners' durable state: writes, flushes, output gates.
	"persister": 3, "stateGate": 3,
	// Failure facts, skip notices waiting for a leaving host.
	"gapFacts": 2,
	// Where objects run: look-ups, forwarding, bounces, the terminal paths.
	"router": 5,
	// From a send to a queue.
	"admission": 6, "deferredSends": 6,
	// Moves, either side, and Relocate asked across hosts.
	"moveTable": 7, "moveDriver": 7, "remoteOps": 7,
	// What comes in from peers.
	"inbounds": 8, "inbound": 8,
	// Draining and leaving; the lease.
	"drainer": 9, "leaseKeeper": 9,
	// The composition root and the API.
	"Host": 10,
}

// partOf groups the types that make one part, naming the part's
// principal type: they may touch each other's fields and locks. Every
// other part reaches them through the principal's methods.
var partOf = map[string]string{
	"owner": "ownerTable", "kindRuntime": "ownerTable", "channelRuntime": "ownerTable",
	"persister": "ownerTable", "stateGate": "ownerTable",
	"schedule":      "services",
	"peerView":      "peers",
	"inbound":       "inbounds",
	"deferredSends": "admission",
	"moveDriver":    "moveTable", "remoteOps": "moveTable",
	"leaseGate": "leaseKeeper",
}

// partWords are the words that name a part (by its principal type) in a
// file's "May call:" line; a leaf (rank 0) is also named by "leaves".
var partWords = map[string][]string{
	"ownerTable":   {"owners", "owner", "owner's"},
	"peers":        {"peers", "peerView", "peer view"},
	"requestTable": {"requests"},
	"gapFacts":     {"gaps"},
	"router":       {"router"},
	"admission":    {"admission"},
	"moveTable":    {"mover", "moves", "move's"},
	"inbounds":     {"inbound"},
	"drainer":      {"drain", "drainer"},
	"leaseKeeper":  {"lease", "lease gate"},
	"suspicions":   {"suspicions"},
	"lifecycle":    {"lifecycle"},
}

// Each file's "May call:" line names every part (of another part than the
// file's own) whose methods or fields the file's code uses: by a word of
// partWords, "leaves" for a leaf, or "every part below it" for a part of
// a lower rank.
func TestEachFilesMayCallLineNamesThePartsItUses(t *testing.T) {
	cfg, err := archcheck.Actor("..")
	if err != nil {
		t.Fatal(err)
	}
	r, err := archcheck.Analyze(cfg)
	if err != nil {
		t.Fatal(err)
	}
	group := func(p string) string {
		if g, ok := partOf[p]; ok {
			return g
		}
		return p
	}
	named := func(promise, word string) bool {
		return regexp.MustCompile(`(?i)(^|[^\pL\pN_'])` + regexp.QuoteMeta(word) + `($|[^\pL\pN_])`).MatchString(promise)
	}
	if len(r.MayCall) < 20 {
		t.Fatalf("found only %d May call lines", len(r.MayCall))
	}
	for _, mc := range r.MayCall {
		own, top := map[string]bool{}, 0
		for _, p := range append(append([]string(nil), mc.Parts...), mc.Receivers...) {
			own[group(p)] = true
			top = max(top, partRank[p])
		}
		for _, u := range mc.Uses {
			g := group(u)
			if own[g] {
				continue
			}
			ok := partRank[u] == 0 && named(mc.Promise, "leaves") ||
				partRank[g] < top && named(mc.Promise, "every part below it") ||
				named(mc.Promise, u)
			for _, w := range partWords[g] {
				ok = ok || named(mc.Promise, w)
			}
			if !ok {
				t.Errorf("%s uses %s (%s's part), which its May call line does not name: %q", mc.File, u, g, mc.Promise)
			}
		}
	}
}

// The host's parts reach only downward, and only through what they hold:
// no type but Host and the API's values holds the host; nothing reaches a
// part through it; no method of a part calls a method of a part above it
// or reads or writes a field of one; no part takes a mutex of another part
// (it asks that part's methods); and LOCK_ORDER.md names every mutex.
// The measures are internal/archcheck's (go run
// ./internal/archcheck/cmd/archmeasure prints them all, with -v every
// site).
func TestHostPartsReachOnlyDownward(t *testing.T) {
	cfg, err := archcheck.Actor("..")
	if err != nil {
		t.Fatal(err)
	}
	r, err := archcheck.Analyze(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Methods < 300 {
		t.Fatalf("found only %d methods of the parts: the check does not see the package", r.Methods)
	}
	for _, p := range r.MissingParts {
		t.Errorf("partRank names %s, which is no type of actor", p)
	}
	for _, c := range []struct {
		what  string
		sites []archcheck.Site
	}{
		{"a field holding the host", r.HoldRoot},
		{"a hop through the host", r.RootHops},
		{"an upward call", r.UpwardCalls},
		{"an upward field access", r.UpwardFields},
		{"a lock of another part's mutex", r.ForeignLocks},
		{"an unlock of another part's mutex", r.ForeignUnlocks},
		{"a mutex LOCK_ORDER.md does not name", r.MutexesMissing},
	} {
		for _, s := range c.sites {
			t.Errorf("%s: %s: %s", c.what, s.Pos, s.What)
		}
	}
	// A part's methods live in its part's files: no file holds methods
	// of two parts.
	for file, parts := range r.FileParts {
		groups := map[string]bool{}
		for _, p := range parts {
			if g, ok := partOf[p]; ok {
				p = g
			}
			groups[p] = true
		}
		if len(groups) > 1 {
			t.Errorf("%s holds methods of several parts: %v", file, parts)
		}
	}
	// What the parts still touch of each other's state stays small, and
	// the files form no cycle beyond the owners' own (their turns, the
	// Context handlers get, the kinds' definitions, the targets).
	const maxForeignFields, maxCycle = 20, 8
	if n := len(r.ForeignFields); n > maxForeignFields {
		t.Errorf("the parts touch %d distinct fields of other parts, more than %d: %v", n, maxForeignFields, r.ForeignFields)
	}
	if n := len(r.LargestSCC); n > maxCycle {
		t.Errorf("the largest cycle of files holds %d, more than %d: %v", n, maxCycle, r.LargestSCC)
	}
}
