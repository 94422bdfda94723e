package actor

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
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
	"stateGate":     "persister",
	"peerView":      "peers",
	"inbound":       "inbounds",
	"deferredSends": "admission",
	"moveDriver":    "moveTable", "remoteOps": "moveTable",
}

// The host's parts call only downward: no method of a part calls a
// method of a part above it, or of Host. (A part reaches a lower part
// through the host it belongs to; what a lower part needs from a higher
// one it returns to its caller.)
func TestHostPartsCallOnlyDownward(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	pkg := pkgs["actor"]
	if pkg == nil {
		t.Fatal("no package actor here")
	}
	var files []*ast.File
	for _, f := range pkg.Files {
		files = append(files, f)
	}
	exports := exportData(t)
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}}
	if _, err := (&types.Config{Importer: imp}).Check("github.com/berthrt/berth/actor", fset, files, info); err != nil {
		t.Fatal(err)
	}
	recvName := func(tp types.Type) string {
		if p, ok := tp.(*types.Pointer); ok {
			tp = p.Elem()
		}
		if n, ok := tp.(*types.Named); ok {
			return n.Obj().Name()
		}
		return ""
	}
	var bad []string
	methods := 0
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || fd.Body == nil {
				continue
			}
			var caller string
			switch rt := fd.Recv.List[0].Type.(type) {
			case *ast.StarExpr:
				caller = fmt.Sprint(rt.X)
			case *ast.Ident:
				caller = rt.Name
			}
			from, ok := partRank[caller]
			if !ok {
				continue
			}
			methods++
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				s := info.Selections[sel]
				if s == nil || s.Kind() != types.MethodVal {
					return true
				}
				callee := recvName(s.Obj().(*types.Func).Type().(*types.Signature).Recv().Type())
				to, ok := partRank[callee]
				if !ok || to <= from || callee == caller {
					return true
				}
				bad = append(bad, fmt.Sprintf("%s: (%s).%s calls (%s).%s", fset.Position(call.Pos()), caller, fd.Name.Name, callee, sel.Sel.Name))
				return true
			})
		}
	}
	if methods < 100 {
		t.Fatalf("found only %d methods of the parts: the check does not see the package", methods)
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
}

// exportData maps the import paths actor depends on to their compiled
// export data (go list -export).
func exportData(t *testing.T) map[string]string {
	t.Helper()
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goTool, "list", "-export", "-deps", "-f", "{{.ImportPath}}={{.Export}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if p, f, ok := strings.Cut(sc.Text(), "="); ok && f != "" {
			m[p] = f
		}
	}
	return m
}
