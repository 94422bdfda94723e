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
	lit, ok := e.(*ast.CompositeLit)
	if !ok {
		return nil, fmt.Errorf("archcheck: %s: not a composite literal", fset.Position(e.Pos()))
	}
	m := map[string]string{}
	for _, el := range lit.Elts {
		kv, ok := el.(*ast.KeyValueExpr)
		if !ok {
			return nil, fmt.Errorf("archcheck: %s: not a key: value", fset.Position(el.Pos()))
		}
		k, ok1 := kv.Key.(*ast.BasicLit)
		v, ok2 := kv.Value.(*ast.BasicLit)
		if !ok1 || !ok2 || k.Kind != token.STRING || v.Kind != token.STRING {
			return nil, fmt.Errorf("archcheck: %s: want \"name\": \"name\"", fset.Position(el.Pos()))
		}
		key, err1 := strconv.Unquote(k.Value)
		val, err2 := strconv.Unquote(v.Value)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("archcheck: %s: bad string", fset.Position(k.Pos()))
		}
		m[key] = val
	}
	return m, nil
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
	lit, ok := e.(*ast.CompositeLit)
	if !ok {
		return nil, fmt.Errorf("archcheck: %s: not a composite literal", fset.Position(e.Pos()))
	}
	m := map[string]int{}
	for _, el := range lit.Elts {
		kv, ok := el.(*ast.KeyValueExpr)
		if !ok {
			return nil, fmt.Errorf("archcheck: %s: not a key: value", fset.Position(el.Pos()))
		}
		k, ok1 := kv.Key.(*ast.BasicLit)
		v, ok2 := kv.Value.(*ast.BasicLit)
		if !ok1 || !ok2 || k.Kind != token.STRING || v.Kind != token.INT {
			return nil, fmt.Errorf("archcheck: %s: want \"name\": integer", fset.Position(el.Pos()))
		}
		key, err := strconv.Unquote(k.Value)
		if err != nil {
			return nil, fmt.Errorf("archcheck: %s: %v", fset.Position(k.Pos()), err)
		}
		n, err := strconv.ParseInt(v.Value, 0, 0)
		if err != nil {
			return nil, fmt.Errorf("archcheck: %s: %v", fset.Position(v.Pos()), err)
		}
		if _, dup := m[key]; dup {
			return nil, fmt.Errorf("archcheck: %s: %q twice", fset.Position(k.Pos()), key)
		}
		m[key] = int(n)
	}
	return m, nil
}
