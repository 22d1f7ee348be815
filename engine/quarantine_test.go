package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/internal/testwait"
)

// A fresh node (restarted empty, not marked) sits out its quarantine while
// another owner's key holds a second node of three: only the quarantine
// stands between an attempt and a quorum. TryAcquire, and an Acquire whose
// context ends before the quarantine, fail naming the node and until when
// it sits out; an Acquire with time to spare waits it out and wins,
// although its few quick retries would all have failed.
func TestAcquireWaitsOutQuarantine(t *testing.T) {
	const quarantine = time.Second
	c := startNodes(t, 3)
	if err := c.Nodes[1].Set(t.Context(), lockKey("fresh"), "someone-else", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.Nodes[0].Restart(); err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, c.Addrs(), func(cfg *Config) {
		cfg.TTL = 500 * time.Millisecond // at most the quarantine: no UnsafeShortQuarantine
		cfg.RestartQuarantine = quarantine
		cfg.RetryAttempts = 3
		cfg.RetryBackOff = func() backoff.BackOff { return backoff.NewConstantBackOff(time.Millisecond) }
	})
	until := e.Stats().Nodes[0].QuarantinedUntil
	if !until.After(time.Now()) {
		t.Fatalf("node 0 not quarantined: QuarantinedUntil %v", until)
	}
	addr := c.Nodes[0].Addr()

	// checkNamed: the error names node 0, quarantined until `until`.
	checkNamed := func(what string, err error) {
		t.Helper()
		var ae *AcquireError
		if !errors.Is(err, ErrNotAcquired) || !errors.As(err, &ae) {
			t.Fatalf("%s = %v, want an *AcquireError", what, err)
		}
		n := ae.Nodes[0]
		if n.Outcome != Failed || !errors.Is(n.Err, ErrQuarantined) || !n.QuarantinedUntil.Equal(until) {
			t.Fatalf("%s: node 0 %+v, want Failed with ErrQuarantined until %v", what, n, until)
		}
		if msg := err.Error(); !strings.Contains(msg, addr) || !strings.Contains(msg, "until "+until.Format("15:04:05.000")) {
			t.Fatalf("%s: error %q does not say that %s sits out until %s", what, msg, addr, until.Format("15:04:05.000"))
		}
		// First sight without a marker: maybe a new node, which MarkNew
		// would let serve at once.
		if msg := err.Error(); !errors.Is(n.Err, ErrNoMarker) || !strings.Contains(msg, "engine.MarkNew") {
			t.Fatalf("%s: error %q (node 0: %v); want ErrNoMarker and the MarkNew hint", what, msg, n.Err)
		}
		if ae.Nodes[1].Outcome != Taken {
			t.Fatalf("%s: node 1 %+v, want Taken", what, ae.Nodes[1])
		}
	}

	_, err := e.TryAcquire(t.Context(), "fresh")
	checkNamed("TryAcquire", err)

	ctx, cancel := context.WithTimeout(t.Context(), quarantine/2)
	_, err = e.Acquire(ctx, "fresh")
	cancel()
	checkNamed("Acquire with a deadline before the quarantine ends", err)
	t.Logf("Acquire with a short deadline: %v", err)

	ctx, cancel = context.WithTimeout(t.Context(), 10*quarantine)
	defer cancel()
	l, err := e.Acquire(ctx, "fresh")
	if err != nil {
		t.Fatalf("Acquire with time to wait out the quarantine: %v", err)
	}
	if now := time.Now(); now.Before(until) {
		t.Fatalf("acquired %v before node 0's quarantine ended", until.Sub(now))
	}
	if vals := values(t, c, "fresh"); vals[0] != l.Value() || vals[1] != "someone-else" || vals[2] != l.Value() {
		t.Fatalf("keys %q: want the lease's on nodes 0 and 2, the other owner's on node 1", vals)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// MarkNew marks nothing while a node holds a lock key (a node restarted
// empty looks new, but the leases whose keys it lost may be live), nor
// when a node's keys cannot be listed; on empty nodes it marks each with
// its own process's run id.
func TestMarkNewRefusesLiveLocks(t *testing.T) {
	c := redisproc.Start(t, 3)
	ctx := t.Context()
	cfg := Config{Nodes: c.Addrs()}
	epochs := func() (marked int) { // on nodes 1 and 2, which stay up
		for _, n := range c.Nodes[:2] {
			if _, ok, err := n.Get(ctx, DefaultKeyPrefix+"lineage"); err != nil {
				t.Fatal(err)
			} else if ok {
				marked++
			}
		}
		return marked
	}
	if err := c.Nodes[1].Set(ctx, lockKey("r"), "someone", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := CheckNew(ctx, cfg); !errors.Is(err, ErrLiveLocks) {
		t.Fatalf("CheckNew with a lock key on node 2: %v, want ErrLiveLocks", err)
	}
	if err := MarkNew(ctx, cfg); !errors.Is(err, ErrLiveLocks) || epochs() != 0 {
		t.Fatalf("MarkNew with a lock key on node 2: %v, %d nodes marked; want ErrLiveLocks and none", err, epochs())
	}
	if _, err := c.Nodes[1].Do(ctx, "DEL", lockKey("r")); err != nil {
		t.Fatal(err)
	}
	if err := c.Nodes[2].Kill(); err != nil {
		t.Fatal(err)
	}
	if err := MarkNew(ctx, cfg); err == nil || errors.Is(err, ErrLiveLocks) || epochs() != 0 {
		t.Fatalf("MarkNew with node 3 dead: %v, %d nodes marked; want an error naming it and none", err, epochs())
	}
	live := Config{Nodes: c.Addrs()[:2]}
	if err := MarkNew(ctx, live); err != nil {
		t.Fatal(err)
	}
	for i, n := range c.Nodes[:2] {
		epoch, _, _ := n.Get(ctx, DefaultKeyPrefix+"lineage")
		if runID, _ := n.RunID(ctx); !strings.Contains(epoch, " "+runID+" ") {
			t.Errorf("node %d: epoch marker %q, want its lineage, run id %s", i+1, epoch, runID)
		}
	}
}

// A deployment with short leases beside one with long leases on the same
// nodes (issue 43, item 6): each engine records the TTLs it uses on the
// nodes, and quarantines a node that lost its data for the longest
// recorded, however short its own MaxTTL. Engine long holds a lease of 6s
// on nodes 0 and 1 (node 2 was down); node 2 comes back empty and node 0
// restarts empty; engine short (MaxTTL 500ms) must not win nodes 0 and 2
// while the long lease is valid. Without the record it did: both sat out
// only 500ms.
func TestQuarantineFollowsLongestRecordedTTL(t *testing.T) {
	t.Parallel() // it waits out TTLs on nodes of its own
	const long, short = 6 * time.Second, 500 * time.Millisecond
	c := startNodes(t, 3)
	brief := newEngine(t, c.Addrs(), func(cfg *Config) {
		cfg.TTL, cfg.HealthInterval = short, 100*time.Millisecond
	})
	if err := c.Nodes[2].Kill(); err != nil {
		t.Fatal(err)
	}
	lasting := newEngine(t, c.Addrs(), func(cfg *Config) { cfg.TTL = long })
	l, err := lasting.TryAcquire(t.Context(), "shared")
	if err != nil {
		t.Fatalf("TryAcquire with node 2 down: %v", err)
	}
	for _, i := range []int{2, 0} { // node 2 back empty, node 0 restarted empty
		if err := c.Nodes[i].Restart(); err != nil {
			t.Fatal(err)
		}
	}
	// brief's probes see both; its own quarantine (500ms) ends well
	// before the long lease's validity.
	deadline := time.Now().Add(5 * short)
	for time.Now().Before(deadline) {
		if _, err := brief.TryAcquire(t.Context(), "shared"); err == nil {
			t.Fatalf("a second holder %v after the restarts, while the first holds until %v",
				time.Since(deadline.Add(-5*short)).Round(time.Millisecond), l.Until().Format("15:04:05.000"))
		} else if !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("TryAcquire: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // brief's probes: every 100ms
	}
	for _, i := range []int{0, 2} {
		if until := brief.Stats().Nodes[i].QuarantinedUntil; time.Until(until) < long-5*short-time.Second {
			t.Errorf("node %d quarantined until %v: want about %v after its restart", i, until.Format("15:04:05.000"), long)
		}
	}
	if !l.Until().After(time.Now()) {
		t.Fatalf("the long lease expired during the test (until %v): the schedule proved nothing", l.Until())
	}
}

// Subscribers hear a node go down, sit out a quarantine after its restart
// (why: restarted, not a new node's missing marker), and serve again, in
// that order, naming the node.
func TestNodeEvents(t *testing.T) {
	const quarantine = time.Second
	c := startNodes(t, 3)
	e := newEngine(t, c.Addrs(), func(cfg *Config) {
		cfg.TTL = 500 * time.Millisecond
		cfg.RestartQuarantine = quarantine
		cfg.HealthInterval = 50 * time.Millisecond
	})
	events, unsubscribe := e.Subscribe(16)
	defer unsubscribe()
	addr := c.Nodes[0].Addr()
	next := func(want EventKind) Event {
		t.Helper()
		timeout := time.After(10 * quarantine)
		for {
			select {
			case ev := <-events:
				t.Logf("event %v node %s until %v: %v", ev.Kind, ev.Node, ev.Until.Format("15:04:05.000"), ev.Err)
				if ev.Node != addr || ev.Shard != "" || ev.Resource != "" {
					t.Fatalf("%v event for node %q shard %q resource %q; want node %s alone", ev.Kind, ev.Node, ev.Shard, ev.Resource, addr)
				}
				if ev.Kind != want {
					t.Fatalf("event %v; want %v", ev.Kind, want)
				}
				return ev
			case <-timeout:
				t.Fatalf("no %v event of %s", want, addr)
			}
		}
	}
	if err := c.Nodes[0].Kill(); err != nil {
		t.Fatal(err)
	}
	if ev := next(NodeDown); ev.Err == nil {
		t.Errorf("NodeDown without its cause")
	}
	testwait.Eventually(t, 10*quarantine, "Stats: node 0 down", func() bool { return e.Stats().Nodes[0].Down })
	if err := c.Nodes[0].Restart(); err != nil {
		t.Fatal(err)
	}
	ev := next(NodeQuarantined)
	if !errors.Is(ev.Err, ErrQuarantined) || errors.Is(ev.Err, ErrNoMarker) || !strings.Contains(ev.Err.Error(), "restarted") ||
		!ev.Until.Equal(e.Stats().Nodes[0].QuarantinedUntil) {
		t.Errorf("NodeQuarantined: until %v, %v; want until %v, restarted, not ErrNoMarker", ev.Until, ev.Err, e.Stats().Nodes[0].QuarantinedUntil)
	}
	next(NodeServing)
	if now := time.Now(); now.Before(ev.Until) {
		t.Errorf("NodeServing %v before the quarantine's end", ev.Until.Sub(now))
	}
	if s := e.Stats().Nodes[0]; s.Shards != nil {
		t.Errorf("a standalone node's Stats has Shards %+v", s.Shards)
	}
}
