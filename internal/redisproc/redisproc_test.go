package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestSetGetIndependentNodes(t *testing.T) {
	c := Start(t, 3)
	ctx := ctxTimeout(t, 10*time.Second)

	addrs := c.Addrs()
	if len(addrs) != 3 || len(c.Nodes) != 3 {
		t.Fatalf("got %d addrs, %d nodes, want 3", len(addrs), len(c.Nodes))
	}
	seen := map[string]bool{}
	for i, a := range addrs {
		if !strings.HasPrefix(a, "127.0.0.1:") || seen[a] || a != c.Nodes[i].Addr() {
			t.Fatalf("bad or duplicate address %q in %v", a, addrs)
		}
		seen[a] = true
	}

	for i, n := range c.Nodes {
		if err := n.Set(ctx, "k", fmt.Sprint("v", i), 0); err != nil {
			t.Fatalf("node %d Set: %v", i, err)
		}
	}
	for i, n := range c.Nodes {
		v, ok, err := n.Get(ctx, "k")
		if err != nil || !ok || v != fmt.Sprint("v", i) {
			t.Fatalf("node %d Get = %q, %v, %v; want v%d", i, v, ok, err, i)
		}
	}

	n := c.Nodes[0]
	if _, ok, err := n.Get(ctx, "missing"); ok || err != nil {
		t.Fatalf("Get(missing) ok=%v err=%v, want false, nil", ok, err)
	}
	if d, err := n.PTTL(ctx, "k"); err != nil || d != -time.Millisecond {
		t.Fatalf("PTTL(no expiry) = %v, %v; want -1ms", d, err)
	}
	if d, err := n.PTTL(ctx, "missing"); err != nil || d != -2*time.Millisecond {
		t.Fatalf("PTTL(missing) = %v, %v; want -2ms", d, err)
	}
	if err := n.Set(ctx, "ttl", "x", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if d, err := n.PTTL(ctx, "ttl"); err != nil || d <= 9*time.Second || d > 10*time.Second {
		t.Fatalf("PTTL(ttl) = %v, %v; want just under 10s", d, err)
	}
	if err := n.Set(ctx, "short", "x", 300*time.Microsecond); err != nil {
		t.Fatalf("sub-millisecond ttl: %v", err)
	}
	const expired = 10 * time.Millisecond // thirty times its TTL: "short" is gone
	time.Sleep(expired)
	keys, err := n.Keys(ctx, "*")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(keys, ",") != "k,ttl" && strings.Join(keys, ",") != "ttl,k" {
		t.Fatalf("Keys(*) = %v, want k and ttl", keys)
	}
	if v, err := n.Do(ctx, "INCRBY", "counter", "5"); err != nil || v != int64(5) {
		t.Fatalf("Do(INCRBY) = %#v, %v", v, err)
	}
	if v, err := n.Do(ctx, "GET", "missing"); err != nil || v != nil {
		t.Fatalf("Do(GET missing) = %#v, %v; want nil, nil", v, err)
	}
	if _, err := n.Do(ctx, "NOSUCHCOMMAND"); err == nil {
		t.Fatal("Do(NOSUCHCOMMAND) succeeded")
	}
	if id, err := n.RunID(ctx); err != nil || len(id) != 40 {
		t.Fatalf("RunID = %q, %v; want 40 hex digits", id, err)
	}
}

func TestPauseResume(t *testing.T) {
	c := Start(t, 1)
	n := c.Nodes[0]
	if err := n.Set(ctxTimeout(t, 5*time.Second), "k", "v", 0); err != nil {
		t.Fatal(err)
	}

	if err := n.Pause(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, _, err := n.Get(ctx, "k")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get on paused node: err = %v, want deadline exceeded", err)
	}
	if el := time.Since(start); el < 150*time.Millisecond || el > 2*time.Second {
		t.Fatalf("Get on paused node returned after %v, want about 200ms", el)
	}

	if err := n.Resume(); err != nil {
		t.Fatal(err)
	}
	v, ok, err := n.Get(ctxTimeout(t, 5*time.Second), "k")
	if err != nil || !ok || v != "v" {
		t.Fatalf("Get after Resume = %q, %v, %v", v, ok, err)
	}
}

func TestKillRestart(t *testing.T) {
	c := Start(t, 2)
	n, other := c.Nodes[0], c.Nodes[1]
	ctx := ctxTimeout(t, 20*time.Second)
	if err := n.Set(ctx, "k", "v", 0); err != nil {
		t.Fatal(err)
	}
	id1, err := n.RunID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	addr := n.Addr()

	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := n.Get(ctx, "k"); err == nil {
		t.Fatal("Get on killed node succeeded")
	}
	if err := n.Set(ctx, "k", "v", 0); err == nil {
		t.Fatal("Set on killed node succeeded")
	}
	if err := n.Kill(); err == nil {
		t.Fatal("second Kill succeeded")
	}
	if err := n.Pause(); err == nil {
		t.Fatal("Pause on killed node succeeded")
	}
	if conn, err := net.Dial("tcp", addr); err == nil {
		conn.Close()
		t.Fatalf("port %s still accepts connections after Kill", addr)
	}
	// The other node is unaffected.
	if err := other.Set(ctx, "k", "w", 0); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	if err := n.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Restart after Kill took %v", time.Since(start))
	if n.Addr() != addr {
		t.Fatalf("address changed from %s to %s", addr, n.Addr())
	}
	if _, ok, err := n.Get(ctx, "k"); ok || err != nil {
		t.Fatalf("Get after Restart: ok=%v err=%v; want empty dataset", ok, err)
	}
	id2, err := n.RunID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if id2 == id1 {
		t.Fatalf("run_id unchanged across Restart: %s", id1)
	}

	// Restart of a running (and even paused) node kills it first.
	if err := n.Set(ctx, "k", "v", 0); err != nil {
		t.Fatal(err)
	}
	if err := n.Pause(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := n.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Restart of a paused node took %v", time.Since(start))
	if _, ok, err := n.Get(ctx, "k"); ok || err != nil {
		t.Fatalf("Get after second Restart: ok=%v err=%v; want empty dataset", ok, err)
	}
	if id3, err := n.RunID(ctx); err != nil || id3 == id2 {
		t.Fatalf("run_id after second Restart = %q, %v; previous %q", id3, err, id2)
	}
}

// alive reports whether pid still exists (a zombie counts as alive).
func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

func TestCloseKillsEverything(t *testing.T) {
	c, err := StartNodes(3)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 5*time.Second)
	if err := c.Nodes[0].Set(ctx, "k", "v", 0); err != nil { // creates a client
		t.Fatal(err)
	}
	if err := c.Nodes[1].Pause(); err != nil { // Close must handle stopped processes
		t.Fatal(err)
	}
	if err := c.Nodes[2].Kill(); err != nil { // and already-killed ones
		t.Fatal(err)
	}
	var pids []int
	var dirs []string
	for _, n := range c.Nodes[:2] {
		pid := n.cmd.Process.Pid
		if !alive(pid) {
			t.Fatalf("pid %d not running before Close", pid)
		}
		pids = append(pids, pid)
	}
	for _, n := range c.Nodes {
		dirs = append(dirs, n.dir)
	}
	addrs := c.Addrs()

	c.Close()
	c.Close() // idempotent

	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("pid %d still exists after Close", pid)
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); !os.IsNotExist(err) {
			t.Errorf("/proc/%d still exists after Close (err=%v)", pid, err)
		}
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("temp dir %s still exists after Close (err=%v)", d, err)
		}
	}
	for _, a := range addrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Errorf("port %s not free after Close: %v", a, err)
			continue
		}
		l.Close()
	}
	for _, n := range c.Nodes {
		if err := n.Restart(); !errors.Is(err, errClosed) {
			t.Errorf("Restart after Close: %v, want errClosed", err)
		}
		if _, _, err := n.Get(ctx, "k"); !errors.Is(err, errClosed) {
			t.Errorf("Get after Close: %v, want errClosed", err)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	c := Start(t, 1)
	n := c.Nodes[0]
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprint("k", i)
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				n.Set(ctx, key, "v", time.Second) // errors are expected while broken
				n.Get(ctx, key)
				cancel()
			}
		}()
	}
	// between: how long the clients' traffic meets each state, up and
	// paused: some of their commands in flight at every fault.
	const between = 20 * time.Millisecond
	for range 3 {
		time.Sleep(between)
		if err := n.Pause(); err != nil {
			t.Error(err)
		}
		time.Sleep(between)
		if err := n.Resume(); err != nil {
			t.Error(err)
		}
		if err := n.Kill(); err != nil {
			t.Error(err)
		}
		if err := n.Restart(); err != nil {
			t.Error(err)
		}
	}
	close(stop)
	wg.Wait()
	if err := n.Set(ctxTimeout(t, 5*time.Second), "final", "v", 0); err != nil {
		t.Fatalf("Set after the storm: %v", err)
	}
}

