package archcheck

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/build"
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
	"strconv"
	"strings"
)

// loaded is a type-checked package.
type loaded struct {
	fset  *token.FileSet
	files []*ast.File // in file name order
	names []string    // the files' base names, in the same order
	pkg   *types.Package
	info  *types.Info
}

// load parses the non-test files of cfg.Dir (go/build's default context)
// and type-checks them against the export data of their imports.
func load(cfg Config) (*loaded, error) {
	bp, err := build.Default.ImportDir(cfg.Dir, 0)
	if err != nil {
		return nil, fmt.Errorf("archcheck: %v", err)
	}
	names := append([]string(nil), bp.GoFiles...)
	sort.Strings(names)
	p := &loaded{fset: token.NewFileSet(), names: names}
	imports := map[string]bool{}
	for _, name := range names {
		f, err := parser.ParseFile(p.fset, filepath.Join(cfg.Dir, name), nil, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("archcheck: %v", err)
		}
		p.files = append(p.files, f)
		for _, is := range f.Imports {
			if path, err := strconv.Unquote(is.Path.Value); err == nil && path != "unsafe" && path != "C" {
				imports[path] = true
			}
		}
	}
	exports, err := exportData(cfg.Dir, sortedKeys(imports))
	if err != nil {
		return nil, err
	}
	imp := importer.ForCompiler(p.fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	p.info = &types.Info{
		Types:      map[ast.Expr]types.TypeAndValue{},
		Defs:       map[*ast.Ident]types.Object{},
		Uses:       map[*ast.Ident]types.Object{},
		Selections: map[*ast.SelectorExpr]*types.Selection{},
	}
	path := cfg.ImportPath
	if path == "" {
		path = bp.Name
	}
	p.pkg, err = (&types.Config{Importer: imp}).Check(path, p.fset, p.files, p.info)
	if err != nil {
		return nil, fmt.Errorf("archcheck: type-checking %s: %v", cfg.Dir, err)
	}
	return p, nil
}

// exportData maps the packages that imports depend on to their compiled
// export data, with go list -export -deps run in dir (so that dir's module
// resolves them).
func exportData(dir string, imports []string) (map[string]string, error) {
	m := map[string]string{}
	if len(imports) == 0 {
		return m, nil
	}
	args := append([]string{"list", "-export", "-deps", "-f", "{{.ImportPath}}={{.Export}}", "--"}, imports...)
	cmd := exec.Command(goTool(), args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("archcheck: go list -export in %s: %v: %s", dir, err, strings.TrimSpace(stderr.String()))
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if p, f, ok := strings.Cut(sc.Text(), "="); ok && f != "" {
			m[p] = f
		}
	}
	return m, nil
}

// goTool is the go command: the one on PATH, else the one of the GOROOT
// this program was built with.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}
