package tests

import (
	"testing"

	"github.com/berthrt/berth/internal/pgtest"
)

// TestMain stops the throwaway Postgres the Postgres variants start.
func TestMain(m *testing.M) { pgtest.Main(m) }
