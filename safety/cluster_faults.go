package safety

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redlease/redlease/internal/hashslot"
	"github.com/redlease/redlease/internal/redisproc"
)

// Faults of a Redis Cluster node (Config.Topology's ClusterNode), each on
// the shard of a resource the workers use: its master holds that
// resource's keys, and a waiter's place.
const (
	// FaultShardFailover: the shard's master is failed over to its
	// replica with CLUSTER FAILOVER FORCE or TAKEOVER (one or the other at
	// random), the replica cut off from the writes of a hold before (lost:
	// the new master never had them); the laggard (see lag) keeps
	// acquiring meanwhile. The old master becomes its replica.
	FaultShardFailover = "shard failover"
	// FaultShardKill: the shard's master is killed; the cluster promotes
	// its replica after its node timeout (writes not yet replicated are
	// lost); the killed process comes back empty, a replica.
	FaultShardKill = "shard kill"
	// FaultSlotMigration: the resource's slot moves, with its keys (held
	// leases, queues of waiters, the slot's epoch marker), to another
	// master, while the workers acquire and release.
	FaultSlotMigration = "slot migration"
	// FaultShardSnapshot: the shard's master saves a snapshot, takes
	// writes for half a hold, and restarts from the snapshot (if the
	// restart outlasts the node timeout, its replica takes over first).
	FaultShardSnapshot = "shard snapshot restart"
)

// clusterMasters is how many masters a ClusterNode has.
const clusterMasters = 3

// onClusters reports whether a fault of kind hits clusters (and only
// them).
func onClusters(kind string) bool {
	switch kind {
	case FaultShardFailover, FaultShardKill, FaultSlotMigration, FaultShardSnapshot:
		return true
	}
	return false
}

// clusterFault injects a fault of kind on cluster k, on the shard of a
// resource the workers use.
func (r *run) clusterFault(ctx context.Context, rng *rand.Rand, kind string, k int, hold time.Duration) error {
	c := r.clusters[k]
	slot := hashslot.Of(lockKey(fmt.Sprintf("res-%d", rng.IntN(r.cfg.Resources))))
	master, err := c.MasterOf(ctx, slot)
	if err != nil {
		return err
	}
	switch kind {
	case FaultShardFailover:
		stop, err := r.lag(ctx)
		if err != nil {
			return err
		}
		defer stop()
		r.nodesDown.Add(1) // its slots quarantined once the engines meet the new master
		defer r.nodesDown.Add(-1)
		mode := []string{"FORCE", "TAKEOVER"}[rng.IntN(2)]
		_, err = c.FailoverLosingWrites(ctx, master, mode, func(*redisproc.Node) error {
			sleep(ctx, hold) // leases come and go on the master alone
			return nil
		})
		r.restarted[k] = time.Now()
		return err
	case FaultShardKill:
		r.nodesDown.Add(1)
		defer r.nodesDown.Add(-1)
		if err := master.Kill(); err != nil {
			return err
		}
		// The replica takes over after the node timeout.
		for deadline := time.Now().Add(15 * time.Second); ; {
			if m, err := c.MasterOf(ctx, slot); err == nil && m != master {
				break
			}
			if time.Now().After(deadline) {
				return errors.Join(errors.New("no replica took over within 15s"), r.restart(k, master.Restart))
			}
			if !sleep(ctx, 50*time.Millisecond) {
				return errors.Join(ctx.Err(), r.restart(k, master.Restart))
			}
		}
		return r.restart(k, master.Restart) // empty: no persistence
	case FaultSlotMigration:
		masters, err := c.Masters(ctx)
		if err != nil {
			return err
		}
		var to []*redisproc.Node
		for _, m := range masters {
			if m != master {
				to = append(to, m)
			}
		}
		if len(to) == 0 {
			return errors.New("no other master")
		}
		return c.MigrateSlot(ctx, slot, to[rng.IntN(len(to))])
	case FaultShardSnapshot:
		if err := master.Save(ctx); err != nil {
			return err
		}
		sleep(ctx, hold/2) // leases come and go after the snapshot
		r.nodesDown.Add(1)
		defer r.nodesDown.Add(-1)
		return r.restart(k, master.RestartFromSnapshot)
	}
	return fmt.Errorf("no cluster fault %q", kind)
}
