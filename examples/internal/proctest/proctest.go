// Package proctest runs an example program as real processes for the
// example's test. The test binary runs itself again with ChildEnv set,
// and Main, called from the test's TestMain, then runs the program's main
// instead of the tests: each process is the program, built with the test
// (and with -race when the test is), on its own pid, killed and paused
// for real.
//
// A Proc collects its process's standard output line by line, for the
// test to read (the examples print machine-readable lines there), and
// its standard error, which the test shows when it fails. Every process
// is killed and reaped at the end of the test that started it; one that
// reported a data race or a panic fails that test. For tests only.
package proctest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/redlease/redlease/internal/leakcheck"
)

// ChildEnv, set to "1", makes Main run the program instead of the tests.
const ChildEnv = "REDLEASE_EXAMPLE_CHILD"

// Main runs program (the example's main) and exits 0 when program
// returns, in a process that Start started; otherwise it runs the tests
// and fails the binary if goroutines of redlease, rueidis or protoactor
// outlive them. Call it from TestMain.
func Main(m *testing.M, program func()) {
	if os.Getenv(ChildEnv) == "1" {
		program()
		os.Exit(0)
	}
	leakcheck.Main(m, "redlease/", "rueidis", "protoactor")
}

// Proc is one process of the program. Its methods are safe for
// concurrent use.
type Proc struct {
	Name string
	cmd  *exec.Cmd

	mu     sync.Mutex
	lines  []string
	stderr bytes.Buffer

	exited chan struct{} // closed once the process was reaped
	state  *os.ProcessState
}

// Start starts the program with args as a process of its own, named name
// in the test's messages. The process is killed (SIGKILL, paused or not)
// and reaped when t ends; its output is logged if t failed, and a data
// race or a panic it reported fails t.
func Start(t *testing.T, name string, args ...string) *Proc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &Proc{Name: name, exited: make(chan struct{})}
	p.cmd = exec.Command(self, args...)
	p.cmd.Env = append(os.Environ(), ChildEnv+"=1")
	p.cmd.Stderr = lockedWriter{&p.mu, &p.stderr}
	p.cmd.SysProcAttr = sysProcAttr()
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, s.Text())
			p.mu.Unlock()
		}
		p.cmd.Wait() // after the last read, as StdoutPipe asks
		p.mu.Lock()
		p.state = p.cmd.ProcessState
		p.mu.Unlock()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
		p.mu.Lock()
		defer p.mu.Unlock()
		if t.Failed() {
			t.Logf("%s (pid %d) printed:\n%s\nand on stderr:\n%s", name, p.Pid(), strings.Join(p.lines, "\n"), p.stderr.String())
		}
		for _, bad := range []string{"WARNING: DATA RACE", "panic:"} {
			if strings.Contains(p.stderr.String(), bad) {
				t.Errorf("%s reported %q:\n%s", name, bad, p.stderr.String())
			}
		}
	})
	return p
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Lines returns the lines the process printed so far on its standard
// output.
func (p *Proc) Lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// Fields returns the lines printed so far whose first fields are prefix,
// each split into its fields.
func (p *Proc) Fields(prefix ...string) [][]string {
	var found [][]string
next:
	for _, line := range p.Lines() {
		f := strings.Fields(line)
		if len(f) < len(prefix) {
			continue
		}
		for i, want := range prefix {
			if f[i] != want {
				continue next
			}
		}
		found = append(found, f)
	}
	return found
}

// Stderr returns what the process wrote on its standard error so far.
func (p *Proc) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// Signal sends sig to the process.
func (p *Proc) Signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s: %v: %v", p.Name, sig, err)
	}
}

// Kill sends SIGKILL and waits until the process was reaped.
func (p *Proc) Kill(t *testing.T) {
	t.Helper()
	p.Signal(t, syscall.SIGKILL)
	<-p.exited
}

// Stopped reports whether every thread of the process is stopped (by
// SIGSTOP), as /proc says. A SIGSTOP sent to a process is taken by one
// thread, which stops the others: they may run on for a moment.
func (p *Proc) Stopped() bool {
	dir := fmt.Sprintf("/proc/%d/task", p.Pid())
	tasks, err := os.ReadDir(dir)
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		if err != nil {
			return false
		}
		// The state follows the command name, which is in parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}

// Exited reports whether the process has exited and was reaped.
func (p *Proc) Exited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// ExitCode is the process's exit status once it exited (-1 when a signal
// ended it), and an error before.
func (p *Proc) ExitCode() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == nil {
		return 0, errors.New(p.Name + " is still running")
	}
	return p.state.ExitCode(), nil
}

// lockedWriter writes to w under mu.
type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
