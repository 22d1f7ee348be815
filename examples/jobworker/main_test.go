package main

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redlease/redlease/engine"
	"github.com/redlease/redlease/examples/internal/proctest"
	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/internal/testwait"
)

// TestMain runs main instead of the tests in the worker processes that
// the tests start (proctest.Start).
func TestMain(m *testing.M) { proctest.Main(m, main) }

// The scene's numbers: a job's lease lives a second past its last
// extension, and the stalled worker stops for three.
const (
	jobs    = 6
	ttl     = time.Second
	pause   = 3 * time.Second
	jobTime = 200 * time.Millisecond
)

// TestStalledWorker runs three worker processes over one job table. One
// of them stops (SIGSTOP) after its last look at its first job's lease
// and before its write, for longer than the lease's TTL: another worker
// takes the job over and the store takes its result; when the stopped
// worker resumes, the store refuses its write by its lower fencing token.
// In the end every job has exactly one accepted result, written by the
// one worker that says it was done.
func TestStalledWorker(t *testing.T) {
	locks := redisproc.Start(t, 3)
	store := redisproc.Start(t, 1).Nodes[0]
	if err := engine.MarkNew(context.Background(), engine.Config{Nodes: locks.Addrs()}); err != nil {
		t.Fatal(err)
	}
	worker := func(name string, extra ...string) *proctest.Proc {
		args := []string{
			"-nodes", strings.Join(locks.Addrs(), ","), "-store", store.Addr(), "-name", name,
			"-jobs", strconv.Itoa(jobs), "-ttl", ttl.String(), "-work", jobTime.String(),
		}
		return proctest.Start(t, name, append(args, extra...)...)
	}

	// w0 takes a job first, so that it has one to stall on; then the
	// others start, and all three work the table at once.
	w0 := worker("w0", "-stall")
	testwait.Eventually(t, 20*time.Second, "w0 takes a job", func() bool { return len(w0.Fields("job")) > 0 })
	w1, w2 := worker("w1"), worker("w2")
	workers := []*proctest.Proc{w0, w1, w2}

	var job string
	var staleToken uint64
	testwait.Eventually(t, 5*time.Second, "w0 stops itself before its first write", func() bool {
		if f := w0.Fields("job"); len(f) > 0 && f[len(f)-1][2] == "stall" && w0.Stopped() {
			job, staleToken = f[len(f)-1][1], token(t, f[len(f)-1][3])
			return true
		}
		return false
	})
	stoppedAt := time.Now()
	t.Logf("w0 stopped, holding job %s with token %d", job, staleToken)

	// w0 cannot extend its lease: within a TTL it ends, and another
	// worker takes the job and writes its result.
	var taker *proctest.Proc
	var takerToken uint64
	testwait.Eventually(t, ttl+5*time.Second, "another worker writes job "+job, func() bool {
		for _, w := range []*proctest.Proc{w1, w2} {
			if f := w.Fields("job", job, "done"); len(f) > 0 {
				taker, takerToken = w, token(t, f[0][3])
				return true
			}
		}
		return false
	})
	t.Logf("%s took job %s over %v after w0 stopped, with token %d", taker.Name, job, time.Since(stoppedAt).Round(time.Millisecond), takerToken)
	if takerToken <= staleToken {
		t.Errorf("job %s: the later holder's token %d is not above the stalled holder's %d", job, takerToken, staleToken)
	}
	if !w0.Stopped() {
		t.Fatal("w0 ran again before it was resumed")
	}
	wantJob(t, store, job, takerToken, 1, 0)

	time.Sleep(time.Until(stoppedAt.Add(pause))) // the pause's length; the order is settled
	w0.Signal(t, syscall.SIGCONT)
	testwait.Eventually(t, 5*time.Second, "w0's write of job "+job+" refused", func() bool {
		return len(w0.Fields("job", job, "stale", strconv.FormatUint(staleToken, 10))) > 0
	})
	wantJob(t, store, job, takerToken, 1, 1)

	// Every worker finds the table done and exits cleanly.
	testwait.Eventually(t, 20*time.Second, "every worker exits", func() bool {
		return w0.Exited() && w1.Exited() && w2.Exited()
	})
	for _, w := range workers {
		t.Logf("%s printed %q", w.Name, w.Lines())
		if code, _ := w.ExitCode(); code != 0 {
			t.Errorf("%s exited with %d", w.Name, code)
		}
		if l := w.Lines(); len(l) == 0 || l[len(l)-1] != "exit" {
			t.Errorf("%s did not say that every job is done", w.Name)
		}
	}

	// Exactly once: each job has one accepted result, and one worker says
	// it wrote it, with the token the store kept.
	stale := 0
	for i := 1; i <= jobs; i++ {
		id := strconv.Itoa(i)
		var done [][]string
		for _, w := range workers {
			for _, f := range w.Fields("job", id, "done") {
				done = append(done, append(f, w.Name))
			}
			stale += len(w.Fields("job", id, "stale"))
		}
		if len(done) != 1 {
			t.Errorf("job %s: %d workers say they wrote it: %q", id, len(done), done)
			continue
		}
		wantJob(t, store, id, token(t, done[0][3]), 1, -1)
		if got := hget(t, store, id, "worker"); got != done[0][4] {
			t.Errorf("job %s: the store has the result of %q, %s says it wrote it", id, got, done[0][4])
		}
	}
	rejected := 0
	for i := 1; i <= jobs; i++ {
		rejected += count(t, store, strconv.Itoa(i), "rejected")
	}
	// w0's write is the one refusal of a quiet run (checked above). A
	// worker whose lease ran out under load may meet one too; it says
	// so, unless the lease's end cut its claim short after the store
	// took it.
	if stale > rejected {
		t.Errorf("the workers say %d claims and writes were refused, the store counts %d", stale, rejected)
	}
	if n, err := store.Do(context.Background(), "SCARD", doneKey); err != nil || n != int64(jobs) {
		t.Errorf("%d jobs done in the store (%v), want %d", n, err, jobs)
	}
}

