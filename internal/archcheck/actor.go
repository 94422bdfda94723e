package archcheck

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Actor is the configuration for the module's actor/ package, whose module
// root is the directory moduleRoot: its parts ranked by partRank in
// actor/layers_test.go (read with RanksFromFile: the one list of ranks,
// the one TestHostPartsReachOnlyDownward checks) and grouped by its partOf
// (GroupsFromFile), Host the root, Context
// and Request the API values that hold it, actor/LOCK_ORDER.md the lock
// document. cmd/archmeasure and this package's tests both use it.
func Actor(moduleRoot string) (Config, error) {
	dir := filepath.Join(moduleRoot, "actor")
	ranks, err := RanksFromFile(filepath.Join(dir, "layers_test.go"), "partRank")
	if err != nil {
		return Config{}, err
	}
	// partOf may be missing (an older actor/): no part has several types.
	groups, err := GroupsFromFile(filepath.Join(dir, "layers_test.go"), "partOf")
	if errors.Is(err, errNoVar) {
		groups, err = nil, nil
	}
	if err != nil {
		return Config{}, err
	}
	mod, err := modulePath(filepath.Join(moduleRoot, "go.mod"))
	if err != nil {
		return Config{}, err
	}
	return Config{
		Dir:        dir,
		ImportPath: mod + "/actor",
		Ranks:      ranks,
		Root:       "Host",
		API:        []string{"Context", "Request"},
		LockDoc:    filepath.Join(dir, "LOCK_ORDER.md"),
		Groups:     groups,
	}, nil
}

// modulePath reads the module path from a go.mod file.
func modulePath(gomod string) (string, error) {
	b, err := os.ReadFile(gomod)
	if err != nil {
		return "", fmt.Errorf("archcheck: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", fmt.Errorf("archcheck: %s: no module line", gomod)
}
