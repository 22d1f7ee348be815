package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/redisproc"
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
	// on each resource's shard.
	for i, e := range engines {
		if w := e.Stats().Wakeups; w.Release == 0 || w.Fallback > 0 {
			t.Errorf("engine %d: wakeups %+v: want some on release, none on fallback", i, w)
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
