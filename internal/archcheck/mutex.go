package archcheck

import (
	"fmt"
	"go/ast"
	"go/types"
	"os"
	"regexp"
	"sort"
	"strings"
)

// mutexes fills Mutexes and, if doc is not "", MutexesMissing.
func (a *analysis) mutexes(r *Report, doc string) error {
	nested := map[string]string{} // a nested mutex's name -> its owner
	for _, f := range a.fieldList {
		if isMutex(f.Type()) {
			fi := a.fields[f]
			r.Mutexes = append(r.Mutexes, Site{pos(a.p.fset, f.Pos()), fi.name})
			if fi.nested {
				nested[fi.name] = fi.owner
			}
		}
	}
	scope := a.p.pkg.Scope()
	for _, name := range scope.Names() {
		if v, ok := scope.Lookup(name).(*types.Var); ok && isMutex(v.Type()) {
			r.Mutexes = append(r.Mutexes, Site{pos(a.p.fset, v.Pos()), name})
		}
	}
	sortSites(r.Mutexes)
	if doc == "" {
		return nil
	}
	b, err := os.ReadFile(doc)
	if err != nil {
		return fmt.Errorf("archcheck: %v", err)
	}
	text := string(b)
	for _, m := range r.Mutexes {
		if names(text, m.What) {
			continue
		}
		if owner, ok := nested[m.What]; ok && strings.Contains(text, "`"+owner+"`") {
			continue
		}
		r.MutexesMissing = append(r.MutexesMissing, m)
	}
	return nil
}

// names reports whether text holds name between characters that cannot
// be part of an identifier (so "low.mu" is not in "slow.mu" nor in
// "low.mutex").
func names(text, name string) bool {
	re := regexp.MustCompile(`(^|[^\pL\pN_])` + regexp.QuoteMeta(name) + `($|[^\pL\pN_])`)
	return re.MatchString(text)
}

// mayCall fills MayCall: for each file with a "May call:" header, its
// text and the other parts the file's code selects a method or field of.
// A header is a comment line holding "May call:"; its text runs on over
// the lines after it up to a blank line or the next entry ("Invariants:").
func (a *analysis) mayCall(r *Report) {
	declaredIn := map[string][]string{}
	for _, p := range r.Parts {
		if p == a.root {
			continue
		}
		f := a.fileOf(a.p.pkg.Scope().Lookup(p).Pos())
		declaredIn[f] = append(declaredIn[f], p)
	}
	r.FileParts = map[string][]string{}
	for i, f := range a.p.files {
		file := a.p.names[i]
		recv := map[string]bool{}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil {
				continue
			}
			if obj, _ := a.p.info.Defs[fd.Name].(*types.Func); obj != nil {
				if n := a.partOf(a.localName(obj.Type().(*types.Signature).Recv().Type())); a.isPart(n) {
					recv[n] = true
				}
			}
		}
		if len(recv) > 0 {
			r.FileParts[file] = sortedKeys(recv)
		}
		var promises []string
		for _, cg := range f.Comments {
			lines := strings.Split(cg.Text(), "\n")
			for j := 0; j < len(lines); j++ {
				k := strings.Index(lines[j], "May call:")
				if k < 0 {
					continue
				}
				text := strings.TrimSpace(lines[j][k+len("May call:"):])
				for j+1 < len(lines) && strings.TrimSpace(lines[j+1]) != "" && !header.MatchString(lines[j+1]) {
					j++
					text += " " + strings.TrimSpace(lines[j])
				}
				if loc := nextHeader.FindStringIndex(text); loc != nil {
					text = strings.TrimSpace(text[:loc[0]])
				}
				promises = append(promises, text)
			}
		}
		if len(promises) == 0 {
			continue
		}
		mine := map[string]bool{}
		for _, p := range declaredIn[file] {
			mine[p] = true
		}
		var uses []string
		for p := range a.fileUses[file] {
			if !mine[p] {
				uses = append(uses, p)
			}
		}
		sort.Strings(uses)
		r.MayCall = append(r.MayCall, MayCall{File: file, Promise: strings.Join(promises, " | "), Parts: declaredIn[file], Receivers: sortedKeys(recv), Uses: uses})
	}
}

// header matches a line that starts a part header's entry, nextHeader
// an entry that starts within a line.
var (
	header     = regexp.MustCompile(`^(Owns|Locks?|May call|Invariants?):`)
	nextHeader = regexp.MustCompile(`\b(Owns|Locks?|May call|Invariants?):`)
)
