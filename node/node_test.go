package node

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/redis/rueidis"

	"github.com/redlease/redlease/actors"
	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/internal/testwait"
)

// harness runs one node actor over a real redis-server and collects its
// votes on a channel.
type harness struct {
	t      *testing.T
	server *redisproc.Node
	node   *Node
	system *actor.ActorSystem
	inbox  *actor.PID
	votes  chan *Vote
	ttl    time.Duration // askUntil's: at most the quarantine, as an engine's (MaxTTL)
}

const epochKey = "test:epoch"

func newHarness(t *testing.T, timeout time.Duration) *harness {
	return newHarnessQ(t, timeout, -1)
}

// newHarnessQ runs the node actor with restart quarantine q (< 0: off).
func newHarnessQ(t *testing.T, timeout, quarantine time.Duration) *harness {
	return newHarnessCfg(t, Config{Timeout: timeout, Quarantine: quarantine})
}

// newHarnessCfg runs the node actor with cfg over a new server; with
// cfg.First set (to anything), the server counts as having served
// redlease before: it holds the epoch marker of its process.
func newHarnessCfg(t *testing.T, cfg Config) *harness {
	t.Helper()
	c := redisproc.Start(t, 1)
	h := &harness{t: t, server: c.Nodes[0], system: actors.NewSystem(nil), votes: make(chan *Vote, 10000), ttl: time.Minute}
	if cfg.Quarantine > 0 {
		h.ttl = cfg.Quarantine
	}
	h.inbox = h.system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if v, ok := ctx.Message().(*Vote); ok {
			h.votes <- v
		}
	}))
	cfg.Addr = c.Addrs()[0]
	cfg.EpochKey = epochKey
	cfg.Conn = NewConn(rueidis.ClientOption{InitAddress: c.Addrs()})
	info, err := cfg.Conn.Probe(t.Context(), epochKey, Info{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.First != nil { // asked for a node that served redlease before
		if ok, err := cfg.Conn.Mark(t.Context(), epochKey, info, true); !ok || err != nil {
			t.Fatalf("mark: %v %v", ok, err)
		}
		info.Epoch = info.Lineage()
	}
	cfg.First = &info
	h.node = Spawn(h.system, cfg)
	t.Cleanup(func() {
		h.node.Stop()
		h.system.Shutdown()
	})
	return h
}

func (h *harness) req(key, value string, round uint64) Request {
	return Request{Key: key, Value: value, Round: round, ReplyTo: h.inbox}
}

// ask sends one command and waits for its vote.
func (h *harness) ask(cmd Command) *Vote {
	h.t.Helper()
	h.system.Root.Send(h.node.PID, cmd)
	select {
	case v := <-h.votes:
		return v
	case <-time.After(5 * time.Second):
		h.t.Fatalf("no vote for %T", cmd)
		return nil
	}
}

func TestVotes(t *testing.T) {
	h := newHarness(t, time.Second)
	ctx := t.Context()
	ttl := 10 * time.Second
	steps := []struct {
		name string
		cmd  Command
		want Outcome
	}{
		{"acquire free key", &Acquire{Request: h.req("k", "me", 1), TTL: ttl}, Granted},
		// A later round (Contended): a first one never meets its own key.
		{"acquire again after a lost reply", &Acquire{Request: h.req("k", "me", 2), TTL: ttl, Contended: true}, Granted},
		{"acquire held key", &Acquire{Request: h.req("k", "other", 3), TTL: ttl}, Taken},
		{"extend own key", &Extend{h.req("k", "me", 4), ttl}, Granted},
		{"extend foreign key", &Extend{h.req("k", "other", 5), ttl}, Taken},
		{"release foreign key", &Release{Request: h.req("k", "other", 6), TTL: time.Minute}, Taken},
		{"release own key", &Release{Request: h.req("k", "me", 7), TTL: time.Minute}, Granted},
		{"release absent key", &Release{Request: h.req("k", "me", 8), TTL: time.Minute}, Absent},
		{"extend absent key", &Extend{h.req("k", "me", 9), ttl}, Absent},
		{"heal absent key", &Heal{h.req("k", "me", 10), ttl}, Granted},
		{"heal own key", &Heal{h.req("k", "me", 11), ttl}, Taken},
		{"heal foreign key", &Heal{h.req("k", "other", 12), ttl}, Taken},
	}
	for _, s := range steps {
		v := h.ask(s.cmd)
		if v.Outcome != s.want || v.Round != s.cmd.request().Round || v.Err != nil {
			t.Fatalf("%s: vote %+v, want %v for round %d", s.name, v, s.want, s.cmd.request().Round)
		}
		if v.RTT <= 0 {
			t.Fatalf("%s: RTT %v", s.name, v.RTT)
		}
		val, ok, err := h.server.Get(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		switch s.name {
		case "acquire free key", "acquire held key", "extend foreign key", "release foreign key", "heal absent key", "heal foreign key":
			if !ok || val != "me" {
				t.Fatalf("%s: key is %q, want %q", s.name, val, "me")
			}
		case "release own key", "release absent key":
			if ok {
				t.Fatalf("%s: key still there (%q)", s.name, val)
			}
		}
	}
}

// The TTL goes to Redis in milliseconds, and an extension resets it.
func TestTTL(t *testing.T) {
	h := newHarness(t, time.Second)
	if v := h.ask(&Acquire{Request: h.req("t", "me", 1), TTL: 5 * time.Second}); v.Outcome != Granted {
		t.Fatalf("acquire: %+v", v)
	}
	pttl, err := h.server.PTTL(t.Context(), "t")
	if err != nil || pttl <= 4*time.Second || pttl > 5*time.Second {
		t.Fatalf("PTTL after acquire = %v, %v; want just under 5s", pttl, err)
	}
	if v := h.ask(&Extend{h.req("t", "me", 2), 60 * time.Second}); v.Outcome != Granted {
		t.Fatalf("extend: %+v", v)
	}
	if pttl, err = h.server.PTTL(t.Context(), "t"); err != nil || pttl <= 59*time.Second {
		t.Fatalf("PTTL after extend = %v, %v; want just under 60s", pttl, err)
	}
	// A heal sets the TTL it is given: the time the lease's keys have left.
	if v := h.ask(&Heal{h.req("h", "me", 3), 2500 * time.Millisecond}); v.Outcome != Granted {
		t.Fatalf("heal: %+v", v)
	}
	if pttl, err = h.server.PTTL(t.Context(), "h"); err != nil || pttl <= 1500*time.Millisecond || pttl > 2500*time.Millisecond {
		t.Fatalf("PTTL after heal = %v, %v; want just under 2.5s", pttl, err)
	}
}

// A heal sets a key as an acquire does, so it is refused where an acquire
// is: unsent while the node sits out a quarantine, and by the script where
// the epoch marker does not hold (which quarantines the node from then).
// Nothing is set either way.
func TestHealRefusedLikeAnAcquire(t *testing.T) {
	refused := func(t *testing.T, h *harness) {
		t.Helper()
		v := h.ask(&Heal{h.req("k", "me", 1), time.Minute})
		if v.Outcome != Failed || !errors.Is(v.Err, ErrQuarantined) {
			t.Fatalf("heal: %+v, want ErrQuarantined", v)
		}
		if val, ok, err := h.server.Get(t.Context(), "k"); ok || err != nil {
			t.Fatalf("the heal set %q (%v)", val, err)
		}
		// The vote is answered before the actor takes in what the batch
		// found: the quarantine shows in Stats a moment later.
		testwait.Eventually(t, 2*time.Second, "the node quarantined", func() bool {
			return !h.node.Stats().QuarantineUntil.IsZero()
		})
		if until := h.node.Stats().QuarantineUntil; time.Until(until) < 30*time.Second {
			t.Fatalf("quarantined until %v, want about a minute from now", until)
		}
	}
	t.Run("quarantined", func(t *testing.T) {
		refused(t, newHarnessQ(t, time.Second, time.Minute)) // unmarked: quarantined at first sight
	})
	t.Run("marker gone", func(t *testing.T) {
		h := newHarnessCfg(t, Config{Timeout: time.Second, Quarantine: time.Minute, HealthInterval: time.Hour, First: trusted})
		if v := h.ask(&Heal{h.req("k", "me", 1), time.Minute}); v.Outcome != Granted {
			t.Fatalf("heal on a trusted node: %+v", v)
		}
		// The marker goes between probes (as with the keys of a FLUSHALL;
		// a DEL leaves no count for a probe to see): only the script can tell.
		if _, err := h.server.Do(t.Context(), "DEL", epochKey, "k"); err != nil {
			t.Fatal(err)
		}
		refused(t, h)
	})
}

// Leases of different TTLs in one batch each get their own: the node
// actor keeps the text of the last TTL it formatted (millis), which must
// never carry over to a command of another TTL.
func TestMixedTTLsInOneBatch(t *testing.T) {
	h := newHarness(t, 5*time.Second)
	ttls := []time.Duration{5 * time.Second, time.Minute, time.Minute, 5 * time.Second}
	const n = 400
	for i := range n {
		h.system.Root.Send(h.node.PID, &Acquire{Request: h.req(fmt.Sprintf("m%d", i), "me", uint64(i)), TTL: ttls[i%len(ttls)]})
	}
	for range n {
		select {
		case v := <-h.votes:
			if v.Outcome != Granted {
				t.Fatalf("vote %+v", v)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("votes missing")
		}
	}
	if b := h.node.Stats().Batches; b*4 > n {
		t.Fatalf("%d commands in %d batches: the test needs them to share batches", n, b)
	}
	for i := range n {
		want := ttls[i%len(ttls)]
		pttl, err := h.server.PTTL(t.Context(), fmt.Sprintf("m%d", i))
		if err != nil || pttl > want || pttl < want-2*time.Second {
			t.Fatalf("key m%d: PTTL %v (%v), want just under its own TTL %v", i, pttl, err, want)
		}
	}
}

// Commands that queue while a batch is on the wire share the next round
// trip, and each still gets its own vote.
func TestConcurrentCommandsShareRoundTrips(t *testing.T) {
	h := newHarness(t, 5*time.Second)
	const n = 3000
	for i := range n {
		h.system.Root.Send(h.node.PID, &Acquire{Request: h.req(fmt.Sprintf("b%d", i), "me", uint64(i)), TTL: time.Minute})
	}
	seen := make(map[uint64]bool, n)
	for range n {
		select {
		case v := <-h.votes:
			if v.Outcome != Granted || seen[v.Round] {
				t.Fatalf("vote %+v (seen before: %v)", v, seen[v.Round])
			}
			seen[v.Round] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d votes", len(seen), n)
		}
	}
	cmds, batches := h.node.Stats().Commands, h.node.Stats().Batches
	if cmds != n || batches*10 > cmds {
		t.Fatalf("%d commands in %d batches: want them to share round trips (≥10 per batch)", cmds, batches)
	}
	keys, err := h.server.Keys(t.Context(), "b*")
	if err != nil || len(keys) != n {
		t.Fatalf("%d keys, %v", len(keys), err)
	}
}

// A paused node answers Timeout by the deadline, and serves again once
// resumed.
func TestPausedNodeTimesOut(t *testing.T) {
	h := newHarness(t, 100*time.Millisecond)
	if err := h.server.Pause(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	v := h.ask(&Acquire{Request: h.req("p", "me", 1), TTL: time.Minute})
	if took := time.Since(start); v.Outcome != Timeout || took > 2*time.Second {
		t.Fatalf("vote %+v after %v, want Timeout near 100ms", v, took)
	}
	if err := h.server.Resume(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for round := uint64(2); ; round++ {
		// Later rounds (Contended): the first one's SET may have landed.
		v := h.ask(&Acquire{Request: h.req("p", "me", round), TTL: time.Minute, Contended: true})
		if v.Outcome == Granted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node not back after resume: %+v", v)
		}
	}
}

// A node restarted without persistence lost its scripts; commands still
// work (sent again in full).
func TestRestartedNodeForgotScripts(t *testing.T) {
	h := newHarness(t, time.Second)
	if v := h.ask(&Acquire{Request: h.req("s", "me", 1), TTL: time.Minute}); v.Outcome != Granted {
		t.Fatalf("%+v", v)
	}
	if _, err := h.server.Do(t.Context(), "SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	if v := h.ask(&Release{Request: h.req("s", "me", 2), TTL: time.Minute}); v.Outcome != Granted {
		t.Fatalf("release after SCRIPT FLUSH: %+v", v)
	}
	if err := h.server.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for round := uint64(3); ; round++ {
		v := h.ask(&Acquire{Request: h.req("s", "me", round), TTL: time.Minute})
		if v.Outcome == Granted {
			break
		}
		if v.Outcome != Failed || time.Now().After(deadline) {
			t.Fatalf("after restart: %+v", v)
		}
	}
}

// Stop answers every command: the one on the wire by its deadline, the
// queued ones with ErrStopped, those still in the actor's mailbox too
// (the sender goroutine that runs it is blocked with the batch on the
// wire: Stop, a system message, is handled before them).
func TestStopAnswersEveryCommand(t *testing.T) {
	h := newHarness(t, 300*time.Millisecond)
	if err := h.server.Pause(); err != nil {
		t.Fatal(err)
	}
	h.system.Root.Send(h.node.PID, &Acquire{Request: h.req("q", "me", 0), TTL: time.Minute})
	testwait.Eventually(t, 10*time.Second, "the first command on the wire", func() bool { return h.node.Stats().OnWire == 1 })
	for i := range 2 {
		h.system.Root.Send(h.node.PID, &Acquire{Request: h.req("q", "me", uint64(i+1)), TTL: time.Minute})
	}
	// The first on the wire, two in the mailbox.
	testwait.Eventually(t, 10*time.Second, "two commands in the mailbox", func() bool { return h.node.Stats().Queued == 2 })
	h.node.Stop()
	got := map[Outcome]int{}
	for range 3 {
		select {
		case v := <-h.votes:
			got[v.Outcome]++
			if v.Outcome == Failed && !errors.Is(v.Err, ErrStopped) {
				t.Fatalf("queued command answered %v, want ErrStopped", v.Err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("votes so far %v: a command was not answered", got)
		}
	}
	if got[Timeout] != 1 || got[Failed] != 2 {
		t.Fatalf("outcomes %v, want 1 timeout and 2 failed", got)
	}
	_ = h.server.Resume()
}

// outcomes collects the next n votes' outcomes by round.
func (h *harness) outcomes(n int) map[uint64]Outcome {
	h.t.Helper()
	got := map[uint64]Outcome{}
	for range n {
		select {
		case v := <-h.votes:
			got[v.Round] = v.Outcome
		case <-time.After(10 * time.Second):
			h.t.Fatalf("votes so far %v", got)
		}
	}
	return got
}

// askUntil sends acquires until one gets want (or fails the test after
// limit), and returns how long that took.
func (h *harness) askUntil(key string, want Outcome, limit time.Duration) time.Duration {
	h.t.Helper()
	start := time.Now()
	round, v := uint64(999), (*Vote)(nil)
	defer func() {
		if h.t.Failed() {
			h.t.Logf("last vote %+v", v)
		}
	}()
	testwait.Eventually(h.t, limit, fmt.Sprintf("an acquire of %q answered %v", key, want), func() bool {
		round++
		v = h.ask(&Acquire{Request: h.req(key, "me", round), TTL: h.ttl})
		return v.Outcome == want
	})
	return time.Since(start)
}

// A node that stopped answering is marked down and then fails commands at
// once instead of after the timeout; it is used again once it answers.
func TestDownNodeFailsFastAndComesBack(t *testing.T) {
	h := newHarness(t, 200*time.Millisecond)
	if err := h.server.Pause(); err != nil {
		t.Fatal(err)
	}
	for round := uint64(1); !h.node.Stats().Down; round++ {
		if round > 20 {
			t.Fatal("node not marked down after 20 timed-out commands")
		}
		h.ask(&Acquire{Request: h.req("d", "me", round), TTL: time.Minute})
	}
	start := time.Now()
	v := h.ask(&Release{Request: h.req("d", "me", 100), TTL: time.Minute})
	if took := time.Since(start); v.Outcome != Failed || !errors.Is(v.Err, ErrNodeDown) || took > 150*time.Millisecond {
		t.Fatalf("vote %+v after %v: want ErrNodeDown at once", v, took)
	}
	if err := h.server.Resume(); err != nil {
		t.Fatal(err)
	}
	h.askUntil("d", Granted, 5*time.Second)
	if h.node.Stats().Down {
		t.Fatal("still marked down after granting")
	}
}

// A node that lost its data refuses acquires until the quarantine after
// its restart has passed, then grants again; extends and releases still
// go through.
func TestRestartQuarantine(t *testing.T) {
	const q = 1500 * time.Millisecond
	h := newHarnessQ(t, time.Second, q)
	// A fresh server (up for less than q) is quarantined for the rest of q.
	if v := h.ask(&Acquire{Request: h.req("r", "me", 1), TTL: q}); v.Outcome != Failed || !errors.Is(v.Err, ErrQuarantined) {
		t.Fatalf("fresh node: %+v, want ErrQuarantined", v)
	}
	h.askUntil("r", Granted, 3*time.Second)

	restarted := time.Now() // the new process starts after this
	if err := h.server.Restart(); err != nil {
		t.Fatal(err)
	}
	waited := h.askUntil("r", Granted, 5*time.Second)
	if since := time.Since(restarted); since < q {
		t.Fatalf("granted %v after the restart, within the %v quarantine", since, q)
	}
	if h.node.Stats().Restarts < 2 {
		t.Fatalf("restarts counted: %d, want the fresh start and the restart", h.node.Stats().Restarts)
	}
	t.Logf("granted again %v after the restart", waited)
}

// INFO's uptime_in_seconds is the difference of two whole-second clocks:
// a process started just before a second boundary reports 1 s of uptime a
// few milliseconds later. Counted as elapsed, that second ended a short
// quarantine before it began. The quarantine counts from when the engine
// sees the new process, never by its uptime.
func TestQuarantineCountsFromTheLatestPossibleStart(t *testing.T) {
	const q = time.Second
	// The restart at .75 of a wall-clock second (INFO's seconds follow
	// it; a restart takes up to 250ms on a loaded machine), the uptime
	// read at .1 of the next: INFO counts the turn, 1s, while 350ms
	// passed, and the quarantine has 650ms to go (counted from the
	// uptime, it would have ended at .1).
	const atTheEnd, afterTheSecond = 750 * time.Millisecond, 350 * time.Millisecond
	h := newHarnessCfg(t, Config{Timeout: time.Second, Quarantine: q, HealthInterval: time.Hour, First: trusted})
	ctx := t.Context()
	for try := 1; ; try++ {
		// Start the process at .9 of a wall-clock second and look at its
		// uptime just after the next second began.
		now := time.Now()
		at := now.Truncate(time.Second).Add(atTheEnd)
		if !at.After(now) {
			at = at.Add(time.Second)
		}
		time.Sleep(time.Until(at))
		restarted := time.Now()
		if err := h.server.Restart(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(at.Add(afterTheSecond)))
		up, err := h.server.ServerInfo(ctx, "uptime_in_seconds")
		if err != nil {
			t.Fatal(err)
		}
		if up != "1" {
			if try == 5 {
				t.Fatal("setup: the restart never landed before a second boundary in 5 tries")
			}
			continue // it started after the boundary: try again
		}
		v := h.ask(&Acquire{Request: h.req("r", "me", uint64(try)), TTL: time.Minute})
		if v.Outcome != Failed || !errors.Is(v.Err, ErrQuarantined) {
			t.Fatalf("%v after a restart that INFO calls 1 s old: %+v, want ErrQuarantined", time.Since(restarted).Round(time.Millisecond), v)
		}
		if until := h.node.Stats().QuarantineUntil; until.Before(restarted.Add(q)) {
			t.Fatalf("quarantined until %v after the restart began, want at least %v", until.Sub(restarted), q)
		}
		return
	}
}

func TestQuarantineOff(t *testing.T) {
	h := newHarness(t, time.Second) // quarantine off
	if v := h.ask(&Acquire{Request: h.req("o", "me", 1), TTL: time.Minute}); v.Outcome != Granted {
		t.Fatalf("%+v", v)
	}
	if err := h.server.Restart(); err != nil {
		t.Fatal(err)
	}
	h.askUntil("o", Granted, 3*time.Second) // only the reconnect in the way
}

// trusted is newHarnessCfg's cue for a node that served redlease before.
var trusted = &Info{}

// A node restarted from a snapshot keeps the epoch marker of the dataset
// before it but may have lost later lock keys. The reconnect waits for a
// probe, which finds a marker of another lineage and quarantines the node
// from then: the acquire that caused the reconnect is refused.
func TestRestoredMarkerOfAnotherProcessIsQuarantined(t *testing.T) {
	h := newHarnessCfg(t, Config{Timeout: time.Second, Quarantine: time.Minute, HealthInterval: time.Hour, First: trusted})
	if v := h.ask(&Acquire{Request: h.req("r", "me", 1), TTL: time.Minute}); v.Outcome != Granted {
		t.Fatalf("trusted node: %+v", v)
	}
	old, _, err := h.server.Get(t.Context(), epochKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.server.Restart(); err != nil {
		t.Fatal(err)
	}
	// What a snapshot taken before the lock key was written brings back.
	if err := h.server.Set(t.Context(), epochKey, old, 0); err != nil {
		t.Fatal(err)
	}
	if v := h.ask(&Acquire{Request: h.req("r", "other", 2), TTL: time.Minute}); v.Outcome != Failed || !errors.Is(v.Err, ErrQuarantined) {
		t.Fatalf("after a restart that kept an old marker: %+v, want ErrQuarantined", v)
	}
	if got := h.node.Stats().QuarantineUntil; time.Until(got) < 30*time.Second {
		t.Fatalf("quarantined until %v, want about a minute from the restart", got)
	}
}

// The epoch marker is written only on the process it was judged for.
func TestMarkReachesOnlyTheJudgedProcess(t *testing.T) {
	h := newHarness(t, time.Second)
	c := NewConn(rueidis.ClientOption{InitAddress: []string{h.server.Addr()}})
	defer c.Close()
	info, err := c.Probe(t.Context(), epochKey, Info{})
	if err != nil {
		t.Fatal(err)
	}
	other := info
	other.RunID += "x"
	if ok, err := c.Mark(t.Context(), epochKey, other, true); ok || err != nil {
		t.Fatalf("marked for another process: %v %v", ok, err)
	}
	if _, ok, _ := h.server.Get(t.Context(), epochKey); ok {
		t.Fatal("the marker was written for another process")
	}
	if ok, err := c.Mark(t.Context(), epochKey, info, true); !ok || err != nil {
		t.Fatalf("mark: %v %v", ok, err)
	}
	if v, _, _ := h.server.Get(t.Context(), epochKey); v != info.Lineage() {
		t.Fatalf("marker %q, want the lineage %q", v, info.Lineage())
	}
}

// A lease's cleanup release and its retry acquire share a batch after the
// node's script cache was flushed: the batch before them fails with
// NOSCRIPT and is sent again in full, and the release still takes effect
// before the acquire, so the node ends up granting it.
func TestNoScriptKeepsIssueOrder(t *testing.T) {
	h := newHarnessCfg(t, Config{Timeout: 5 * time.Second, Quarantine: -1, HealthInterval: time.Hour})
	ctx := t.Context()
	if v := h.ask(&Acquire{Request: h.req("o", "me", 1), TTL: time.Minute}); v.Outcome != Granted {
		t.Fatalf("%+v", v)
	}
	if _, err := h.server.Do(ctx, "SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	if err := h.server.Pause(); err != nil { // the next command stalls on the wire
		t.Fatal(err)
	}
	h.system.Root.Send(h.node.PID, &Extend{Request: h.req("o", "me", 2), TTL: time.Minute})
	testwait.Eventually(t, 10*time.Second, "the extend, stalled on the wire", func() bool { return h.node.Stats().OnWire == 1 })
	h.system.Root.Send(h.node.PID, &Release{Request: h.req("o", "me", 3), TTL: time.Minute})
	h.system.Root.Send(h.node.PID, &Acquire{Request: h.req("o", "me", 4), TTL: time.Minute})
	testwait.Eventually(t, 10*time.Second, "the release and the acquire queued behind it", func() bool { return h.node.Stats().Queued == 2 })
	if err := h.server.Resume(); err != nil {
		t.Fatal(err)
	}
	got := h.outcomes(3)
	if got[4] != Granted {
		t.Fatalf("votes %v: the retry acquire was not granted", got)
	}
	if b := h.node.Stats().Batches; b != 3 {
		t.Fatalf("%d batches, want 3: the release and the acquire did not share one", b)
	}
	if v, ok, err := h.server.Get(ctx, "o"); err != nil || !ok || v != "me" {
		t.Fatalf("key after release+acquire: %q %v %v; the node granted an acquire whose key is gone", v, ok, err)
	}
}

// With Overlap, while a batch is on the wire a second goes out with the
// commands a hand-off waits for, but for those whose keys the first
// carries: they wait for it, so that commands on one key take effect in
// the order they came (here an acquire after a release of its key).
func TestSecondBatchLeavesKeysOnTheWire(t *testing.T) {
	h := newHarnessCfg(t, Config{Timeout: 5 * time.Second, Quarantine: -1, HealthInterval: time.Hour, Overlap: true})
	ctx := t.Context()
	if v := h.ask(&Acquire{Request: h.req("a", "me", 1), TTL: time.Minute}); v.Outcome != Granted {
		t.Fatalf("%+v", v)
	}
	if err := h.server.Pause(); err != nil { // the next commands stall on the wire
		t.Fatal(err)
	}
	h.system.Root.Send(h.node.PID, &Release{Request: h.req("a", "me", 2), TTL: time.Minute})
	testwait.Eventually(t, 10*time.Second, "the release on the wire", func() bool { return h.node.Stats().OnWire == 1 })
	// Waiters' acquires (queued by when they began to wait): urgent.
	h.system.Root.Send(h.node.PID, &Acquire{Request: h.req("a", "you", 3), TTL: time.Minute, Since: "1"})
	h.system.Root.Send(h.node.PID, &Acquire{Request: h.req("b", "you", 4), TTL: time.Minute, Since: "1"})
	testwait.Eventually(t, 10*time.Second, "two commands on the wire and one queued", func() bool {
		s := h.node.Stats()
		return s.OnWire == 2 && s.Queued == 1
	})
	if err := h.server.Resume(); err != nil {
		t.Fatal(err)
	}
	got := h.outcomes(3)
	if got[3] != Granted || got[4] != Granted {
		t.Fatalf("votes %v, want both acquires granted", got)
	}
	if v, ok, err := h.server.Get(ctx, "a"); err != nil || !ok || v != "you" {
		t.Fatalf("key a: %q %v %v, want the acquire's, after the release", v, ok, err)
	}
}

// flush sends a second batch only with Overlap, and for an urgent
// command or overlapAt queued commands; it leaves in the queue, in order,
// the commands whose keys a batch on the wire carries: the live test above
// cannot tell which of two commands went out.
func TestFlushHoldsKeysOnTheWire(t *testing.T) {
	queue := func(urgent bool, keys ...string) *nodeActor {
		a := &nodeActor{cfg: Config{Timeout: time.Minute, Quarantine: -1}, work: make(chan job, maxWire), wires: overlapWires,
			started: maxWire} // no sender goroutines: the test reads the jobs
		a.used[0] = true
		a.onWire[0].add(keyBit("a"))
		for i, key := range keys {
			a.queue = append(a.queue, entry{op: opAcquire, req: &Request{Key: key, Round: uint64(i)},
				keyBit: keyBit(key), queued: time.Now(), urgent: urgent})
		}
		return a
	}
	names := func(es []entry) string {
		var s []string
		for _, e := range es {
			s = append(s, fmt.Sprint(e.req.Key, e.req.Round))
		}
		return fmt.Sprint(s)
	}
	a := queue(true, "a", "b", "a", "c")
	a.flush()
	j := <-a.work
	if sent, held := names(j.batch), names(a.queue); sent != "[b1 c3]" || held != "[a0 a2]" {
		t.Fatalf("sent %v and held %v, want [b1 c3] and [a0 a2]", sent, held)
	}
	if j.slot != 1 || a.inFlight() != 2 {
		t.Fatalf("slot %d, %d on the wire; want slot 1, 2", j.slot, a.inFlight())
	}
	for _, a := range []*nodeActor{queue(false, "b", "c"), queue(true, "a")} {
		a.flush()
		if len(a.work) != 0 {
			t.Fatalf("a second batch for %v: only for an urgent command whose key is not on the wire", names(a.queue))
		}
	}
	many := make([]string, overlapAt)
	for i := range many {
		many[i] = "k" + strconv.Itoa(i)
	}
	a = queue(false, many...)
	a.flush()
	if len(a.work) != 1 || len(a.queue) > 1 { // but for a key that shares a's bit
		t.Fatalf("%d commands queued, %d batches sent; want a second batch at %d", len(a.queue), len(a.work), overlapAt)
	}
	a = queue(true, "b")
	a.wires = 1 // no Overlap
	a.flush()
	if len(a.work) != 0 {
		t.Fatal("a second batch without Overlap")
	}

	// Behind a slow link, up to maxWire batches go, each deepEvery after
	// the last (a timer flushes then), without Overlap, with one command
	// or more.
	a = queue(false, "b")
	a.wires = 1
	now := time.Now()
	window(&a.link, now, slowLink)
	a.lastSent = now
	a.deepSet = true // as if its timer were set: this actor has no system to tick it
	a.flush()
	if len(a.work) != 0 {
		t.Fatal("a second batch on a slow link before deepEvery")
	}
	a.lastSent = now.Add(-deepEvery)
	a.flush()
	if len(a.work) != 1 {
		t.Fatal("no second batch on a slow link after deepEvery")
	}
	a = queue(false, "b")
	a.wires = 1
	window(&a.link, now, slowLink-time.Microsecond)
	a.lastSent = now.Add(-time.Second)
	a.flush()
	if len(a.work) != 0 {
		t.Fatal("a second batch on a fast link")
	}
}

// window gives l a whole window of linkSamples round trips of rtt, then
// one more in the next.
func window(l *link, now time.Time, rtt time.Duration) {
	for range linkSamples {
		l.add(now.Add(-linkWindow), rtt)
	}
	l.add(now, rtt)
}

// A link is slow only on a whole window's evidence: a node's first
// batches, or a window of a few, do not make it so, and one fast batch in
// either window makes it fast.
func TestSlowLinkEvidence(t *testing.T) {
	now := time.Now()
	var l link
	l.add(now, time.Second)
	if l.slow() {
		t.Fatal("slow on one batch")
	}
	l = link{}
	for range linkSamples - 1 {
		l.add(now.Add(-linkWindow), slowLink)
	}
	l.add(now, slowLink)
	if l.slow() {
		t.Fatalf("slow on a window of %d batches", linkSamples-1)
	}
	l = link{}
	window(&l, now, slowLink)
	if !l.slow() {
		t.Fatal("not slow on a whole slow window")
	}
	l.add(now, slowLink-time.Microsecond)
	if l.slow() {
		t.Fatal("slow after a fast batch")
	}
}

// One batch runs in several script calls (maxScriptOps commands each);
// every command gets its own reply, in order, and one that fails (a key
// of the wrong type) fails alone.
func TestBatchRepliesInOrder(t *testing.T) {
	h := newHarnessCfg(t, Config{Timeout: 5 * time.Second, Quarantine: -1, HealthInterval: time.Hour})
	ctx := t.Context()
	if _, err := h.server.Do(ctx, "RPUSH", "list", "x"); err != nil {
		t.Fatal(err)
	}
	if err := h.server.Set(ctx, "taken", "other", 0); err != nil {
		t.Fatal(err)
	}
	if err := h.server.Pause(); err != nil { // the next command stalls on the wire
		t.Fatal(err)
	}
	h.system.Root.Send(h.node.PID, &Extend{Request: h.req("none", "me", 1), TTL: time.Minute})
	testwait.Eventually(t, 10*time.Second, "the extend on the wire", func() bool { return h.node.Stats().OnWire == 1 })
	const n = 2*maxScriptOps + 10
	want := map[uint64]Outcome{1: Absent} // by round: the extend finds no key
	for i := range n {
		round := uint64(i + 2)
		key, o := "k"+strconv.Itoa(i), Granted
		switch i {
		case 3, maxScriptOps + 5:
			key, o = "list", Failed
		case maxScriptOps - 1, maxScriptOps, 2 * maxScriptOps:
			key, o = "taken", Taken
		}
		want[round] = o
		// Queueing (Since): through the script, not plain (plain.go).
		h.system.Root.Send(h.node.PID, &Acquire{Request: h.req(key, "me", round), TTL: time.Minute, Since: "1"})
	}
	testwait.Eventually(t, 10*time.Second, "every acquire queued", func() bool { return h.node.Stats().Queued == n })
	if err := h.server.Resume(); err != nil {
		t.Fatal(err)
	}
	for range n + 1 {
		select {
		case v := <-h.votes:
			if v.Outcome != want[v.Round] {
				t.Errorf("round %d: %v (%v), want %v", v.Round, v.Outcome, v.Err, want[v.Round])
			}
			if v.Outcome == Failed && (v.Err == nil || !strings.Contains(v.Err.Error(), "WRONGTYPE")) {
				t.Errorf("round %d failed with %v, want WRONGTYPE", v.Round, v.Err)
			}
			if v.Outcome == Taken && v.Round > 1 && v.Holder != Digest("other") {
				t.Errorf("round %d: holder %q, want %q", v.Round, v.Holder, Digest("other"))
			}
			delete(want, v.Round)
		case <-time.After(10 * time.Second):
			t.Fatalf("no votes for rounds %v", want)
		}
	}
	if b := h.node.Stats().Batches; b != 2 {
		t.Fatalf("%d batches, want 2", b)
	}
}

// A fence writes the lease's token back only while the lease holds its
// key, and raises the counter, never lowers it.
func TestFenceWritesBackTheToken(t *testing.T) {
	h := newHarness(t, 5*time.Second)
	ctx := t.Context()
	counter := func() string {
		t.Helper()
		v, _, err := h.server.Get(ctx, "fence")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := h.ask(&Acquire{Request: h.req("lock", "me", 1), TTL: time.Minute}); v.Outcome != Granted {
		t.Fatalf("%+v", v)
	}
	for _, step := range []struct {
		value string
		token uint64
		want  Outcome
		after string
	}{
		{"me", 42, Granted, "42"},
		{"other", 99, Taken, "42"}, // not the holder: nothing written
		{"me", 7, Granted, "42"},   // lower: the counter stays
		{"me", 50, Granted, "50"},
	} {
		v := h.ask(&Fence{Request: h.req("lock", step.value, 2), FenceKey: "fence", Token: step.token})
		if v.Outcome != step.want || counter() != step.after {
			t.Fatalf("fence %d by %s: %v, counter %q; want %v, %q", step.token, step.value, v.Outcome, counter(), step.want, step.after)
		}
	}
}

// A release the node did not answer in time is sent again once it
// answers, so a failed attempt's key does not stay for its whole TTL.
func TestUnansweredReleaseIsSentAgain(t *testing.T) {
	h := newHarnessCfg(t, Config{Timeout: 100 * time.Millisecond, Quarantine: -1, HealthInterval: 200 * time.Millisecond})
	if v := h.ask(&Acquire{Request: h.req("u", "me", 1), TTL: time.Minute}); v.Outcome != Granted {
		t.Fatalf("%+v", v)
	}
	if err := h.server.Pause(); err != nil {
		t.Fatal(err)
	}
	if v := h.ask(&Release{Request: h.req("u", "me", 2), TTL: time.Minute}); v.Outcome == Granted || v.Outcome == Taken {
		t.Fatalf("a paused node answered: %+v", v)
	}
	testwait.Eventually(t, 10*time.Second, "the node marked down while the release waits", func() bool { return h.node.Stats().Down })
	if err := h.server.Resume(); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 10*time.Second, "the release sent again: the key gone", func() bool {
		_, ok, err := h.server.Get(t.Context(), "u")
		return err == nil && !ok
	})
}

// Every way the package doc lists of losing a dataset in place changes
// its lineage, and a marker written for the lineage before is refused
// after: restart, flushes, swap, reload, promotion, and a master's first
// replica (Redis draws a new replication id with its backlog). A restart
// drawing a new replication id is what the batch script's check relies
// on between probes.
func TestLineageFollowsTheDataset(t *testing.T) {
	c := redisproc.Start(t, 2)
	n, other := c.Nodes[0], c.Nodes[1]
	ctx := t.Context()
	conn := NewConn(rueidis.ClientOption{InitAddress: []string{n.Addr()}})
	defer conn.Close()
	probe := func() Info {
		t.Helper()
		info, err := conn.Probe(ctx, epochKey, Info{})
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	_, otherPort, _ := strings.Cut(other.Addr(), ":")
	for _, step := range []struct {
		name string
		do   func() error
	}{
		{"FLUSHALL", func() error { _, err := n.Do(ctx, "FLUSHALL"); return err }},
		{"FLUSHALL ASYNC", func() error { _, err := n.Do(ctx, "FLUSHALL", "ASYNC"); return err }},
		{"FLUSHDB", func() error { _, err := n.Do(ctx, "FLUSHDB"); return err }},
		{"SWAPDB", func() error { _, err := n.Do(ctx, "SWAPDB", "0", "1"); return err }},
		{"DEBUG RELOAD", func() error {
			if err := n.Save(ctx); err != nil {
				return err
			}
			_, err := n.Do(ctx, "DEBUG", "RELOAD", "NOSAVE")
			return err
		}},
		{"restart", n.Restart},
		{"restart from a snapshot", func() error {
			if err := n.Save(ctx); err != nil {
				return err
			}
			return n.RestartFromSnapshot()
		}},
		{"first replica", func() error { return other.ReplicaOf(ctx, n) }},
		{"demoted and promoted", func() error {
			if _, err := other.Do(ctx, "REPLICAOF", "NO", "ONE"); err != nil {
				return err
			}
			if _, err := n.Do(ctx, "REPLICAOF", "127.0.0.1", otherPort); err != nil {
				return err
			}
			_, err := n.Do(ctx, "REPLICAOF", "NO", "ONE")
			return err
		}},
	} {
		before := probe()
		if ok, err := conn.Mark(ctx, epochKey, before, true); !ok || err != nil {
			t.Fatalf("%s: mark before: %v %v", step.name, ok, err)
		}
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		after := probe()
		if after.Lineage() == before.Lineage() {
			t.Errorf("%s: lineage %q unchanged", step.name, after.Lineage())
		}
		if after.Trusted() {
			t.Errorf("%s: still trusted (marker %q)", step.name, after.Epoch)
		}
		if ok, err := conn.Mark(ctx, epochKey, before, true); ok || err != nil {
			t.Errorf("%s: the marker of the lineage before was written after: %v %v", step.name, ok, err)
		}
		if strings.HasPrefix(step.name, "restart") && after.ReplID == before.ReplID {
			t.Errorf("%s: the replication id %s did not change", step.name, after.ReplID)
		}
	}
}

// Between probes, the batch script checks the live replication id beside
// the marker: a node whose marker still names the lineage the engine
// probed, but whose replication history changed since, refuses acquires
// and is quarantined without waiting for a probe.
func TestBatchChecksTheLiveReplID(t *testing.T) {
	h := newHarnessCfg(t, Config{Timeout: time.Second, Quarantine: time.Minute, HealthInterval: time.Hour, First: trusted})
	if v := h.ask(&Acquire{Request: h.req("r", "me", 1), TTL: time.Minute}); v.Outcome != Granted {
		t.Fatalf("trusted node: %+v", v)
	}
	// A first replica makes the node draw a new replication id; the
	// marker stays.
	if err := redisproc.Start(t, 1).Nodes[0].ReplicaOf(t.Context(), h.server); err != nil {
		t.Fatal(err)
	}
	if v := h.ask(&Acquire{Request: h.req("s", "me", 2), TTL: time.Minute}); v.Outcome != Failed || !errors.Is(v.Err, ErrQuarantined) {
		t.Fatalf("after the replication id changed: %+v, want ErrQuarantined", v)
	}
}

// A node met without a marker of its dataset is quarantined from when the
// engine first sees it, however long its process has run: a process that
// flushed its data, or took a replica's, looks just the same.
func TestUnmarkedNodeIsQuarantinedAtFirstSight(t *testing.T) {
	const q = 500 * time.Millisecond
	c := redisproc.Start(t, 1)
	testwait.Eventually(t, 10*time.Second, "the node up for longer than q, by its own account", func() bool {
		up, err := c.Nodes[0].ServerInfo(t.Context(), "uptime_in_seconds")
		if err != nil {
			t.Fatal(err)
		}
		s, _ := strconv.Atoi(up)
		return s >= 3
	})
	cfg := Config{Addr: c.Addrs()[0], EpochKey: epochKey, Timeout: time.Second, Quarantine: q, HealthInterval: time.Hour,
		Conn: NewConn(rueidis.ClientOption{InitAddress: c.Addrs()})}
	met := time.Now()
	info, err := cfg.Conn.Probe(t.Context(), epochKey, Info{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.First = &info
	h := &harness{t: t, server: c.Nodes[0], system: actors.NewSystem(nil), votes: make(chan *Vote, 100), ttl: q}
	h.inbox = h.system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if v, ok := ctx.Message().(*Vote); ok {
			h.votes <- v
		}
	}))
	h.node = Spawn(h.system, cfg)
	t.Cleanup(func() {
		h.node.Stop()
		h.system.Shutdown()
	})
	if v := h.ask(&Acquire{Request: h.req("r", "me", 1), TTL: q}); v.Outcome != Failed || !errors.Is(v.Err, ErrQuarantined) {
		t.Fatalf("unmarked node up for seconds: %+v, want ErrQuarantined", v)
	}
	if until := h.node.Stats().QuarantineUntil; until.Before(met.Add(q)) {
		t.Fatalf("quarantined until %v after first sight, want at least %v", until.Sub(met), q)
	}
	h.askUntil("r", Granted, 3*time.Second)
	if marker, _, _ := h.server.Get(t.Context(), epochKey); marker != info.Lineage() {
		t.Fatalf("marker %q after the quarantine, want the lineage %q", marker, info.Lineage())
	}
}

// A check reads the key and changes nothing: its owner's, with the TTL
// left; another owner's, named by digest and meta, never by value; or
// none. A refused acquire names the holder's meta too.
func TestCheck(t *testing.T) {
	h := newHarness(t, time.Second)
	ctx := t.Context()
	mine, theirs := "secret1|web-1 pid 7", "secret2|web-2 pid 9"
	if v := h.ask(&Acquire{Request: h.req("k", mine, 1), TTL: 10 * time.Second}); v.Outcome != Granted {
		t.Fatalf("acquire: %+v", v)
	}
	if err := h.server.Set(ctx, "o", theirs, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, key, value string
		want             Vote
		ttl              time.Duration // at most; more than half of it
	}{
		{"own key", "k", mine, Vote{Outcome: Granted}, 10 * time.Second},
		{"another owner's key", "k", theirs, Vote{Outcome: Taken, Holder: Digest(mine), Meta: "web-1 pid 7"}, 10 * time.Second},
		{"another owner's key, by meta alone", "k", "secret3|web-1 pid 7", Vote{Outcome: Taken, Holder: Digest(mine), Meta: "web-1 pid 7"}, 10 * time.Second},
		{"a key without meta", "o", "x", Vote{Outcome: Taken, Holder: Digest(theirs), Meta: "web-2 pid 9"}, 5 * time.Second},
		{"no key", "none", mine, Vote{Outcome: Absent}, 0},
	} {
		v := h.ask(&Check{h.req(tt.key, tt.value, 2)})
		if v.Outcome != tt.want.Outcome || v.Holder != tt.want.Holder || v.Meta != tt.want.Meta || v.Err != nil ||
			v.TTL > tt.ttl || v.TTL < tt.ttl/2 {
			t.Errorf("%s: %+v, want %+v with a TTL within %v", tt.name, v, tt.want, tt.ttl)
		}
	}
	if v := h.ask(&Acquire{Request: h.req("k", theirs, 3), TTL: time.Second}); v.Outcome != Taken || v.Meta != "web-1 pid 7" ||
		v.Holder != Digest(mine) || v.TTL <= 5*time.Second || v.Until.IsZero() {
		t.Errorf("refused acquire: %+v, want the holder's digest, meta and TTL", v)
	}
	if val, _, _ := h.server.Get(ctx, "k"); val != mine {
		t.Errorf("after the checks the key is %q, want %q", val, mine)
	}
	if n, err := h.server.Do(ctx, "EXISTS", "none"); err != nil || n != int64(0) {
		t.Errorf("a check made a key: %v %v", n, err)
	}
}

// A node that may have lost its keys does not vote on a check either: the
// script answers it as it does an acquire when the dataset changed under
// the marker (here a new replication id, with no probe in between), and
// the node actor then sits out its quarantine.
func TestCheckWhileQuarantined(t *testing.T) {
	h := newHarnessCfg(t, Config{Timeout: time.Second, Quarantine: time.Minute, HealthInterval: time.Hour, First: trusted})
	if err := h.server.Set(t.Context(), "k", "me", time.Minute); err != nil {
		t.Fatal(err)
	}
	if v := h.ask(&Check{h.req("k", "me", 1)}); v.Outcome != Granted {
		t.Fatalf("check on a trusted node: %+v", v)
	}
	if err := redisproc.Start(t, 1).Nodes[0].ReplicaOf(t.Context(), h.server); err != nil {
		t.Fatal(err)
	}
	for round := uint64(2); round <= 3; round++ { // the script's answer, then the actor's
		if v := h.ask(&Check{h.req("k", "me", round)}); v.Outcome != Failed || !errors.Is(v.Err, ErrQuarantined) {
			t.Fatalf("check %d after the replication id changed: %+v, want ErrQuarantined", round, v)
		}
	}
}
