package redisproc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// quiet fails the test if a sentinel's log shows a hitch: it thought the
// master down and agreed (+odown), aborted or timed out a failover,
// repointed a replica that followed another master, or stopped acting for
// a clock jump or a stall (+tilt). Nothing in these tests should cause
// one.
func quiet(t *testing.T, s *SentinelSet) {
	t.Helper()
	for _, sn := range s.Sentinels {
		log, err := os.ReadFile(filepath.Join(sn.dir, "redis.log"))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(log), "\n") {
			for _, bad := range []string{"+odown", "-failover-abort", "failover-end-for-timeout", "+fix-slave-config", "+tilt"} {
				if strings.Contains(line, bad) {
					t.Errorf("sentinel %s: %s", sn.Addr(), line)
				}
			}
		}
	}
}

// startSentinel is StartSentinel, with quiet run at the end of the test.
func startSentinel(t *testing.T, replicas, sentinels int) *SentinelSet {
	t.Helper()
	s := StartSentinel(t, replicas, sentinels)
	t.Cleanup(func() { quiet(t, s) }) // before Close removes the logs
	return s
}

// wantRole fails the test unless n answers ROLE as want ("master", or
// "slave of host:port (connected)").
func wantRole(t *testing.T, ctx context.Context, n *Node, want string) {
	t.Helper()
	r, err := role(ctx, n)
	if err != nil || r.String() != want {
		t.Fatalf("%s: ROLE = %v, %v; want %s", n.Addr(), r, err, want)
	}
}

// wantMaster fails the test unless the sentinels name want as the master
// and every server answers ROLE accordingly.
func wantMaster(t *testing.T, ctx context.Context, s *SentinelSet, want *Node) {
	t.Helper()
	m, err := s.Master(ctx)
	if err != nil || m != want {
		t.Fatalf("Master = %v, %v; want %s", m, err, want.Addr())
	}
	for _, sn := range s.Sentinels {
		addr, err := s.masterAddr(ctx, sn)
		if err != nil || addr != want.Addr() {
			t.Fatalf("sentinel %s names %q, %v; want %s", sn.Addr(), addr, err, want.Addr())
		}
	}
	for _, n := range s.Servers {
		if n == want {
			wantRole(t, ctx, n, "master")
		} else {
			wantRole(t, ctx, n, "slave of "+want.Addr()+" (connected)")
		}
	}
}

// replicated writes key on master and waits until every replica has it.
func replicated(t *testing.T, ctx context.Context, s *SentinelSet, master *Node, key string) {
	t.Helper()
	if err := master.Set(ctx, key, "v", 0); err != nil {
		t.Fatal(err)
	}
	if n, err := master.Do(ctx, "WAIT", "2", "5000"); err != nil || n != int64(len(s.Servers)-1) {
		t.Fatalf("WAIT = %v, %v; want %d replicas", n, err, len(s.Servers)-1)
	}
	for _, n := range s.Servers {
		if v, ok, err := n.Get(ctx, key); err != nil || !ok || v != "v" {
			t.Fatalf("%s: GET %s = %q, %v, %v after WAIT", n.Addr(), key, v, ok, err)
		}
	}
}

func TestSentinelSet(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := startSentinel(t, 2, 3)
	t.Logf("StartSentinel(2, 3) took %v", time.Since(start))
	ctx := ctxTimeout(t, 20*time.Second)

	if len(s.Servers) != 3 || len(s.Sentinels) != 3 || s.Name == "" {
		t.Fatalf("%d servers, %d sentinels, name %q; want 3, 3 and a name", len(s.Servers), len(s.Sentinels), s.Name)
	}
	addrs := s.SentinelAddrs()
	seen := map[string]bool{}
	for _, n := range append(append([]*Node{}, s.Servers...), s.Sentinels...) {
		if seen[n.Addr()] {
			t.Fatalf("address %s twice", n.Addr())
		}
		seen[n.Addr()] = true
	}
	for i, a := range addrs {
		if a != s.Sentinels[i].Addr() {
			t.Fatalf("SentinelAddrs()[%d] = %s, want %s", i, a, s.Sentinels[i].Addr())
		}
	}
	wantMaster(t, ctx, s, s.Servers[0])
	for _, sn := range s.Sentinels {
		// launch's readiness probe (PING, then INFO server's process_id)
		// holds for sentinels too.
		if err := probe(sn.Addr(), sn.cmd.Process.Pid); err != nil {
			t.Fatalf("probe of sentinel %s: %v", sn.Addr(), err)
		}
		wantRole(t, ctx, sn, "sentinel")
		if mode, err := sn.ServerInfo(ctx, "redis_mode"); err != nil || mode != "sentinel" {
			t.Fatalf("%s: redis_mode %q, %v", sn.Addr(), mode, err)
		}
	}

	// A write on the master reaches the replicas; a replica refuses writes.
	replicated(t, ctx, s, s.Servers[0], "k")
	if err := s.Servers[1].Set(ctx, "k2", "v", 0); err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("SET on a replica: %v; want READONLY", err)
	}
}