// wantJob checks the store's record of job: the accepted result's token,
// how many results were accepted, and how many claims and writes were
// refused (unless rejected is negative).
func wantJob(t *testing.T, store *redisproc.Node, job string, tok uint64, writes, rejected int) {
	t.Helper()
	if got := hget(t, store, job, "token"); got != strconv.FormatUint(tok, 10) {
		t.Errorf("job %s: the store kept the result of token %s, want %d", job, got, tok)
	}
	if got := count(t, store, job, "writes"); got != writes {
		t.Errorf("job %s: the store accepted %d results, want %d", job, got, writes)
	}
	if got := count(t, store, job, "rejected"); rejected >= 0 && got != rejected {
		t.Errorf("job %s: the store refused %d claims and writes, want %d", job, got, rejected)
	}
}

func hget(t *testing.T, store *redisproc.Node, job, field string) string {
	t.Helper()
	v, err := store.Do(context.Background(), "HGET", jobKeyPrefix+job, field)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := v.(string) // nil: no such field
	return s
}

func count(t *testing.T, store *redisproc.Node, job, field string) int {
	t.Helper()
	s := hget(t, store, job, field)
	if s == "" {
		return 0
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("job %s: %s is %q", job, field, s)
	}
	return n
}

func token(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("token %q: %v", s, err)
	}
	return n
}

// TestHandOff stops a worker (SIGTERM) during a job with -handoff: it
// lets the job's lease go with Detach, leaves the lease's handle in the
// store and exits, closing its engine, which releases nothing: the keys
// stay on every lock node. The next worker takes the lease up with
// Resume, token and all, and the store takes its result under that
// token.
func TestHandOff(t *testing.T) {
	locks := redisproc.Start(t, 3)
	store := redisproc.Start(t, 1).Nodes[0]
	if err := engine.MarkNew(context.Background(), engine.Config{Nodes: locks.Addrs()}); err != nil {
		t.Fatal(err)
	}
	args := func(name string) []string {
		return []string{"-nodes", strings.Join(locks.Addrs(), ","), "-store", store.Addr(), "-name", name,
			"-jobs", "1", "-ttl", "5s", "-work", "2s", "-handoff"}
	}
	w0 := proctest.Start(t, "w0", args("w0")...)
	testwait.Eventually(t, 20*time.Second, "w0 takes the job", func() bool { return len(w0.Fields("job", "1", "start")) > 0 })
	tok := w0.Fields("job", "1", "start")[0][3]
	w0.Signal(t, syscall.SIGTERM)
	testwait.Eventually(t, 10*time.Second, "w0 exits", w0.Exited)
	if code, _ := w0.ExitCode(); code != 0 || len(w0.Fields("job", "1", "handoff", tok)) != 1 {
		t.Fatalf("w0 exited with %d, printing %q; want it to hand job 1 over", code, w0.Lines())
	}
	key := engine.DefaultKeyPrefix + "{job:1}"
	for i, n := range locks.Nodes {
		if _, ok, err := n.Get(context.Background(), key); err != nil || !ok {
			t.Errorf("lock node %d: no key of the job's lease after w0 exited (%v)", i, err)
		}
	}

	w1 := proctest.Start(t, "w1", args("w1")...)
	testwait.Eventually(t, 20*time.Second, "w1 exits", w1.Exited)
	if code, _ := w1.ExitCode(); code != 0 || len(w1.Fields("job", "1", "resume", tok)) != 1 || len(w1.Fields("job", "1", "done", tok)) != 1 {
		t.Fatalf("w1 exited with %d, printing %q; want it to take up job 1 with token %s and do it", code, w1.Lines(), tok)
	}
	wantJob(t, store, "1", token(t, tok), 1, 0)
}