func TestStartErrors(t *testing.T) {
	// Installation disabled (TestFind covers the decision), the real
	// lookup fails with the exact command to run.
	t.Run("not on PATH", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		t.Setenv(NoInstallEnv, "1")
		c, err := StartNodes(1)
		if err == nil {
			c.Close()
		}
		const want = "redisproc: redis-server is not on PATH (REDLEASE_NO_INSTALL is set); install it as root with: apt-get update && apt-get install -y redis-server"
		if err == nil || err.Error() != want {
			t.Fatalf("err = %v, want %q", err, want)
		}
	})
	t.Run("port busy", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		n := &Node{bin: "redis-server", port: l.Addr().(*net.TCPAddr).Port, dir: t.TempDir()}
		err = n.launch()
		if !errors.Is(err, errBusy) || !strings.Contains(err.Error(), "log tail") {
			t.Fatalf("launch on a busy port: %v", err)
		}
		t.Logf("error text: %v", err)
	})
	t.Run("port taken by another redis-server", func(t *testing.T) {
		c := Start(t, 1)
		n := &Node{bin: "redis-server", port: c.Nodes[0].port, dir: t.TempDir()}
		if err := n.launch(); !errors.Is(err, errBusy) {
			t.Fatalf("launch on another redis-server's port: %v, want errBusy", err)
		}
	})
}

