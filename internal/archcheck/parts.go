package archcheck

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"path/filepath"
	"sort"
	"strings"
)

// analysis is the state shared by the measures of one package.
type analysis struct {
	cfg   Config
	p     *loaded
	ranks map[string]int
	root  string
	api   map[string]bool

	fields    map[*types.Var]fieldInfo   // every struct field of a package-level type or variable
	fieldList []*types.Var               // the same, in declaration order of their owners' names
	holders   map[string]map[string]bool // type name -> the types (and variables) with a field holding it
	fileUses  map[string]map[string]bool // file -> the parts its code selects a method or field of
}

// fieldInfo says whose a struct field is.
type fieldInfo struct {
	owner  string // the named type, or package-level variable, whose struct declares it
	name   string // "owner.field", or "owner.outer.field" in a nested anonymous struct
	nested bool   // declared in an anonymous struct nested in owner's
	isVar  bool   // owner is a package-level variable
}

func newAnalysis(cfg Config, p *loaded) *analysis {
	a := &analysis{
		cfg: cfg, p: p, ranks: cfg.Ranks, root: cfg.Root, api: map[string]bool{},
		fields:   map[*types.Var]fieldInfo{},
		holders:  map[string]map[string]bool{},
		fileUses: map[string]map[string]bool{},
	}
	for _, t := range cfg.API {
		a.api[t] = true
	}
	scope := p.pkg.Scope()
	for _, name := range scope.Names() {
		switch o := scope.Lookup(name).(type) {
		case *types.TypeName:
			if o.IsAlias() {
				continue
			}
			if st, ok := o.Type().Underlying().(*types.Struct); ok {
				a.walkStruct(fieldInfo{owner: name}, name, st)
			}
		case *types.Var:
			if st, ok := o.Type().(*types.Struct); ok {
				a.walkStruct(fieldInfo{owner: name, isVar: true}, name, st)
			}
		}
	}
	return a
}

// walkStruct records the fields of st, declared for fi.owner, and the
// anonymous structs nested in them.
func (a *analysis) walkStruct(fi fieldInfo, prefix string, st *types.Struct) {
	for i := 0; i < st.NumFields(); i++ {
		f := st.Field(i)
		g := fi
		g.name = prefix + "." + f.Name()
		a.fields[f] = g
		a.fieldList = append(a.fieldList, f)
		for _, t := range a.heldTypes(f.Type()) {
			if a.holders[t] == nil {
				a.holders[t] = map[string]bool{}
			}
			a.holders[t][fi.owner] = true
		}
		if inner, ok := peel(f.Type()).(*types.Struct); ok {
			g.nested = true
			a.walkStruct(g, g.name, inner)
		}
	}
}

// peel strips pointers, slices, arrays, channels and maps (to their
// values) off t.
func peel(t types.Type) types.Type {
	for {
		switch u := types.Unalias(t).(type) {
		case *types.Pointer:
			t = u.Elem()
		case *types.Slice:
			t = u.Elem()
		case *types.Array:
			t = u.Elem()
		case *types.Chan:
			t = u.Elem()
		case *types.Map:
			t = u.Elem()
		default:
			return types.Unalias(t)
		}
	}
}

// heldTypes names the types of this package that a field of type t holds:
// t itself, or what a pointer, slice, array, channel or map (key or value)
// of t holds.
func (a *analysis) heldTypes(t types.Type) []string {
	var out []string
	var visit func(t types.Type)
	visit = func(t types.Type) {
		switch u := types.Unalias(t).(type) {
		case *types.Pointer:
			visit(u.Elem())
		case *types.Slice:
			visit(u.Elem())
		case *types.Array:
			visit(u.Elem())
		case *types.Chan:
			visit(u.Elem())
		case *types.Map:
			visit(u.Key())
			visit(u.Elem())
		case *types.Named:
			if u.Obj().Pkg() == a.p.pkg {
				out = append(out, u.Obj().Name())
			}
		}
	}
	visit(t)
	return out
}

// namedOf is the named type of t, or of what t points to; nil if neither
// is named. For an instance of a generic type, it is the generic type.
func namedOf(t types.Type) *types.Named {
	t = types.Unalias(t)
	if p, ok := t.(*types.Pointer); ok {
		t = types.Unalias(p.Elem())
	}
	if n, ok := t.(*types.Named); ok {
		return n.Origin()
	}
	return nil
}

// localName is the name of t's named type if it is declared in this
// package, else "".
func (a *analysis) localName(t types.Type) string {
	if n := namedOf(t); n != nil && n.Obj().Pkg() == a.p.pkg {
		return n.Obj().Name()
	}
	return ""
}

