package safety

import (
	"context"

	"github.com/redlease/redlease/internal/hashslot"
	"github.com/redlease/redlease/internal/redisproc"
)

// The run's nodes: which kind each is (Config.Topology), and which a fault may hit.

// Node kinds, as Config.Topology names them.
const (
	// Standalone: one redis-server process, reached through a proxy.
	Standalone = "standalone"
	// Sentinel: a Sentinel master set (a master, a replica and three
	// sentinels), reached by its sentinels (sentinel://...). Its
	// sentinels run with short periods (redisproc.FastSentinel).
	Sentinel = "sentinel"
	// SentinelDefault: a Sentinel master set whose sentinels run with
	// Sentinel's own periods (redisproc.DefaultSentinel): after a
	// failover the former master stays writable up to 18s, not ~1s. Each
	// failover takes some 20s.
	SentinelDefault = "sentinel-default"
	// ClusterNode: a Redis Cluster of clusterMasters masters with a
	// replica each, reached by its nodes (cluster://...).
	ClusterNode = "cluster"
)

// kindOf is the kind of node i, as hits names it.
func (r *run) kindOf(i int) string {
	switch {
	case i < len(r.sets) && r.sets[i] != nil:
		return Sentinel
	case r.clusterOf(i) != nil:
		return ClusterNode
	case i < len(r.stock) && r.stock[i]:
		return Stock
	}
	return Standalone
}

// clusterOf is node i's Redis Cluster, nil for a node of another kind (or
// a run a test made of standalone nodes alone).
func (r *run) clusterOf(i int) *redisproc.RedisCluster {
	if i < len(r.clusters) {
		return r.clusters[i]
	}
	return nil
}

// nodesFor returns the nodes a fault of kind may hit: those of the kind
// it hits.
func (r *run) nodesFor(kind string) []int {
	var on []int
	for i := range r.addrs {
		if r.kindOf(i) == hits(kind) {
			on = append(on, i)
		}
	}
	if f, _ := kindNamed(kind); len(on) < f.takes {
		return nil // too few to hit
	}
	return on
}

// serverOf is the server of node i that holds key: node i's, or, for a
// cluster, the master that serves key's slot now.
func (r *run) serverOf(ctx context.Context, i int, key string) (*redisproc.Node, error) {
	if c := r.clusterOf(i); c != nil {
		return c.MasterOf(ctx, hashslot.Of(key))
	}
	return r.cluster.Nodes[i], nil
}
