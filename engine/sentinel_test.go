package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/internal/testwait"
	"github.com/redlease/redlease/node"
)

// sentinelNode is the Config.Nodes entry of s.
func sentinelNode(s *redisproc.SentinelSet) string {
	return node.Target{MasterSet: s.Name, Sentinels: s.SentinelAddrs()}.String()
}

// A node that is a Sentinel master set: a lease's key goes to its master.
// A failover to a replica that lacks that key is a restart: from when the
// engine meets the new master, the node refuses acquires until every
// lease it may have held expired, so no one takes the lost key while its
// holder may hold; an engine that meets the new master first (its marker
// names the old master's dataset) sits it out too; then the new master
// serves, and InspectNodes names it.
func TestSentinelFailoverIsARestart(t *testing.T) {
	t.Parallel() // it waits on its own cluster or master set, not on the CPU

	const ttl = 8 * time.Second // well beyond a failover (2.5-3s here, more on a loaded machine)
	s := redisproc.StartSentinel(t, 2, 3)
	spec := sentinelNode(s)
	tune := func(cfg *Config) { cfg.TTL, cfg.HealthInterval = ttl, 50*time.Millisecond }
	if err := MarkNew(t.Context(), Config{Nodes: []string{spec}}); err != nil {
		t.Fatalf("MarkNew: %v", err)
	}
	e := newEngine(t, []string{spec}, tune)
	if _, err := e.TryAcquire(t.Context(), "before"); err != nil {
		t.Fatalf("TryAcquire on a marked master set: %v", err)
	}
	// The lease's key is written while the replicas are cut off: the
	// failover loses it.
	var l *Lease
	promoted, err := s.FailoverLosingWrites(t.Context(), func(old *redisproc.Node) error {
		var err error
		if l, err = e.TryAcquire(t.Context(), "r"); err != nil {
			return err
		}
		if v, _, err := old.Get(t.Context(), lockKey("r")); err != nil || v != l.Value() {
			return fmt.Errorf("the master holds %q (%v), want the lease's value", v, err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("failover: %v", err)
	}
	if _, ok, err := promoted.Get(t.Context(), lockKey("r")); err != nil || ok {
		t.Fatalf("the promoted replica has the lost key (%v): the failover lost nothing", err)
	}
	if left := time.Until(l.Until()); left < ttl/8 {
		t.Fatalf("the failover took so long that the lease has %v left: the test proves little", left)
	}
	// Until the lease that held the lost key expired, nobody may take it:
	// not this engine (before or after it sees the new master), not one
	// that meets the new master first.
	fresh := newEngine(t, []string{spec}, tune)
	for time.Now().Before(l.Until()) {
		for _, eng := range []*Engine{e, fresh} {
			if l2, err := eng.TryAcquire(t.Context(), "r"); err == nil {
				left := time.Until(l.Until())
				_ = l2.Release(context.Background())
				t.Fatalf("granted %q, whose key the failover lost, %v before its holder's lease ends", "r", left)
			}
		}
		time.Sleep(10 * time.Millisecond) // not an order: a pace
	}
	if until := e.Stats().Nodes[0].QuarantinedUntil; until.IsZero() {
		t.Fatal("the engine never quarantined the failed-over master set")
	}
	_, err = fresh.TryAcquire(t.Context(), "other")
	if ae := (*AcquireError)(nil); !errors.As(err, &ae) || !errors.Is(ae.Nodes[0].Err, ErrQuarantined) {
		t.Fatalf("an engine meeting the new master: TryAcquire = %v, want a refusal for the quarantine", err)
	}

	var l3 *Lease
	testwait.Eventually(t, 4*ttl, "the new master serves after the quarantine", func() bool {
		l3, err = e.TryAcquire(t.Context(), "r")
		return err == nil
	})
	if v, _, err := promoted.Get(t.Context(), lockKey("r")); err != nil || v != l3.Value() {
		t.Fatalf("the new master holds %q (%v), want the new lease's value", v, err)
	}
	reports, err := InspectNodes(t.Context(), Config{Nodes: []string{spec}})
	if err != nil || reports[0].Server != promoted.Addr() {
		t.Fatalf("InspectNodes: %+v, %v; want server %s", reports, err, promoted.Addr())
	}
}

// A master set is reached while a majority of its sentinels answer: one
// stopped (SIGSTOP, so its connections hang) costs the probes half their
// time, not the node; with two of three stopped, the engine cannot know
// the master and the node is down, not guessed.
func TestSentinelMajority(t *testing.T) {
	t.Parallel() // it waits on its own cluster or master set, not on the CPU
	s := redisproc.StartSentinel(t, 1, 3)
	spec := sentinelNode(s)
	if err := MarkNew(t.Context(), Config{Nodes: []string{spec}}); err != nil {
		t.Fatalf("MarkNew: %v", err)
	}
	// A tolerant node timeout: what is tested is the probes' view of the
	// node, not the acquires' speed on a busy machine (at the default
	// 50ms, one of 20 TryAcquires timed out beside a loaded machine).
	e := newEngine(t, []string{spec}, slowNodes, func(cfg *Config) { cfg.HealthInterval = 50 * time.Millisecond })
	if err := s.Sentinels[0].Pause(); err != nil {
		t.Fatal(err)
	}
	defer s.Sentinels[0].Resume()
	restarts := e.Stats().Nodes[0].Restarts
	for range 20 { // a second of probes
		l, err := e.TryAcquire(t.Context(), "r")
		if err != nil {
			t.Fatalf("one sentinel of three stopped: %v", err)
		}
		_ = l.Release(t.Context())
		time.Sleep(50 * time.Millisecond) // a pace, not an order
	}
	if e.Stats().Nodes[0].Down || e.Stats().Nodes[0].Restarts != restarts {
		t.Fatalf("one sentinel of three stopped: node %+v", e.Stats().Nodes[0])
	}

	if err := s.Sentinels[1].Pause(); err != nil {
		t.Fatal(err)
	}
	defer s.Sentinels[1].Resume()
	reports, err := InspectNodes(t.Context(), Config{Nodes: []string{spec}, ConnectTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r := reports[0]; r.Err == nil || !strings.Contains(r.Err.Error(), "fewer than a majority of the sentinels") {
		t.Fatalf("two sentinels of three stopped: %+v, want an error saying so", r)
	}
}

// Sentinels that require a password are reached with the credentials of
// Config.Client.Sentinel; without them New says why it cannot reach the
// master set.
func TestSentinelAuth(t *testing.T) {
	s := redisproc.StartSentinel(t, 1, 3)
	for _, sn := range s.Sentinels { // they talk to each other with it too
		if _, err := sn.Do(t.Context(), "SENTINEL", "CONFIG", "SET", "sentinel-pass", "spw"); err != nil {
			t.Fatal(err)
		}
	}
	for _, sn := range s.Sentinels {
		if _, err := sn.Do(t.Context(), "ACL", "SETUSER", "default", "resetpass", ">spw"); err != nil {
			t.Fatal(err)
		}
	}
	spec := sentinelNode(s)
	if _, err := New(Config{Nodes: []string{spec}, ConnectTimeout: time.Second}); err == nil ||
		!strings.Contains(err.Error(), "sentinel") {
		t.Fatalf("New without the sentinels' password: %v, want an error naming the sentinels", err)
	} else {
		t.Log(err)
	}
	e := newEngine(t, []string{spec}, func(cfg *Config) {
		cfg.Client.Sentinel.Password = "spw"
		cfg.RestartQuarantine = -1 // unmarked: not what this tests
	})
	l, err := e.TryAcquire(t.Context(), "r")
	if err != nil {
		t.Fatalf("TryAcquire with the sentinels' password: %v", err)
	}
	_ = l.Release(t.Context())
}
