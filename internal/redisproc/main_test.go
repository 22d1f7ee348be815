package redisproc

import (
	"testing"

	"github.com/redlease/redlease/internal/leakcheck"
)

// TestMain fails the package when goroutines of this package or rueidis
// outlive the tests: Close and the end of a Stall must leave nothing.
func TestMain(m *testing.M) { leakcheck.Main(m, "redisproc.", "rueidis") }
