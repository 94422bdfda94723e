package archcheck

import (
	"go/token"
	"go/types"
	"sort"
)

// fileGraph fills Files, Edges, LinkedPairs, MutualPairs and LargestSCC.
// File A -> file B when an identifier in A uses (types.Info.Uses, which
// also holds the object a selector selects) an object declared in B: a
// package-level name, a method or a struct field.
func (a *analysis) fileGraph(r *Report) {
	r.Files = append([]string(nil), a.p.names...)
	index := map[string]int{}
	for i, f := range r.Files {
		index[f] = i
	}
	names := map[[2]int]map[token.Pos]bool{} // edge -> the declarations it uses
	used := map[[2]int]map[string]bool{}
	for id, obj := range a.p.info.Uses {
		if obj == nil || obj.Pkg() != a.p.pkg || !a.declared(obj) {
			continue
		}
		from, ok1 := index[a.fileOf(id.Pos())]
		to, ok2 := index[a.fileOf(obj.Pos())]
		if !ok1 || !ok2 || from == to {
			continue
		}
		e := [2]int{from, to}
		if names[e] == nil {
			names[e] = map[token.Pos]bool{}
		}
		names[e][obj.Pos()] = true
		if used[e] == nil {
			used[e] = map[string]bool{}
		}
		used[e][a.objName(obj)] = true
	}
	adj := make([][]int, len(r.Files))
	for e, n := range names {
		adj[e[0]] = append(adj[e[0]], e[1])
		r.Edges = append(r.Edges, Edge{From: r.Files[e[0]], To: r.Files[e[1]], Names: len(n), Used: sortedKeys(used[e])})
	}
	sort.Slice(r.Edges, func(i, j int) bool {
		if r.Edges[i].From != r.Edges[j].From {
			return r.Edges[i].From < r.Edges[j].From
		}
		return r.Edges[i].To < r.Edges[j].To
	})
	for e := range names {
		_, back := names[[2]int{e[1], e[0]}]
		switch {
		case !back:
			r.LinkedPairs++
		case e[0] < e[1]:
			r.LinkedPairs++
			r.MutualPairs++
		}
	}
	for i := range adj {
		sort.Ints(adj[i])
	}
	for _, c := range tarjan(adj) {
		if len(c) > len(r.LargestSCC) {
			r.LargestSCC = r.LargestSCC[:0]
			for _, i := range c {
				r.LargestSCC = append(r.LargestSCC, r.Files[i])
			}
		}
	}
	sort.Strings(r.LargestSCC)
}

// declared reports whether obj is a package-level name, a method or a
// struct field (not a local name).
func (a *analysis) declared(obj types.Object) bool {
	switch o := obj.(type) {
	case *types.Func:
		return o.Parent() == a.p.pkg.Scope() || o.Type().(*types.Signature).Recv() != nil
	case *types.Var:
		return o.IsField() || o.Parent() == a.p.pkg.Scope()
	}
	return obj.Parent() == a.p.pkg.Scope()
}

// tarjan returns the strongly connected components of the graph adj, in
// the order Tarjan's algorithm finds them (a component before those that
// reach it).
func tarjan(adj [][]int) [][]int {
	n := len(adj)
	index, low := make([]int, n), make([]int, n)
	onStack := make([]bool, n)
	for i := range index {
		index[i] = -1
	}
	var stack []int
	var comps [][]int
	next := 0
	var visit func(v int)
	visit = func(v int) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range adj[v] {
			if index[w] < 0 {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			var c []int
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				c = append(c, w)
				if w == v {
					break
				}
			}
			comps = append(comps, c)
		}
	}
	for v := range adj {
		if index[v] < 0 {
			visit(v)
		}
	}
	return comps
}

// objName names obj for an edge: "T.name" for a method or a field of
// named type T, else its name.
func (a *analysis) objName(obj types.Object) string {
	switch o := obj.(type) {
	case *types.Func:
		if recv := o.Type().(*types.Signature).Recv(); recv != nil {
			if n := a.localName(recv.Type()); n != "" {
				return n + "." + o.Name()
			}
		}
	case *types.Var:
		if fi, ok := a.fields[o.Origin()]; ok {
			return fi.name
		}
	}
	return obj.Name()
}
