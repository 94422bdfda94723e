package archcheck

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
)

// RanksFromFile reads the ranks of the parts from the Go file at path: the
// package-level variable name, a map[string]int composite literal whose
// keys are string literals and whose values are integer literals. It is
// how the ranks have one home: actor/layers_test.go's partRank is what
// TestHostPartsReachOnlyDownward checks, and what cmd/archmeasure and this
// package's tests read.
func RanksFromFile(path, name string) (map[string]int, error) {
	fset, e, err := varValue(path, name)
	if err != nil {
		return nil, err
	}
	return ranksOf(fset, e)
}

// GroupsFromFile reads Config.Groups from the Go file at path: the
// package-level variable name, a map[string]string composite literal of
// string literals (actor/layers_test.go's partOf).
func GroupsFromFile(path, name string) (map[string]string, error) {
	fset, e, err := varValue(path, name)
	if err != nil {
		return nil, err
	}
	es, err := entries(fset, e, token.STRING, `"name": "name"`)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, en := range es {
		v, err := strconv.Unquote(en.value.Value)
		if err != nil {
			return nil, fmt.Errorf("archcheck: %s: %v", fset.Position(en.value.Pos()), err)
		}
		m[en.key] = v
	}
	return m, nil
}

// entry is one key: value of a map literal: the key unquoted, the value's
// literal.
type entry struct {
	key   string
	value *ast.BasicLit
}

// entries reads the composite literal e, whose keys must be string
// literals and whose values literals of kind (want names the form, for
// the error); a key may come once.
func entries(fset *token.FileSet, e ast.Expr, kind token.Token, want string) ([]entry, error) {
	lit, ok := e.(*ast.CompositeLit)
	if !ok {
		return nil, fmt.Errorf("archcheck: %s: not a composite literal", fset.Position(e.Pos()))
	}
	var out []entry
	seen := map[string]bool{}
	for _, el := range lit.Elts {
		kv, ok := el.(*ast.KeyValueExpr)
		if !ok {
			return nil, fmt.Errorf("archcheck: %s: not a key: value", fset.Position(el.Pos()))
		}
		k, ok1 := kv.Key.(*ast.BasicLit)
		v, ok2 := kv.Value.(*ast.BasicLit)
		if !ok1 || !ok2 || k.Kind != token.STRING || v.Kind != kind {
			return nil, fmt.Errorf("archcheck: %s: want %s", fset.Position(el.Pos()), want)
		}
		key, err := strconv.Unquote(k.Value)
		if err != nil {
			return nil, fmt.Errorf("archcheck: %s: %v", fset.Position(k.Pos()), err)
		}
		if seen[key] {
			return nil, fmt.Errorf("archcheck: %s: %q twice", fset.Position(k.Pos()), key)
		}
		seen[key] = true
		out = append(out, entry{key, v})
	}
	return out, nil
}

// varValue finds the value of the package-level variable name in the Go
// file at path.
func varValue(path, name string) (*token.FileSet, ast.Expr, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("archcheck: %v", err)
	}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.VAR {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, id := range vs.Names {
				if id.Name != name {
					continue
				}
				if i >= len(vs.Values) {
					return nil, nil, fmt.Errorf("archcheck: %s: %s has no value", fset.Position(id.Pos()), name)
				}
				return fset, vs.Values[i], nil
			}
		}
	}
	return nil, nil, fmt.Errorf("archcheck: %s: no package-level variable %s: %w", path, name, errNoVar)
}

// errNoVar: the file has no package-level variable of the name asked.
var errNoVar = errors.New("no such variable")

func ranksOf(fset *token.FileSet, e ast.Expr) (map[string]int, error) {
	es, err := entries(fset, e, token.INT, `"name": integer`)
	if err != nil {
		return nil, err
	}
	m := map[string]int{}
	for _, en := range es {
		n, err := strconv.ParseInt(en.value.Value, 0, 0)
		if err != nil {
			return nil, fmt.Errorf("archcheck: %s: %v", fset.Position(en.value.Pos()), err)
		}
		m[en.key] = int(n)
	}
	return m, nil
}
