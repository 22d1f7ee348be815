package node

import (
	"testing"

	"github.com/redlease/redlease/internal/leakcheck"
)

// TestMain fails the package when goroutines of redlease, rueidis or
// protoactor outlive the tests: stopped actors must leave nothing behind.
func TestMain(m *testing.M) { leakcheck.Main(m, "redlease/", "rueidis", "protoactor") }
