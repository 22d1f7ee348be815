package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redlease/redlease/examples/internal/proctest"
	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/internal/testwait"
)

// TestMain runs main instead of the tests in the processes that the
// tests start (proctest.Start).
func TestMain(m *testing.M) { proctest.Main(m, main) }

// TestREADME: the README's Quick start is this program, byte for byte.
func TestREADME(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	program, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := bytes.Cut(readme, []byte("\n## Quick start\n"))
	if !ok {
		t.Fatal("README.md has no Quick start section")
	}
	_, block, ok := bytes.Cut(section, []byte("\n```go\n"))
	if !ok {
		t.Fatal("README.md's Quick start has no Go block")
	}
	block, _, ok = bytes.Cut(block, []byte("\n```\n"))
	if !ok {
		t.Fatal("README.md's Quick start Go block does not end")
	}
	if got := string(block) + "\n"; got != string(program) {
		t.Errorf("README.md's Quick start differs from examples/quickstart/main.go: copy main.go into it\nREADME:\n%s", got)
	}
}

// run runs the program until it exits, and returns what it printed on
// its standard output.
func run(t *testing.T, name string, args ...string) *proctest.Proc {
	t.Helper()
	p := proctest.Start(t, name, args...)
	testwait.Eventually(t, 30*time.Second, name+" exits", p.Exited)
	if code, _ := p.ExitCode(); code != 0 {
		t.Errorf("%s exited with %d: %s", name, code, p.Stderr())
	}
	return p
}

// TestFreshNodes runs the Quick start as the README says on three fresh
// redis-servers: with -fresh the first time, which marks them new, it
// acquires at once and does its work; so does every later run, without.
func TestFreshNodes(t *testing.T) {
	nodes := strings.Join(redisproc.Start(t, 3).Addrs(), ",")
	for _, args := range [][]string{{"-fresh"}, {}} {
		name := "quickstart " + strings.Join(args, " ")
		p := run(t, name, append(args, "-nodes", nodes)...)
		if len(p.Fields("acquired", "invoice:42")) != 1 || len(p.Fields("invoice", "42", "written")) != 1 {
			t.Errorf("%s did not acquire and work: it printed %q; on stderr: %s", name, p.Lines(), p.Stderr())
		}
	}
}

// TestUnmarkedNodes runs the Quick start on three fresh redis-servers
// without -fresh: they sit out their quarantine, which ends after the
// program's 5s deadline, and it says so, not that someone else holds the
// lease.
func TestUnmarkedNodes(t *testing.T) {
	nodes := strings.Join(redisproc.Start(t, 3).Addrs(), ",")
	p := run(t, "quickstart", "-nodes", nodes)
	if len(p.Lines()) != 0 {
		t.Errorf("on unmarked nodes it printed %q", p.Lines())
	}
	stderr := p.Stderr()
	if !strings.Contains(stderr, "not acquired") || !strings.Contains(stderr, "quarantine") {
		t.Errorf("its error does not say that the nodes are quarantined: %s", stderr)
	}
}