// isPart reports whether name is a ranked type other than the root.
func (a *analysis) isPart(name string) bool {
	_, ok := a.ranks[name]
	return ok && name != a.root
}

// partOf is the part (or the root) that type or variable t belongs to:
// t itself if it is ranked; else, if t is held by the fields of one type
// u only, u's part; else "". So ownerShard, held only by kindRuntime, is
// kindRuntime's, and lifecycle, held only by Host, is Host's. An API type
// is no part's, wherever it is held.
func (a *analysis) partOf(t string) string {
	for seen := map[string]bool{}; !seen[t]; {
		seen[t] = true
		if _, ranked := a.ranks[t]; ranked {
			return t
		}
		if a.api[t] {
			return "" // an API value is no part's
		}
		h := a.holders[t]
		if len(h) != 1 {
			return ""
		}
		for u := range h {
			t = u
		}
	}
	return ""
}

// group is the part that ranked type t is one of the types of
// (Config.Groups): its principal type, or t itself.
func (a *analysis) group(t string) string {
	if g, ok := a.cfg.Groups[t]; ok {
		return g
	}
	return t
}

// parts fills Parts and MissingParts.
func (a *analysis) parts(r *Report) {
	scope := a.p.pkg.Scope()
	for name := range a.ranks {
		if _, ok := scope.Lookup(name).(*types.TypeName); ok {
			r.Parts = append(r.Parts, name)
		} else {
			r.MissingParts = append(r.MissingParts, name)
		}
	}
	sort.Strings(r.Parts)
	sort.Strings(r.MissingParts)
}

// holdRoot fills HoldRoot, HoldRootTypes and HoldRootParts.
func (a *analysis) holdRoot(r *Report) {
	holders, parts := map[string]bool{}, map[string]bool{}
	for _, f := range a.fieldList {
		fi := a.fields[f]
		if fi.isVar || fi.owner == a.root || a.api[fi.owner] || !a.mentionsRoot(f.Type(), map[types.Type]bool{}) {
			continue
		}
		r.HoldRoot = append(r.HoldRoot, Site{pos(a.p.fset, f.Pos()), fi.name})
		holders[fi.owner] = true
		if a.isPart(fi.owner) {
			parts[fi.owner] = true
		}
	}
	sortSites(r.HoldRoot)
	r.HoldRootTypes, r.HoldRootParts = sortedKeys(holders), sortedKeys(parts)
}

// mentionsRoot reports whether t is the root, or is built of it: a
// pointer, slice, array, map, channel, func, anonymous struct or generic
// instance that contains it.
func (a *analysis) mentionsRoot(t types.Type, seen map[types.Type]bool) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	switch u := types.Unalias(t).(type) {
	case *types.Pointer:
		return a.mentionsRoot(u.Elem(), seen)
	case *types.Slice:
		return a.mentionsRoot(u.Elem(), seen)
	case *types.Array:
		return a.mentionsRoot(u.Elem(), seen)
	case *types.Chan:
		return a.mentionsRoot(u.Elem(), seen)
	case *types.Map:
		return a.mentionsRoot(u.Key(), seen) || a.mentionsRoot(u.Elem(), seen)
	case *types.Signature:
		return a.tupleMentionsRoot(u.Params(), seen) || a.tupleMentionsRoot(u.Results(), seen)
	case *types.Struct:
		for i := 0; i < u.NumFields(); i++ {
			if a.mentionsRoot(u.Field(i).Type(), seen) {
				return true
			}
		}
	case *types.Named:
		if u.Obj().Pkg() == a.p.pkg && u.Obj().Name() == a.root {
			return true
		}
		args := u.TypeArgs()
		for i := 0; i < args.Len(); i++ {
			if a.mentionsRoot(args.At(i), seen) {
				return true
			}
		}
	}
	return false
}

func (a *analysis) tupleMentionsRoot(t *types.Tuple, seen map[types.Type]bool) bool {
	for i := 0; i < t.Len(); i++ {
		if a.mentionsRoot(t.At(i).Type(), seen) {
			return true
		}
	}
	return false
}

// fn is the function whose body walk is in.
type fn struct {
	file   string
	name   string // "recv.method" or "func"
	method string // the func's or method's own name
	recv   string // the receiver's type name; "" for a func
	rank   int
	part   bool // recv is a part (not the root)
	exempt bool // recv is the root or an API type: no root hops counted
}

