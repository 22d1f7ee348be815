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

// TestMain runs main instead of the tests in the candidate processes
// that the tests start (proctest.Start).
func TestMain(m *testing.M) { proctest.Main(m, main) }

// The scene's numbers: the election's lease lives a second past its last
// extension, the leader beats ten times a second, and the paused leader
// stops for three seconds.
const (
	ttl      = time.Second
	beat     = 100 * time.Millisecond
	pause    = 3 * time.Second
	election = "leader"
	// takeover bounds the time from a leader's death (or stop) to its
	// successor's first accepted heartbeat: the dead leader's keys live
	// a TTL at most; the rest is slack for a loaded machine.
	takeover = ttl + 3*time.Second
)

// TestFailover runs three candidate processes for one election. The first
// leader is killed (SIGKILL): a follower leads within a TTL and some slack,
// with a larger token. That leader is then stopped (SIGSTOP) for longer
// than the TTL: the third candidate leads; when the stopped one resumes,
// it steps down at once, and the store never accepted a heartbeat of a
// deposed leader after its successor's first. Meanwhile nobody else
// leads: the followers wait in line.
func TestFailover(t *testing.T) {
	locks := redisproc.Start(t, 3)
	store := redisproc.Start(t, 1).Nodes[0]
	if err := engine.MarkNew(context.Background(), engine.Config{Nodes: locks.Addrs()}); err != nil {
		t.Fatal(err)
	}
	var candidates []*proctest.Proc
	for _, name := range []string{"c0", "c1", "c2"} {
		candidates = append(candidates, proctest.Start(t, name,
			"-nodes", strings.Join(locks.Addrs(), ","), "-store", store.Addr(), "-name", name,
			"-election", election, "-ttl", ttl.String(), "-beat", beat.String()))
	}
	s := scene{t: t, store: store, candidates: candidates}

	// One of them leads.
	var first term
	testwait.Eventually(t, 20*time.Second, "a leader's first heartbeat", func() bool {
		first = s.current()
		return first.proc != nil
	})
	t.Logf("%s leads with token %d", first.proc.Name, first.token)
	s.beats(first)

	// Killed, it is replaced.
	first.proc.Kill(t)
	killed := time.Now()
	second := s.next(first, "after the leader was killed")
	t.Logf("%s leads with token %d, %v after %s was killed", second.proc.Name, second.token, time.Since(killed).Round(time.Millisecond), first.proc.Name)

	s.beats(second)

	// Stopped, it is replaced too; resumed, it steps down.
	second.proc.Signal(t, syscall.SIGSTOP)
	testwait.Eventually(t, time.Second, second.proc.Name+" stops", second.proc.Stopped)
	stopped := time.Now()
	third := s.next(second, "after the leader was stopped")
	t.Logf("%s leads with token %d, %v after %s was stopped", third.proc.Name, third.token, time.Since(stopped).Round(time.Millisecond), second.proc.Name)
	if !second.proc.Stopped() {
		t.Fatalf("%s ran again before it was resumed", second.proc.Name)
	}
	time.Sleep(time.Until(stopped.Add(pause))) // the pause's length; the order is settled
	second.proc.Signal(t, syscall.SIGCONT)
	resumed := time.Now()
	var cause string
	testwait.Eventually(t, 2*time.Second, second.proc.Name+" steps down", func() bool {
		if f := second.proc.Fields("stepdown", strconv.FormatUint(second.token, 10)); len(f) > 0 {
			cause = f[0][2]
			return true
		}
		return false
	})
	t.Logf("%s stepped down %v after it was resumed: %s", second.proc.Name, time.Since(resumed).Round(time.Millisecond), cause)
	if cause != "stale" && cause != "lost" {
		t.Errorf("%s stepped down as %q, want stale (the store refused its heartbeat) or lost (its lease told it first)", second.proc.Name, cause)
	}

	// The leader keeps leading, by extending its lease; the follower waits
	// in line.
	testwait.Never(t, 2*ttl, "another term began", func() bool {
		return s.leaderLines() != 3 || s.fence() != third.token
	})

	// The store's record: three terms, in order, each from the first
	// heartbeat of its leader on; a heartbeat it refused for each leader
	// that said so.
	beats := s.log()
	terms := []term{first, second, third}
	at := 0 // the term of the heartbeat
	for i, b := range beats {
		for at < len(terms) && b.token != terms[at].token {
			at++
		}
		if at == len(terms) {
			t.Fatalf("heartbeat %d of %d, %v, is not of the current term or a later one: %v", i, len(beats), b, beats)
		}
		if b.name != terms[at].proc.Name {
			t.Errorf("heartbeat %d, %v, is not from %s, the leader with its token", i, b, terms[at].proc.Name)
		}
	}
	for _, tm := range terms {
		if !hasToken(beats, tm.token) {
			t.Errorf("no heartbeat of %s's term (token %d) in the store", tm.proc.Name, tm.token)
		}
	}
	stale := 0
	for _, c := range candidates {
		for _, f := range c.Fields("stepdown") {
			if f[2] == "stale" {
				stale++
			}
		}
	}
	// The resumed leader sends at most one heartbeat before it steps down:
	// refused, or cut short by its lease's end, with the reply unread,
	// while the store refused it all the same.
	rejected := s.count("rejected")
	if rejected > 1 || stale > rejected {
		t.Errorf("the store refused %d heartbeats, and %d leaders stepped down for a refusal; want at most 1, and at most as many as refused", rejected, stale)
	}
	t.Logf("the store accepted %d heartbeats (%d, %d and %d per term) and refused %d",
		len(beats), countToken(beats, first.token), countToken(beats, second.token), countToken(beats, third.token), rejected)

	// Interrupted, the two left resign and exit cleanly.
	for _, c := range []*proctest.Proc{second.proc, third.proc} {
		c.Signal(t, syscall.SIGINT)
	}
	testwait.Eventually(t, 10*time.Second, "the candidates exit", func() bool {
		return second.proc.Exited() && third.proc.Exited()
	})
	for _, c := range []*proctest.Proc{second.proc, third.proc} {
		if code, _ := c.ExitCode(); code != 0 {
			t.Errorf("%s exited with %d", c.Name, code)
		}
	}
	// Read once the leader has exited: it beats between two reads.
	if got, logged := s.count("beats"), len(s.log()); got != logged {
		t.Errorf("the store counts %d heartbeats and logs %d", got, logged)
	}
	if f := third.proc.Fields("stepdown", strconv.FormatUint(third.token, 10)); len(f) != 1 || f[0][2] != "resigned" {
		t.Errorf("%s's term ended as %q, want resigned", third.proc.Name, f)
	}
}

