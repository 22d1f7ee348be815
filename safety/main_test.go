package safety

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the package when goroutines of redlease, rueidis or
// protoactor outlive the tests: every engine, proxy, worker and injector
// a run starts must be gone when it returns.
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
		if len(leaked) == 0 || time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
