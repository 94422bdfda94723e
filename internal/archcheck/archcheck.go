// Package archcheck measures how well a package's "parts" respect their
// layering: the part types a composition root wires together, each with a
// rank, where a part may use parts of lower rank but never of higher rank.
// It was written for actor/ (the root is Host, the ranks are partRank in
// actor/layers_test.go) and reproduces the measures of the architecture
// review: who holds the root, the hops through it, the fields one part
// touches of another, the upward field accesses and calls, the locks taken
// on another part's mutex, the file graph's largest cycle, the mutexes the
// lock-order document leaves out, and the largest files of the repository.
//
// Analyze type-checks the package's non-test files (the go/build default
// context's list) against the compiled export data of its imports
// (go list -export -deps, as TestHostPartsReachOnlyDownward does), then
// walks the syntax once. It reports sites (file:line and what), so that a
// count can be printed by anyone (cmd/archmeasure) and held by a test.
//
// Definitions, where a choice had to be made:
//
//   - A part is a type named in Config.Ranks; "methods of a part" are the
//     methods whose receiver is that type, with the func literals inside
//     them. The root is excluded as a caller in every part measure.
//   - A field is declared by a named type (or a package-level variable);
//     a field of an anonymous struct nested in a field of type T is T's,
//     named "T.outer.field". It counts as a field of the part the type
//     belongs to: the type itself if it is ranked; else, if the fields of
//     one type U only hold it (as T, *T, []T, [n]T, or a map or chan of
//     T), U's part; else no part's. So ownerShard, held only by
//     kindRuntime, is kindRuntime's, and lifecycle, held only by Host, is
//     Host's. An API type belongs to no part. A field promoted into a part from an embedded type that
//     belongs to no part is the part's.
//   - Fields of the root (and of the types that belong to it) are never
//     counted as another part's fields: a selection on the root is a root
//     hop (RootHops) instead.
//   - Calls of the root's methods do count as upward calls (the root has
//     the highest rank), as in TestHostPartsReachOnlyDownward. Calls through
//     an interface never count: an interface is the allowed seam.
//   - A lock counts as foreign when the mutex's type belongs (as above) to
//     another part than the method's, or to none: ownerShard.mu is
//     kindRuntime's own, lifecycle.mu is foreign to every part but the
//     root. Unlocks are counted apart from locks.
package archcheck

