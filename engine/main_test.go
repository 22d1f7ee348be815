package engine

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/redisproc"
)

// TestMain fails the package when goroutines of redlease, rueidis or
// protoactor outlive the tests: every engine must leave nothing behind.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := waitNoLeaks(5*time.Second, "redlease/", "rueidis", "protoactor"); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines left running after the tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// waitNoLeaks polls until no goroutine's stack mentions any of pkgs, and
// returns the stacks of those that remain.
func waitNoLeaks(limit time.Duration, pkgs ...string) string {
	deadline := time.Now().Add(limit)
	for {
		leaked := leakedStacks(pkgs)
		if leaked == "" || time.Now().After(deadline) {
			return leaked
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func leakedStacks(pkgs []string) string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var leaked []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "waitNoLeaks") || strings.Contains(g, "testing.(*M)") {
			continue
		}
		for _, pkg := range pkgs {
			if strings.Contains(g, pkg) {
				leaked = append(leaked, g)
				break
			}
		}
	}
	return strings.Join(leaked, "\n\n")
}

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
