// Command archmeasure prints how well actor/'s parts respect their
// layering (package internal/archcheck), and the repository's largest
// non-test files. Run it from the module root:
//
//	go run ./internal/archcheck/cmd/archmeasure [-v]
//
// The ranks are not copied here: archcheck.Actor reads them from the
// partRank composite literal of actor/layers_test.go, the map
// TestHostPartsReachOnlyDownward checks, so that there is one list. With -v
// it prints every site behind each count; -n sets how many of the largest
// files it prints.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/berthrt/berth/internal/archcheck"
)

func main() {
	module := flag.String("module", ".", "the module's root `directory`")
	n := flag.Int("n", 5, "how many of the largest files to print")
	verbose := flag.Bool("v", false, "print every site")
	flag.Parse()

	cfg, err := archcheck.Actor(*module)
	if err != nil {
		fail(err)
	}
	r, err := archcheck.Analyze(cfg)
	if err != nil {
		fail(err)
	}
	files, err := archcheck.LargestFiles(*module, *n)
	if err != nil {
		fail(err)
	}
	w := bufio.NewWriter(os.Stdout)
	print(w, "actor", cfg.Root, r, files, *verbose)
	w.Flush()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "archmeasure:", err)
	os.Exit(1)
}

func print(w io.Writer, dir, root string, r *archcheck.Report, files []archcheck.FileSize, verbose bool) {
	row := func(label string, format string, args ...any) {
		fmt.Fprintf(w, "%-44s %s\n", label, fmt.Sprintf(format, args...))
	}
	sites := func(s []archcheck.Site) {
		if verbose {
			for _, x := range s {
				fmt.Fprintf(w, "    %s\n", x)
			}
		}
	}
	fmt.Fprintf(w, "%s: %d parts ranked (%d methods of them), root %s\n", dir, len(r.Parts), r.Methods, root)
	if len(r.MissingParts) > 0 {
		row("ranked names with no type", "%d %v", len(r.MissingParts), r.MissingParts)
	}
	row("fields holding the root", "%d, in %d types (%d of them parts)", len(r.HoldRoot), len(r.HoldRootTypes), len(r.HoldRootParts))
	if verbose {
		fmt.Fprintf(w, "    types: %s\n", strings.Join(r.HoldRootTypes, " "))
	}
	sites(r.HoldRoot)
	row("hops through the root", "%d (%d to a part, %d method calls, %d to other fields)",
		len(r.RootHops), r.RootHopsToParts, r.RootHopsToMethods, len(r.RootHops)-r.RootHopsToParts-r.RootHopsToMethods)
	sites(r.RootHops)
	row("distinct fields of another part touched", "%d (%d sites)", len(r.ForeignFields), len(r.ForeignFieldSites))
	if verbose {
		fmt.Fprintf(w, "    %s\n", strings.Join(r.ForeignFields, " "))
	}
	sites(r.ForeignFieldSites)
	row("distinct own fields touched", "%d (%d sites)", len(r.OwnFields), len(r.OwnFieldSites))
	row("upward field accesses", "%d", len(r.UpwardFields))
	sites(r.UpwardFields)
	row("upward calls", "%d", len(r.UpwardCalls))
	sites(r.UpwardCalls)
	row("locks of another part's mutex", "%d (and %d unlocks)", len(r.ForeignLocks), len(r.ForeignUnlocks))
	sites(r.ForeignLocks)
	sites(r.ForeignUnlocks)
	row("files", "%d", len(r.Files))
	row("linked pairs / possible", "%d / %d", r.LinkedPairs, r.PossiblePairs())
	row("mutual pairs", "%d", r.MutualPairs)
	row("largest strongly connected component", "%d of %d files", len(r.LargestSCC), len(r.Files))
	if verbose {
		fmt.Fprintf(w, "    %s\n", strings.Join(r.LargestSCC, " "))
		for _, e := range r.Edges {
			fmt.Fprintf(w, "    %s -> %s (%d names: %s)\n", e.From, e.To, e.Names, strings.Join(e.Used, " "))
		}
	}
	row("mutexes", "%d", len(r.Mutexes))
	sites(r.Mutexes)
	row("mutexes missing from the lock document", "%d", len(r.MutexesMissing))
	for _, m := range r.MutexesMissing {
		fmt.Fprintf(w, "    %s\n", m)
	}
	most := append([]archcheck.MayCall(nil), r.MayCall...)
	sort.SliceStable(most, func(i, j int) bool { return len(most[i].Uses) > len(most[j].Uses) })
	var top []string
	for _, m := range most[:min(3, len(most))] {
		top = append(top, fmt.Sprintf("%s %d", m.File, len(m.Uses)))
	}
	row("files with a May call header", "%d (most other parts used: %s)", len(r.MayCall), strings.Join(top, ", "))
	if verbose {
		for _, m := range r.MayCall {
			fmt.Fprintf(w, "    %s %v\n      promises: %s\n      uses:     %s\n", m.File, m.Parts, m.Promise, strings.Join(m.Uses, " "))
		}
	}
	fmt.Fprintf(w, "largest non-test files of the repository:\n")
	for _, f := range files {
		fmt.Fprintf(w, "    %6d %s\n", f.Lines, f.Path)
	}
}
