package engine

import (
	"context"
	"testing"

	"github.com/redlease/redlease/internal/leakcheck"
	"github.com/redlease/redlease/internal/redisproc"
)

// TestMain fails the package when goroutines of redlease, rueidis or
// protoactor outlive the tests: every engine must leave nothing behind.
func TestMain(m *testing.M) { leakcheck.Main(m, "redlease/", "rueidis", "protoactor") }

// startNodes starts n redis-server processes marked new (MarkNew), so
// restart quarantine does not hold back tests that are not about it.
func startNodes(t testing.TB, n int) *redisproc.Cluster {
	t.Helper()
	c := redisproc.Start(t, n)
	if err := MarkNew(context.Background(), Config{Nodes: c.Addrs()}); err != nil {
		t.Fatal(err)
	}
	return c
}
