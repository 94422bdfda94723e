package archcheck

import (
	"path/filepath"
	"testing"
)

// The analysis sees actor/: its ranks read, every ranked name a type of
// the package, the parts' methods found, and no upward call (what
// TestHostPartsReachOnlyDownward holds, seen the same way here).
func TestActor(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks actor/ against its dependencies' export data")
	}
	cfg, err := Actor(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Ranks[cfg.Root] == 0 || len(cfg.Ranks) < 10 {
		t.Fatalf("ranks read from actor/layers_test.go: %v", cfg.Ranks)
	}
	r, err := Analyze(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Methods < 100 {
		t.Fatalf("found only %d methods of the parts: the analysis does not see the package", r.Methods)
	}
	for _, p := range r.MissingParts {
		t.Errorf("partRank names %s, which is no type of actor/", p)
	}
	for _, s := range r.UpwardCalls {
		t.Errorf("upward call: %s", s)
	}
	if len(r.Files) < 10 || len(r.LargestSCC) == 0 || len(r.Mutexes) == 0 || len(r.OwnFieldSites) < 100 {
		t.Errorf("files %d, largest cycle %d, mutexes %d, own field sites %d: the analysis sees little",
			len(r.Files), len(r.LargestSCC), len(r.Mutexes), len(r.OwnFieldSites))
	}
}