// TestArgsAndConfigSurviveRestart starts a node with extra arguments
// (replicaof another node) and a config file, as the servers of a
// SentinelSet are, and checks that both hold across Restart and
// RestartFromSnapshot.
func TestArgsAndConfigSurviveRestart(t *testing.T) {
	c := Start(t, 1)
	primary := c.Nodes[0]
	ctx := ctxTimeout(t, 20*time.Second)
	if err := primary.Set(ctx, "k", "v", 0); err != nil {
		t.Fatal(err)
	}
	// Each start of the replica is a full sync: no waiting for others.
	if _, err := primary.Do(ctx, "CONFIG", "SET", "repl-diskless-sync-delay", "0"); err != nil {
		t.Fatal(err)
	}
	n, err := startNode(&Node{bin: "redis-server", debug: true}, func(n *Node) error {
		n.conf = filepath.Join(n.dir, "redis.conf")
		n.args = []string{"--replicaof", "127.0.0.1", strconv.Itoa(primary.port)}
		return os.WriteFile(n.conf, []byte("maxmemory 12345678\n"), 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.close)
	check := func(when string) {
		t.Helper()
		for {
			v, ok, err := n.Get(ctx, "k")
			if err == nil && ok && v == "v" {
				break // synced from the primary
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: GET k on the replica = %q, %v, %v", when, v, ok, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if role, err := n.Info(ctx, "replication", "role"); err != nil || role != "slave" {
			t.Fatalf("%s: role %q, %v; want slave", when, role, err)
		}
		v, err := n.Do(ctx, "CONFIG", "GET", "maxmemory")
		if err != nil || !strings.Contains(fmt.Sprint(v), "12345678") {
			t.Fatalf("%s: CONFIG GET maxmemory = %v, %v", when, v, err)
		}
	}
	check("first start")
	if err := n.Restart(); err != nil {
		t.Fatal(err)
	}
	check("after Restart")
	if err := n.Save(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.RestartFromSnapshot(); err != nil {
		t.Fatal(err)
	}
	check("after RestartFromSnapshot")
}