// walk fills the measures that look at function bodies: the root hops,
// the fields, the upward accesses, the foreign locks, and the parts each
// file uses.
func (a *analysis) walk(r *Report) {
	own, foreign := map[string]bool{}, map[string]bool{}
	for i, f := range a.p.files {
		file := a.p.names[i]
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			c := fn{file: file, name: fd.Name.Name, method: fd.Name.Name}
			if fd.Recv != nil {
				obj, _ := a.p.info.Defs[fd.Name].(*types.Func)
				if obj == nil {
					continue
				}
				c.recv = a.localName(obj.Type().(*types.Signature).Recv().Type())
				c.name = c.recv + "." + fd.Name.Name
				c.rank, c.part = a.ranks[c.recv]
				c.part = c.part && c.recv != a.root
				c.exempt = c.recv == a.root || a.api[c.recv]
			} else if obj, _ := a.p.info.Defs[fd.Name].(*types.Func); obj != nil {
				// A function that takes or returns the root (NewHost, the
				// API's Tell and Ask, their helpers) is the root's own
				// code: what it selects on the root is no hop.
				c.exempt = a.rootInSignature(obj.Type().(*types.Signature))
			}
			if c.part {
				r.Methods++
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.SelectorExpr:
					a.selector(r, c, n, own, foreign)
				case *ast.CallExpr:
					if c.part {
						a.lock(r, c, n)
					}
				}
				return true
			})
		}
	}
	r.OwnFields, r.ForeignFields = sortedKeys(own), sortedKeys(foreign)
	for _, s := range [][]Site{r.RootHops, r.OwnFieldSites, r.ForeignFieldSites, r.UpwardFields, r.UpwardCalls, r.ForeignLocks, r.ForeignUnlocks} {
		sortSites(s)
	}
}

// selector measures one selector expression in c.
func (a *analysis) selector(r *Report, c fn, se *ast.SelectorExpr, own, foreign map[string]bool) {
	info := a.p.info
	s := info.Selections[se]
	if s == nil {
		return // a qualified identifier
	}
	at := pos(a.p.fset, se.Sel.Pos())
	if !c.exempt && s.Kind() != types.MethodExpr {
		if tv, ok := info.Types[se.X]; ok && tv.IsValue() && a.localName(tv.Type) == a.root {
			what := fmt.Sprintf("%s: %s.%s", c.name, a.root, se.Sel.Name)
			switch {
			case s.Kind() == types.MethodVal:
				what += "()"
				r.RootHopsToMethods++
			case a.isPart(a.localName(s.Obj().Type())):
				what += " (part " + a.localName(s.Obj().Type()) + ")"
				r.RootHopsToParts++
			}
			r.RootHops = append(r.RootHops, Site{at, what})
		}
	}
	switch s.Kind() {
	case types.FieldVal:
		owner, name := a.fieldOwner(s)
		if !a.isPart(owner) {
			return
		}
		a.fileUse(c.file, owner)
		if !c.part {
			return
		}
		what := c.name + ": " + name
		if !strings.HasPrefix(name, owner+".") {
			what += " (" + owner + "'s)"
		}
		if a.group(owner) == a.group(c.recv) {
			own[name] = true
			r.OwnFieldSites = append(r.OwnFieldSites, Site{at, what})
			return
		}
		foreign[name] = true
		r.ForeignFieldSites = append(r.ForeignFieldSites, Site{at, what})
		if a.ranks[owner] > c.rank {
			r.UpwardFields = append(r.UpwardFields, Site{at, fmt.Sprintf("%s(%d).%s: %s(%d) %s", c.recv, c.rank, c.method, owner, a.ranks[owner], name)})
		}
	case types.MethodVal, types.MethodExpr:
		recv := s.Obj().(*types.Func).Type().(*types.Signature).Recv().Type()
		if types.IsInterface(recv) {
			return // the seam
		}
		callee := a.localName(recv)
		rank, ranked := a.ranks[callee]
		if !ranked {
			return
		}
		if callee != a.root {
			a.fileUse(c.file, callee)
		}
		if c.part && callee != c.recv && rank > c.rank {
			r.UpwardCalls = append(r.UpwardCalls, Site{at, fmt.Sprintf("%s(%d).%s: %s(%d).%s", c.recv, c.rank, c.method, callee, rank, s.Obj().Name())})
		}
	}
}

