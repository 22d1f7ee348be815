// Package leakcheck fails a test binary whose goroutines outlive its tests.
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// wait is how long goroutines get to finish after the last test.
const wait = 5 * time.Second

// Main runs m and, if the tests passed, fails the binary when a goroutine
// whose stack mentions any of pkgs is still running after wait, printing
// those stacks. Call it from TestMain.
func Main(m *testing.M, pkgs ...string) {
	code := m.Run()
	if code == 0 {
		if leaked := Leaked(wait, pkgs...); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines left running after the tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// Leaked polls for up to limit until no goroutine's stack mentions any of
// pkgs, and returns the stacks of those that remain ("" for none).
func Leaked(limit time.Duration, pkgs ...string) string {
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
		// Not leaks: the checker, the test binary's main, and parallel
		// tests waiting for their turn (testing.(*T).Parallel).
		if strings.Contains(g, "leakcheck.") || strings.Contains(g, "testing.(*M)") || strings.Contains(g, "testing.(*T).Parallel(") {
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