// A term: its leader and token.
type term struct {
	proc  *proctest.Proc
	token uint64
}

type scene struct {
	t          *testing.T
	store      *redisproc.Node
	candidates []*proctest.Proc
}

// current returns the term whose leader says it leads, is still running
// and not stopped, and whose heartbeat the store accepted last; a term
// without a leader when there is none.
func (s *scene) current() term {
	fence := s.fence()
	for _, c := range s.candidates {
		if c.Exited() || c.Stopped() {
			continue
		}
		f := c.Fields("leader", strconv.FormatUint(fence, 10))
		if len(f) > 0 && len(c.Fields("stepdown", f[0][1])) == 0 {
			return term{c, fence}
		}
	}
	return term{}
}

// next waits for the term after prev, from another leader, and checks
// that its token is larger.
func (s *scene) next(prev term, what string) term {
	s.t.Helper()
	var next term
	testwait.Eventually(s.t, takeover, "a new leader's first heartbeat "+what, func() bool {
		next = s.current()
		return next.proc != nil && next.proc != prev.proc
	})
	if next.token <= prev.token {
		s.t.Fatalf("%s leads with token %d, not above %s's %d", next.proc.Name, next.token, prev.proc.Name, prev.token)
	}
	return next
}

// beats waits until the store accepted a few heartbeats of tm: its
// leader leads.
func (s *scene) beats(tm term) {
	s.t.Helper()
	testwait.Eventually(s.t, time.Second+5*beat, "5 heartbeats of "+tm.proc.Name, func() bool {
		return countToken(s.log(), tm.token) >= 5
	})
}

// leaderLines counts the "leader" lines of every candidate: one per term.
func (s *scene) leaderLines() int {
	n := 0
	for _, c := range s.candidates {
		n += len(c.Fields("leader"))
	}
	return n
}

// fence returns the highest token the store has seen; 0 before any.
func (s *scene) fence() uint64 {
	v := s.hget("fence")
	if v == "" {
		return 0
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		s.t.Fatalf("fence %q: %v", v, err)
	}
	return n
}

func (s *scene) count(field string) int {
	v := s.hget(field)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		s.t.Fatalf("%s %q: %v", field, v, err)
	}
	return n
}

func (s *scene) hget(field string) string {
	v, err := s.store.Do(context.Background(), "HGET", "leader:"+election, field)
	if err != nil {
		s.t.Fatal(err)
	}
	str, _ := v.(string) // nil: no such field
	return str
}

// A heartbeat the store accepted.
type heartbeat struct {
	token uint64
	name  string
}

// log returns the heartbeats the store accepted, oldest first.
func (s *scene) log() []heartbeat {
	v, err := s.store.Do(context.Background(), "LRANGE", "leader:"+election+":log", "0", "-1")
	if err != nil {
		s.t.Fatal(err)
	}
	var beats []heartbeat
	for _, e := range v.([]any) {
		tok, name, _ := strings.Cut(e.(string), " ")
		n, err := strconv.ParseUint(tok, 10, 64)
		if err != nil {
			s.t.Fatalf("heartbeat %q: %v", e, err)
		}
		beats = append(beats, heartbeat{n, name})
	}
	return beats
}

func hasToken(beats []heartbeat, token uint64) bool { return countToken(beats, token) > 0 }

func countToken(beats []heartbeat, token uint64) int {
	n := 0
	for _, b := range beats {
		if b.token == token {
			n++
		}
	}
	return n
}
