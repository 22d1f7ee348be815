package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/hashslot"
	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/internal/testwait"
	"github.com/redlease/redlease/node"
)

// clusterNode is the Config.Nodes entry of c, named by one of its nodes.
func clusterNode(c *redisproc.RedisCluster) string {
	return node.Target{Cluster: c.Addrs()[:1]}.String()
}

// A Redis Cluster alone is a quorum of one: marked new, it serves at once;
// resources spread over its shards; callers of two engines on a few
// resources take turns (a waiter wakes on the release announced from its
// resource's shard); InspectLocks finds a held lease on whichever master
// its slot lives; InspectNodes reports each master.
func TestClusterNode(t *testing.T) {
	t.Parallel() // it waits on its own cluster or master set, not on the CPU
	c := redisproc.StartRedisClusterT(t, 3, 0)
	spec := clusterNode(c)
	if err := MarkNew(t.Context(), Config{Nodes: []string{spec}}); err != nil {
		t.Fatalf("MarkNew: %v", err)
	}
	tune := func(cfg *Config) { cfg.TTL = 5 * time.Second }
	engines := []*Engine{newEngine(t, []string{spec}, tune), newEngine(t, []string{spec}, tune)}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	// Many resources, over every shard: a marked cluster serves at once.
	for i := range 100 {
		l, err := engines[0].TryAcquire(ctx, fmt.Sprint("spread-", i))
		if err != nil {
			t.Fatalf("TryAcquire on a marked cluster: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}

	// A few resources, many callers of two engines: one holder at a time.
	const resources, callers, each = 3, 12, 20
	var inside [resources]atomic.Int32
	var wg sync.WaitGroup
	for g := range callers {
		e, r := engines[g%2], g%resources
		wg.Go(func() {
			for range each {
				l, err := e.Acquire(ctx, fmt.Sprint("contended-", r))
				if err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				if n := inside[r].Add(1); n != 1 {
					t.Errorf("%d holders of resource %d at once", n, r)
				}
				time.Sleep(time.Millisecond)
				inside[r].Add(-1)
				if err := l.Release(ctx); err != nil {
					t.Errorf("Release: %v", err)
				}
			}
		})
	}
	wg.Wait()
	// The waiters of one engine woke on the other's releases, announced
	// on each resource's shard: their backoff ran out first seldom (a
	// waiter that came before its engine listened there).
	for i, e := range engines {
		if w := e.Stats().Wakeups; w.Release == 0 || w.Fallback > w.Release/10 {
			t.Errorf("engine %d: wakeups %+v: want most on release", i, w)
		}
	}
	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sharded := 0
	for _, m := range masters {
		if s, _ := m.Info(ctx, "commandstats", "cmdstat_spublish"); s != "" {
			sharded++
		}
		if s, _ := m.Info(ctx, "commandstats", "cmdstat_publish"); s != "" {
			t.Errorf("master %s announced with PUBLISH, to the whole cluster: %s", m.Addr(), s)
		}
	}
	if sharded == 0 {
		t.Error("no master announced with SPUBLISH")
	}

	l, err := engines[1].TryAcquire(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	locks, err := InspectLocks(ctx, Config{Nodes: []string{spec}}, "held")
	if err != nil || len(locks) != 1 || locks[0].Owner != l.Value() {
		t.Fatalf("InspectLocks: %+v %v, want the lease's owner", locks, err)
	}
	reports, err := InspectNodes(ctx, Config{Nodes: []string{spec}})
	if err != nil || len(reports) != 1 {
		t.Fatalf("InspectNodes: %+v %v", reports, err)
	}
	r := reports[0]
	slots := 0
	for _, s := range r.Shards {
		slots += s.Slots
		if !s.Trusted || s.Err != nil || s.RunID == "" {
			t.Errorf("shard %+v: want trusted", s)
		}
	}
	if len(r.Shards) != 3 || slots != 16384 || !r.Trusted || !r.Serves(time.Now()) {
		t.Fatalf("InspectNodes: %+v, want 3 trusted shards serving every slot", r)
	}
}

// A shard whose master fails over to a replica that lacks a lease's key is
// a restart of that shard alone: until every lease it may have held
// expired, nobody takes the lost key (neither this engine nor one that
// meets the new master first), while the resources of the other shards
// keep being served.
func TestClusterFailoverIsAShardRestart(t *testing.T) {
	t.Parallel() // it waits on its own cluster or master set, not on the CPU

	const ttl = 8 * time.Second // well beyond a failover
	c := redisproc.StartRedisClusterT(t, 3, 1)
	spec := clusterNode(c)
	tune := func(cfg *Config) { cfg.TTL, cfg.HealthInterval = ttl, 50*time.Millisecond }
	ctx := t.Context()
	if err := MarkNew(ctx, Config{Nodes: []string{spec}}); err != nil {
		t.Fatalf("MarkNew: %v", err)
	}
	e := newEngine(t, []string{spec}, tune)
	events, unsubscribe := e.Subscribe(1024)
	defer unsubscribe()
	var mu sync.Mutex
	var nodeEvents []Event // the node kinds e published
	go func() {
		for ev := range events {
			if ev.Kind >= NodeDown {
				mu.Lock()
				nodeEvents = append(nodeEvents, ev)
				mu.Unlock()
			}
		}
	}()
	slot := hashslot.Of(lockKey("r"))
	master, err := c.MasterOf(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	// A resource on another shard.
	other := ""
	for i := 0; other == ""; i++ {
		if m, err := c.MasterOf(ctx, hashslot.Of(lockKey(fmt.Sprint("other-", i)))); err == nil && m != master {
			other = fmt.Sprint("other-", i)
		}
	}
	var l *Lease
	promoted, err := c.FailoverLosingWrites(ctx, master, "TAKEOVER", func(old *redisproc.Node) error {
		var err error
		l, err = e.TryAcquire(ctx, "r")
		return err
	})
	if err != nil {
		t.Fatalf("failover: %v", err)
	}
	if _, ok, err := promoted.Get(ctx, lockKey("r")); err != nil || ok {
		t.Fatalf("the promoted replica has the lost key (%v): the failover lost nothing", err)
	}
	if left := time.Until(l.Until()); left < ttl/8 {
		t.Fatalf("the failover took so long that the lease has %v left: the test proves little", left)
	}
	fresh := newEngine(t, []string{spec}, tune)
	served, refused := 0, 0
	for time.Now().Before(l.Until()) {
		for _, eng := range []*Engine{e, fresh} {
			l2, err := eng.TryAcquire(ctx, "r")
			if err == nil {
				left := time.Until(l.Until())
				_ = l2.Release(context.Background())
				t.Fatalf("granted %q, whose key the failover lost, %v before its holder's lease ends", "r", left)
			}
			// The refusal names the shard and slot, and is no new node's:
			// no MarkNew hint.
			var ae *AcquireError
			if errors.As(err, &ae) && len(ae.Nodes) == 1 && errors.Is(ae.Nodes[0].Err, ErrQuarantined) {
				refused++
				if n := ae.Nodes[0]; n.Shard != promoted.Addr() || n.Slot != slot || strings.Contains(err.Error(), "MarkNew") ||
					!strings.Contains(err.Error(), fmt.Sprintf("(shard %s, slot %d)", promoted.Addr(), slot)) {
					t.Fatalf("refusal during the shard's quarantine: %v (%+v); want shard %s, slot %d named, no MarkNew hint", err, n, promoted.Addr(), slot)
				}
			}
		}
		if refused == 1 { // the shard, and it alone, sits out
			for _, eng := range []*Engine{e, fresh} {
				shards := eng.Stats().Nodes[0].Shards
				out := 0
				for _, sh := range shards {
					if time.Now().Before(sh.QuarantinedUntil) || sh.QuarantinedSlots > 0 {
						out++
						if sh.Addr != promoted.Addr() {
							t.Errorf("shard %+v sits out; want %s alone", sh, promoted.Addr())
						}
					}
				}
				if len(shards) != 3 || out != 1 {
					t.Errorf("Stats().Nodes[0].Shards = %+v; want 3, the promoted one sitting out", shards)
				}
			}
		}
		if l2, err := e.TryAcquire(ctx, other); err == nil {
			served++
			_ = l2.Release(ctx)
		}
		time.Sleep(10 * time.Millisecond) // not an order: a pace
	}
	if served == 0 {
		t.Error("the other shards' resources were not served during the failed shard's quarantine")
	}
	if refused == 0 {
		t.Error("no refusal of r with ErrQuarantined during the shard's quarantine")
	}
	testwait.Eventually(t, 2*ttl, "the failed-over shard serving again", func() bool {
		l2, err := e.TryAcquire(ctx, "r")
		if err == nil {
			_ = l2.Release(ctx)
		}
		return err == nil
	})
	// Subscribers heard the shard sit out, and serve again.
	testwait.Eventually(t, 2*ttl, "NodeQuarantined, then NodeServing, of the promoted shard", func() bool {
		mu.Lock()
		defer mu.Unlock()
		quarantined := false
		for _, ev := range nodeEvents {
			if ev.Node != spec || ev.Shard != promoted.Addr() {
				continue
			}
			switch ev.Kind {
			case NodeQuarantined:
				quarantined = errors.Is(ev.Err, ErrQuarantined) && !errors.Is(ev.Err, ErrNoMarker)
			case NodeServing:
				if quarantined {
					return true
				}
			}
		}
		return false
	})
	mu.Lock()
	for _, ev := range nodeEvents {
		t.Logf("event %v node %s shard %s until %v: %v", ev.Kind, ev.Node, ev.Shard, ev.Until.Format("15:04:05.000"), ev.Err)
	}
	mu.Unlock()
}

// New judges a cluster's masters as it judges standalone nodes: one named
// again, as a node of its own or in a second cluster entry, is refused
// (it would vote twice), and so is one that may evict lock keys.
func TestClusterMastersJudgedAtNew(t *testing.T) {
	t.Parallel() // it waits on its own cluster or master set, not on the CPU
	c := redisproc.StartRedisClusterT(t, 3, 0)
	spec := clusterNode(c)
	if e, err := New(Config{Nodes: []string{spec, c.Addrs()[1], "127.0.0.1:1"}}); !errors.Is(err, ErrClusterMaster) {
		if e != nil {
			e.Close()
		}
		t.Fatalf("a cluster and one of its masters: New = %v; want ErrClusterMaster", err)
	}
	again := node.Target{Cluster: c.Addrs()[1:2]}.String()
	if e, err := New(Config{Nodes: []string{spec, again, "127.0.0.1:1"}}); err == nil || !strings.Contains(err.Error(), "same server") {
		if e != nil {
			e.Close()
		}
		t.Fatalf("a cluster named twice: New = %v; want the same server refused", err)
	}
	if _, err := c.Servers[2].Do(t.Context(), "CONFIG", "SET", "maxmemory", "1gb", "maxmemory-policy", "allkeys-lru"); err != nil {
		t.Fatal(err)
	}
	if e, err := New(Config{Nodes: []string{spec}}); !errors.Is(err, ErrEvicting) {
		if e != nil {
			e.Close()
		}
		t.Fatalf("a cluster with an evicting master: New = %v; want ErrEvicting", err)
	}
}

// A shard failover is one quarantine of the promoted master's slots, the
// shard's: its slots were the shard's before, and the shard's quarantine
// covers them. After it the engine marks every slot itself, though a probe
// finds the marker of the shard's first slot naming the dataset already:
// that vouches for the first slot alone (another engine's mark cut short
// after its first slots, or this engine's own, cut short by its deadline:
// 5461 slots took 1.3 s under -race on two busy cores, against a 1 s
// budget). Taking it for the whole shard's left the others unmarked, and
// their first acquires sat them out a second full quarantine (issue 43,
// item 7: in 2 of 6 failovers, 1-3 slots out for another TTL).
func TestClusterFailoverQuarantinesOnce(t *testing.T) {
	t.Parallel() // it waits on its own cluster or master set, not on the CPU

	const ttl = 2 * time.Second
	c := redisproc.StartRedisClusterT(t, 3, 1)
	spec := clusterNode(c)
	ctx := t.Context()
	if err := MarkNew(ctx, Config{Nodes: []string{spec}}); err != nil {
		t.Fatalf("MarkNew: %v", err)
	}
	e := newEngine(t, []string{spec}, func(cfg *Config) { cfg.TTL, cfg.HealthInterval = ttl, 50*time.Millisecond })
	master, err := c.MasterOf(ctx, hashslot.Of(lockKey("r")))
	if err != nil {
		t.Fatal(err)
	}
	promoted, err := c.FailoverLosingWrites(ctx, master, "TAKEOVER", func(*redisproc.Node) error { return nil })
	if err != nil {
		t.Fatalf("failover: %v", err)
	}
	shard := func() NodeStats {
		for _, sh := range e.Stats().Nodes[0].Shards {
			if sh.Addr == promoted.Addr() {
				return sh
			}
		}
		return NodeStats{}
	}
	testwait.Eventually(t, 2*ttl, "the promoted shard met, quarantined", func() bool {
		if l, err := e.TryAcquire(ctx, "r"); err == nil {
			_ = l.Release(ctx)
		}
		return time.Now().Before(shard().QuarantinedUntil)
	})

	// Another engine's mark of the promoted master, cut short after its
	// first slot.
	cfg := Config{Nodes: []string{spec}}.withDefaults()
	opt := cfg.clientOption(spec)
	view, err := node.AskCluster(ctx, opt)
	if err != nil {
		t.Fatal(err)
	}
	slots := view[promoted.Addr()]
	p := node.ProbeCluster(ctx, opt, cfg.epochKey(), node.ClusterView{promoted.Addr(): slots})[0]
	defer p.Conn.Close()
	if p.Err != nil {
		t.Fatal(p.Err)
	}
	if ok, err := p.Conn.MarkSlots(ctx, cfg.epochKey(), slots[:1], p.Info, true); !ok || err != nil {
		t.Fatalf("marking slot %d: %v %v", slots[0], ok, err)
	}

	// The shard's quarantine ends with no acquire there: the engine's
	// probes (every 50ms) find the first slot's marker naming the dataset.
	for until := shard().QuarantinedUntil; time.Now().Before(until.Add(10 * 50 * time.Millisecond)); until = shard().QuarantinedUntil {
		time.Sleep(50 * time.Millisecond)
	}
	// Resources in the promoted master's other slots: each is granted in
	// turn (once the engine's own mark is through: under -race on busy
	// cores it may be cut short and go again, its batches timing out
	// meanwhile), and none sits out again.
	var resources []string
	for i := 0; len(resources) < 20; i++ {
		r := fmt.Sprint("after-", i)
		if s := uint16(hashslot.Of(lockKey(r))); s != slots[0] && slices.Contains(slots, s) {
			resources = append(resources, r)
		}
	}
	for _, r := range resources {
		testwait.Eventually(t, 10*ttl, "granted "+r, func() bool {
			l, err := e.TryAcquire(ctx, r)
			if err == nil {
				_ = l.Release(ctx)
			}
			if n := shard().QuarantinedSlots; n > 0 || errors.Is(err, ErrQuarantined) {
				t.Fatalf("%s, after the shard's quarantine: %v; %d slots of the promoted master sit out a second quarantine", r, err, n)
			}
			return err == nil
		})
	}
}
