package safety

import (
	"testing"

	"github.com/redlease/redlease/internal/leakcheck"
)

// TestMain fails the package when goroutines of redlease, rueidis or
// protoactor outlive the tests: every engine, proxy, worker and injector
// a run starts must be gone when it returns.
func TestMain(m *testing.M) { leakcheck.Main(m, "redlease/", "rueidis", "protoactor") }