// fieldOwner says which part (or the root) a field selection selects a
// field of, and names the field ("T.f", T the type that declares it). The
// field of a type that belongs to a part (partOf) is the part's; so is a
// field promoted through a part from an embedded type that is not one.
func (a *analysis) fieldOwner(s *types.Selection) (part, name string) {
	v := s.Obj().(*types.Var).Origin()
	fi, ok := a.fields[v]
	if !ok {
		return "", ""
	}
	if part := a.partOf(fi.owner); part != "" || len(s.Index()) < 2 {
		return part, fi.name
	}
	t, via := s.Recv(), ""
	for _, i := range s.Index()[:len(s.Index())-1] {
		if n := a.localName(t); n != "" {
			if _, ranked := a.ranks[n]; ranked {
				via = n
			}
		}
		st, ok := derefStruct(t)
		if !ok {
			break
		}
		t = st.Field(i).Type()
	}
	return via, fi.name
}

// derefStruct is the struct under t, or under what t points to.
func derefStruct(t types.Type) (*types.Struct, bool) {
	t = types.Unalias(t)
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	st, ok := t.Underlying().(*types.Struct)
	return st, ok
}

// fileUse notes that file's code selects a method or field of part.
func (a *analysis) fileUse(file, part string) {
	if a.fileUses[file] == nil {
		a.fileUses[file] = map[string]bool{}
	}
	a.fileUses[file][part] = true
}

var (
	lockNames   = map[string]bool{"Lock": true, "RLock": true, "TryLock": true, "TryRLock": true}
	unlockNames = map[string]bool{"Unlock": true, "RUnlock": true}
)

// lock measures one call in a method of a part: a lock or unlock of a
// mutex field of another type than the part and its own.
func (a *analysis) lock(r *Report, c fn, call *ast.CallExpr) {
	se, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr)
	if !ok || !lockNames[se.Sel.Name] && !unlockNames[se.Sel.Name] {
		return
	}
	s := a.p.info.Selections[se]
	if s == nil || s.Kind() != types.MethodVal || !isMutex(s.Obj().(*types.Func).Type().(*types.Signature).Recv().Type()) {
		return
	}
	var field *types.Var
	if idx := s.Index(); len(idx) > 1 {
		// x.Lock() of a mutex embedded in x's struct (or deeper).
		t := s.Recv()
		for _, i := range idx[:len(idx)-1] {
			st, ok := derefStruct(t)
			if !ok {
				return
			}
			field = st.Field(i)
			t = field.Type()
		}
	} else {
		switch x := ast.Unparen(se.X).(type) {
		case *ast.SelectorExpr:
			if xs := a.p.info.Selections[x]; xs != nil && xs.Kind() == types.FieldVal {
				field = xs.Obj().(*types.Var)
			}
		case *ast.Ident:
			// A package-level mutex variable is its own owner.
			if v, ok := a.p.info.Uses[x].(*types.Var); ok && v.Parent() == a.p.pkg.Scope() {
				a.addLock(r, c, se, v.Name(), v.Name())
			}
			return
		}
	}
	if field == nil {
		return // a mutex in a local variable: whose is not known
	}
	fi, ok := a.fields[field.Origin()]
	if !ok {
		return
	}
	a.addLock(r, c, se, fi.owner, fi.name)
}

func (a *analysis) addLock(r *Report, c fn, se *ast.SelectorExpr, owner, name string) {
	if a.group(a.partOf(owner)) == a.group(c.recv) {
		return
	}
	site := Site{pos(a.p.fset, se.Sel.Pos()), fmt.Sprintf("%s: %s.%s()", c.name, name, se.Sel.Name)}
	if lockNames[se.Sel.Name] {
		r.ForeignLocks = append(r.ForeignLocks, site)
	} else {
		r.ForeignUnlocks = append(r.ForeignUnlocks, site)
	}
}

// isMutex reports whether t is sync.Mutex or sync.RWMutex, or a pointer
// to one.
func isMutex(t types.Type) bool {
	n := namedOf(t)
	if n == nil || n.Obj().Pkg() == nil || n.Obj().Pkg().Path() != "sync" {
		return false
	}
	return n.Obj().Name() == "Mutex" || n.Obj().Name() == "RWMutex"
}

// fileOf is the base name of the file that holds p.
func (a *analysis) fileOf(p token.Pos) string {
	return filepath.Base(a.p.fset.Position(p).Filename)
}

// rootInSignature reports whether a parameter or result of sig is the
// root or a pointer to it.
func (a *analysis) rootInSignature(sig *types.Signature) bool {
	for _, tup := range []*types.Tuple{sig.Params(), sig.Results()} {
		for i := 0; i < tup.Len(); i++ {
			if a.localName(tup.At(i).Type()) == a.root {
				return true
			}
		}
	}
	return false
}