import (
	"fmt"
	"go/token"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Config says which package to analyze and how its parts are ranked.
type Config struct {
	Dir        string         // the package directory (e.g. "actor")
	ImportPath string         // the package's import path, e.g. "github.com/berthrt/berth/actor"
	Ranks      map[string]int // part type name -> rank (actor's partRank); the root is one of them
	Root       string         // the composition root type, "Host"
	API        []string       // types besides Root that may hold a *Root (API values handed to users, e.g. "Context")
	LockDoc    string         // path of the lock-order document (actor/LOCK_ORDER.md); "" to skip
	// Groups names, for a ranked type that is one of several types of one
	// part, that part's principal type (owner -> ownerTable). The types
	// of one part may touch each other's fields and locks: neither is
	// foreign nor upward.
	Groups map[string]string
}

// Site is one place in the package where a measure found something.
type Site struct {
	Pos  string // file:line, the file's base name
	What string // what was found there, e.g. "peers.h"
}

func (s Site) String() string { return s.Pos + " " + s.What }

// MayCall is what one file's "May call:" header promises, beside the
// parts its code actually uses.
type MayCall struct {
	File      string   // the file's base name
	Promise   string   // the header's text after "May call:", lines joined
	Parts     []string // the parts declared in the file
	Receivers []string // the parts (not the root) whose methods the file declares, or whose types' methods (partOf), sorted
	Uses      []string // the other parts (not the root) whose methods or fields its code selects, sorted
}

// Edge is one edge of the file graph: From uses Names distinct objects
// declared in To.
type Edge struct {
	From, To string
	Names    int      // how many declarations of To From uses
	Used     []string // their names, sorted (a method or field as "T.name")
}

// Report holds the measures of one package. Every slice of sites is in
// file and line order.
type Report struct {
	// Parts are the ranked types declared in the package; MissingParts the
	// ranked names that no type of the package has (a stale rank).
	Parts, MissingParts []string
	// Methods is the number of methods of the parts (the root excluded):
	// a check that sees few of them does not see the package.
	Methods int

	// HoldRoot: one site per field, of a struct type other than the root
	// and the API types, whose type mentions the root ("peers.h").
	HoldRoot []Site
	// HoldRootTypes are the types those fields belong to; HoldRootParts
	// the ranked ones among them.
	HoldRootTypes, HoldRootParts []string

	// RootHops: every selector x.f whose x is of the root's type (or a
	// pointer to it), in methods of types other than the root and the API
	// types and in package-level funcs that neither take nor return the
	// root (those are the root's own code). RootHopsToParts counts those that
	// select a field whose type is a part, RootHopsToMethods those that
	// select a method of the root.
	RootHops                           []Site
	RootHopsToParts, RootHopsToMethods int

	// ForeignFields are the distinct fields ("Type.field") of a part that
	// methods of a different part select; ForeignFieldSites every such
	// selection. OwnFields and OwnFieldSites are the same for a part's own
	// fields.
	ForeignFields, OwnFields         []string
	ForeignFieldSites, OwnFieldSites []Site

	// UpwardFields: selections, in methods of a part, of a field of a part
	// of higher rank. UpwardCalls: calls and method values, in methods of
	// a part, of a method of a part of higher rank (not through an
	// interface).
	UpwardFields, UpwardCalls []Site

	// ForeignLocks: in methods of a part, a Lock, RLock, TryLock or
	// TryRLock of a sync.Mutex or sync.RWMutex field (or package-level
	// variable) that does not belong to the part. ForeignUnlocks: the
	// Unlock and RUnlock calls of such mutexes.
	ForeignLocks, ForeignUnlocks []Site

	// The file graph: file A -> file B when A uses an object declared in B
	// (a package-level name, a method, a struct field).
	Files       []string
	Edges       []Edge
	LinkedPairs int      // unordered pairs with an edge either way
	MutualPairs int      // pairs with an edge both ways
	LargestSCC  []string // the files of the largest strongly connected component, sorted

	// Mutexes: every sync.Mutex or sync.RWMutex struct field ("Type.field")
	// and package-level mutex variable. MutexesMissing: those the lock
	// document does not name (see Analyze).
	Mutexes, MutexesMissing []Site

	// MayCall: one entry per file with a "May call:" header.
	MayCall []MayCall
	// FileParts maps each file to the parts whose methods it declares (a
	// method of a type that belongs to a part, partOf, counts for the
	// part), sorted; files that declare none are left out.
	FileParts map[string][]string
}

// PossiblePairs is the number of unordered pairs of files.
func (r *Report) PossiblePairs() int { n := len(r.Files); return n * (n - 1) / 2 }

// Analyze type-checks the package in cfg.Dir and measures it.
//
// A mutex counts as named by the lock document when its "Type.field" text
// appears there between non-identifier characters; a mutex of an
// anonymous struct nested in type T ("requestTable.shards.mu") also when
// the document names T in backquotes (`requestTable`).
func Analyze(cfg Config) (*Report, error) {
	if cfg.Root == "" {
		return nil, fmt.Errorf("archcheck: Config.Root is empty")
	}
	p, err := load(cfg)
	if err != nil {
		return nil, err
	}
	a := newAnalysis(cfg, p)
	r := &Report{}
	a.parts(r)
	a.holdRoot(r)
	a.walk(r)
	a.fileGraph(r)
	if err := a.mutexes(r, cfg.LockDoc); err != nil {
		return nil, err
	}
	a.mayCall(r)
	return r, nil
}

// pos is a position as file:line with the file's base name.
func pos(fset *token.FileSet, p token.Pos) string {
	q := fset.Position(p)
	return filepath.Base(q.Filename) + ":" + strconv.Itoa(q.Line)
}

// sortSites sorts sites by file, then line, then what.
func sortSites(s []Site) {
	sort.SliceStable(s, func(i, j int) bool {
		fi, li := splitPos(s[i].Pos)
		fj, lj := splitPos(s[j].Pos)
		if fi != fj {
			return fi < fj
		}
		if li != lj {
			return li < lj
		}
		return s[i].What < s[j].What
	})
}

func splitPos(p string) (string, int) {
	i := strings.LastIndexByte(p, ':')
	if i < 0 {
		return p, 0
	}
	n, _ := strconv.Atoi(p[i+1:])
	return p[:i], n
}

// sortedKeys returns a set's members, sorted.
func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
