package tests

import (
	"os"
	"testing"

	"github.com/berthrt/berth/internal/pgtest"
)

// TestMain runs the test binary as a child process of the tests across OS
// processes when BERTH_TESTS_CHILD names a role (child_test.go);
// otherwise it makes the CA every host trusts, runs the tests and then stops the throwaway Postgres the
// Postgres variants start.
func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(childMain(role))
	}
	testCA() // before any child starts: the children trust the CA they find in the environment
	pgtest.Main(m)
}