func TestSentinelRestartKeepsConfig(t *testing.T) {
	t.Parallel()
	s := startSentinel(t, 2, 3)
	ctx := ctxTimeout(t, 20*time.Second)
	sn := s.Sentinels[1]
	id, err := sn.Do(ctx, "SENTINEL", "MYID")
	if err != nil {
		t.Fatal(err)
	}
	run1, err := sn.RunID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := sn.Restart(); err != nil {
		t.Fatal(err)
	}
	if run2, err := sn.RunID(ctx); err != nil || run2 == run1 {
		t.Fatalf("run_id after Restart = %q, %v; before %q", run2, err, run1)
	}
	// Straight after the start, before any hello message: what it knows
	// comes from its config file.
	if id2, err := sn.Do(ctx, "SENTINEL", "MYID"); err != nil || id2 != id {
		t.Fatalf("SENTINEL MYID after Restart = %v, %v; want %v", id2, err, id)
	}
	m, err := s.sentinelMaster(ctx, sn)
	if err != nil {
		t.Fatal(err)
	}
	if m["port"] != s.Servers[0].Addr()[len("127.0.0.1:"):] || m["num-slaves"] != "2" || m["num-other-sentinels"] != "2" || m["quorum"] != "2" {
		t.Fatalf("SENTINEL MASTER after Restart = %v; want the master, 2 replicas, 2 other sentinels, quorum 2", m)
	}
	// The timings that only SENTINEL DEBUG sets are set again.
	v, err := sn.Do(ctx, "SENTINEL", "DEBUG")
	if err != nil {
		t.Fatal(err)
	}
	debug, err := stringMap(v)
	if err != nil {
		t.Fatal(err)
	}
	if debug["INFO-PERIOD"] != "500" || debug["PUBLISH-PERIOD"] != "250" {
		t.Fatalf("SENTINEL DEBUG after Restart = %v", debug)
	}
	conf, err := os.ReadFile(sn.conf)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(conf), "known-replica") || !strings.Contains(string(conf), "known-sentinel") {
		t.Fatalf("sentinel config lacks known replicas or sentinels:\n%s", conf)
	}
	if err := s.waitSettled(ctx, s.Servers[0]); err != nil {
		t.Fatal(err)
	}
	wantMaster(t, ctx, s, s.Servers[0])
}

func TestSentinelFailoverTwice(t *testing.T) {
	t.Parallel()
	s := startSentinel(t, 2, 3)
	ctx := ctxTimeout(t, 25*time.Second)
	old := s.Servers[0]
	for i := range 2 {
		start := time.Now()
		next, err := s.Failover(ctx)
		if err != nil {
			t.Fatalf("failover %d: %v", i+1, err)
		}
		t.Logf("failover %d: %s to %s took %v", i+1, old.Addr(), next.Addr(), time.Since(start))
		if next == old {
			t.Fatalf("failover %d kept master %s", i+1, old.Addr())
		}
		wantMaster(t, ctx, s, next)
		replicated(t, ctx, s, next, "k"+string(rune('1'+i)))
		old = next
	}
}

func TestSentinelRestartedServerKeepsItsRole(t *testing.T) {
	t.Parallel()
	s := startSentinel(t, 1, 3)
	ctx := ctxTimeout(t, 20*time.Second)
	next, err := s.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next != s.Servers[1] {
		t.Fatalf("new master %s, want %s", next.Addr(), s.Servers[1].Addr())
	}
	// Sentinel rewrote the former master's config: it comes back a replica.
	if err := s.Servers[0].Restart(); err != nil {
		t.Fatal(err)
	}
	if r, err := role(ctx, s.Servers[0]); err != nil || r.role != "slave" || r.master != next.Addr() {
		t.Fatalf("restarted former master: ROLE %v, %v; want slave of %s", r, err, next.Addr())
	}
	if err := s.waitSettled(ctx, next); err != nil {
		t.Fatal(err)
	}
	wantMaster(t, ctx, s, next)
}

func TestSentinelFailoverLosingWrites(t *testing.T) {
	t.Parallel()
	s := startSentinel(t, 2, 3)
	ctx := ctxTimeout(t, 20*time.Second)
	old := s.Servers[0]
	replicated(t, ctx, s, old, "kept")
	// Kept too: written just before the call, on a connection of its own,
	// with no WAIT.
	if _, err := command(old.Addr(), "SET", "kept2", "v"); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	next, err := s.FailoverLosingWrites(ctx, func(m *Node) error {
		if m != old {
			t.Errorf("write got %s, want the master %s", m.Addr(), old.Addr())
		}
		if err := m.Set(ctx, "lost", "v", 0); err != nil {
			return err
		}
		if v, ok, err := m.Get(ctx, "lost"); err != nil || !ok || v != "v" {
			t.Errorf("the master lacks its write: %q, %v, %v", v, ok, err)
		}
		// Given time to replicate, it still does not.
		time.Sleep(100 * time.Millisecond)
		for _, n := range s.Servers[1:] {
			if _, ok, err := n.Get(ctx, "lost"); err != nil || ok {
				t.Errorf("replica %s got the write: %v, %v", n.Addr(), ok, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("FailoverLosingWrites from %s to %s took %v", old.Addr(), next.Addr(), time.Since(start))
	if next == old {
		t.Fatalf("the master stayed %s", old.Addr())
	}
	wantMaster(t, ctx, s, next)
	for _, n := range s.Servers {
		if _, ok, err := n.Get(ctx, "lost"); err != nil || ok {
			t.Errorf("%s has the lost write: %v, %v", n.Addr(), ok, err)
		}
		for _, k := range []string{"kept", "kept2"} {
			if _, ok, err := n.Get(ctx, k); err != nil || !ok {
				t.Errorf("%s lacks the write %s made before: %v, %v", n.Addr(), k, ok, err)
			}
		}
	}
	// The old master may replicate to others again, now and after a
	// restart.
	if v, err := old.Do(ctx, "ACL", "LIST"); err != nil || strings.Contains(fmt.Sprint(v), "sync") {
		t.Errorf("ACL LIST of the old master = %v, %v", v, err)
	}
	if conf, err := os.ReadFile(old.conf); err != nil || strings.Contains(string(conf), "sync") && strings.Contains(string(conf), "-psync") {
		t.Errorf("config of the old master: %v\n%s", err, conf)
	}
	replicated(t, ctx, s, next, "after")
}
