package safety

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/redlease/redlease/engine"
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
	// FaultShardKill: the shard's master is killed, its replica cut off
	// from a lease's write (lost, as writes not yet replicated are when
	// a master crashes); the cluster promotes the replica after its node
	// timeout; the killed process comes back empty, a replica. The lease
	// is loseLease's, long enough to outlive the failover.
	FaultShardKill = "shard kill"
	// FaultSlotMigration: the resource's slot moves, with its keys (held
	// leases, queues of waiters, the slot's epoch marker), to another
	// master, while the workers acquire and release. Two times in three
	// it moves out of a shard that has just lost a lease's key, before
	// the engines' quarantine of that shard ended (the lease is
	// loseLease's): half of those times the shard restarted from a
	// snapshot (as FaultShardSnapshot); the other half it was flushed,
	// and so was the master the slot moves to, just before the lease was
	// taken, which has had nothing from the fault's other engine since:
	// it owes that engine its own mark when the slot arrives, and that
	// mark must not write over the slot's marker (the slot sits out a
	// quarantine of its own, from when the engine's view gives it that
	// master).
	FaultSlotMigration = "slot migration"
	// FaultShardSnapshot: the shard's master saves a snapshot, its
	// replica is cut off from a lease's write (loseLease's), and it
	// restarts from the snapshot, without that write (if the restart
	// outlasts the node timeout, the replica, which lacks it too, takes
	// over first).
	FaultShardSnapshot = "shard snapshot restart"
	// FaultShardFlush: the shard's master is emptied in place (FLUSHALL
	// or FLUSHDB) under a lease (loseLease's): the process and its
	// connections stay, so only the marker each call reads (its slot's)
	// tells the engines, before their next probe, that the keys are gone.
	FaultShardFlush = "shard flush"
)

// clusterMasters is how many masters a ClusterNode has.
const clusterMasters = 3

// clusterFaultLimit bounds a cluster fault.
const clusterFaultLimit = 20 * time.Second

// shardFault is the injector of a cluster kind: on cluster k, on the
// shard of slot, a resource's the workers use, which master serves.
type shardFault func(r *run, ctx context.Context, rng *rand.Rand, k int, hold time.Duration, c *redisproc.RedisCluster, slot int, master *redisproc.Node) error

// onShard is the injector of f on the shard of a resource the workers
// use, picked at random.
func onShard(f shardFault) injector {
	return func(r *run, ctx context.Context, rng *rand.Rand, k int, hold time.Duration) error {
		c := r.clusters[k]
		// A cluster that does not settle (a server not yet back in it) is
		// not waited for past clusterFaultLimit.
		ctx, cancel := context.WithTimeout(ctx, clusterFaultLimit)
		defer cancel()
		slot := hashslot.Of(lockKey(fmt.Sprintf("res-%d", rng.IntN(r.cfg.Resources))))
		master, err := c.MasterOf(ctx, slot)
		if err != nil {
			return err
		}
		return f(r, ctx, rng, k, hold, c, slot, master)
	}
}

func (r *run) shardFailover(ctx context.Context, rng *rand.Rand, k int, hold time.Duration, c *redisproc.RedisCluster, slot int, master *redisproc.Node) error {
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
}

func (r *run) shardKill(ctx context.Context, rng *rand.Rand, k int, hold time.Duration, c *redisproc.RedisCluster, slot int, master *redisproc.Node) error {
	return r.loseLease(ctx, rng, k, func(slot int, write func() error) error {
		r.nodesDown.Add(1)
		defer r.nodesDown.Add(-1)
		killed, err := c.KillLosingWrites(ctx, slot, func(*redisproc.Node) error { return write() })
		if killed == nil {
			return err
		}
		return errors.Join(err, r.restart(k, killed.Restart)) // empty: no persistence
	})
}

func (r *run) slotMigration(ctx context.Context, rng *rand.Rand, k int, hold time.Duration, c *redisproc.RedisCluster, slot int, master *redisproc.Node) error {
	// other is a master that does not serve slot, at random.
	other := func(slot int) (*redisproc.Node, error) {
		from, err := c.MasterOf(ctx, slot)
		if err != nil {
			return nil, err
		}
		masters, err := c.Masters(ctx)
		if err != nil {
			return nil, err
		}
		masters = slices.DeleteFunc(masters, func(m *redisproc.Node) bool { return m == from })
		if len(masters) == 0 {
			return nil, errors.New("no other master")
		}
		return masters[rng.IntN(len(masters))], nil
	}
	switch rng.IntN(3) {
	case 0:
		to, err := other(slot)
		if err != nil {
			return err
		}
		return c.MigrateSlot(ctx, slot, to)
	case 1:
		// A slot moves out of a shard that has just lost a lease's
		// key (restarted from a snapshot), before the engines'
		// quarantine of that shard ended: the master it moves to
		// must not grant it.
		return r.loseLease(ctx, rng, k, func(slot int, write func() error) error {
			r.nodesDown.Add(1)
			defer r.nodesDown.Add(-1)
			to, err := other(slot)
			if err != nil {
				return err
			}
			if _, err := c.SnapshotRestartLosingWrites(ctx, slot, func(*redisproc.Node) error { return write() }); err != nil {
				return err
			}
			r.restarted[k] = time.Now()
			for range 50 { // until the restarted master serves again
				if err = c.MigrateSlot(ctx, slot, to); err == nil || !sleep(ctx, 100*time.Millisecond) {
					break
				}
			}
			return err
		})
	}
	// The same, the lease's key flushed, into a master that owes
	// loseLease's B its own mark: that mark must not write the
	// slot's over the one the slot came with.
	return r.loseLease(ctx, rng, k, func(slot int, write func() error) error {
		to, err := other(slot)
		if err != nil {
			return err
		}
		if err := r.flushAhead(ctx, k, to); err != nil {
			return err
		}
		if err := flushLosing(ctx, rng, c, slot, write); err != nil {
			return err
		}
		return c.MigrateSlot(ctx, slot, to)
	})
}

func (r *run) shardSnapshot(ctx context.Context, rng *rand.Rand, k int, hold time.Duration, c *redisproc.RedisCluster, slot int, master *redisproc.Node) error {
	return r.loseLease(ctx, rng, k, func(slot int, write func() error) error {
		r.nodesDown.Add(1)
		defer r.nodesDown.Add(-1)
		_, err := c.SnapshotRestartLosingWrites(ctx, slot, func(*redisproc.Node) error { return write() })
		r.restarted[k] = time.Now()
		return err
	})
}

func (r *run) shardFlush(ctx context.Context, rng *rand.Rand, k int, hold time.Duration, c *redisproc.RedisCluster, slot int, master *redisproc.Node) error {
	return r.loseLease(ctx, rng, k, func(slot int, write func() error) error {
		return flushLosing(ctx, rng, c, slot, write)
	})
}

// flushLosing takes loseLease's lease (write), then empties the master of
// its slot in place (FLUSHALL or FLUSHDB): the lease's key is gone, the
// process and its connections stay.
func flushLosing(ctx context.Context, rng *rand.Rand, c *redisproc.RedisCluster, slot int, write func() error) error {
	if err := write(); err != nil {
		return err
	}
	master, err := c.MasterOf(ctx, slot)
	if err != nil {
		return err
	}
	_, err = master.Do(ctx, []string{"FLUSHALL", "FLUSHDB"}[rng.IntN(2)])
	return err
}

// flushAhead empties master, a master of cluster k, and returns once the
// fault's other engine (loseLease's B) sits it out, and half of that
// engine's quarantine more: that engine's quarantine of master then ends
// well before the lease loseLease is about to take does (its owed mark
// reads every slot's marker, which takes a while under load), while the
// engine has sent master nothing (its only resources are loseLease's),
// so it still owes master its mark when a slot moves there.
func (r *run) flushAhead(ctx context.Context, k int, master *redisproc.Node) error {
	if _, err := master.Do(ctx, "FLUSHALL"); err != nil {
		return err
	}
	b := r.shardEngines[1]
	for {
		n := b.Stats().Nodes[k]
		if d := time.Until(n.QuarantinedUntil); d > 0 {
			sleep(ctx, d/2)
			return ctx.Err()
		}
		if !sleep(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// clusterTTLs is how many of the workers' TTLs loseLease's leases last:
// beyond a failover after the node timeout (1s, then an election), and
// the restart of a cluster's master.
const clusterTTLs = 10

// loseLease has lose lose a lease's key on a cluster's shard: lose calls
// write while the shard's master takes writes that no server will keep
// (its replica cut off), or before it flushes them, and write takes the
// lease, on a resource of its
// own in slot, with an engine of the fault's own whose leases last
// clusterTTLs of the workers' (the workers' are shorter than a shard's
// failover: their keys would be gone anyway). Then the fault's other
// engine tries to take the resource until that lease ends: the recorder
// sees both if it can. Both engines sit out the quarantine of their own
// MaxTTL (that long TTL), unless the run's is set.
func (r *run) loseLease(ctx context.Context, rng *rand.Rand, k int, lose func(slot int, write func() error) error) error {
	ttl := clusterTTLs * r.cfg.TTL
	for len(r.shardEngines) < 2 {
		e, err := r.startEngine(fmt.Sprintf("shard%d", len(r.shardEngines)),
			engine.Config{Nodes: r.addrs, TTL: ttl, KeyPrefix: faultPrefix, HealthInterval: workHealth})
		if err != nil {
			return err
		}
		r.shardEngines = append(r.shardEngines, e)
	}
	es := r.shardEngines
	// Not while they sit a node out since the last time (their
	// quarantine is their long TTL): A would not get the lease.
	for _, e := range es {
		for _, n := range e.Stats().Nodes {
			if d := time.Until(n.QuarantinedUntil); d > 0 && !sleep(ctx, min(d, ttl)) {
				return ctx.Err()
			}
		}
	}
	resource := fmt.Sprintf("shard-%d", rng.Uint64())
	var l *engine.Lease
	var h *Holding
	err := lose(hashslot.Of(faultKey(resource)), func() error {
		// Under load, or while a shard actor first probes a new master
		// (or the engine's view still routes the slot to a master that
		// is gone), rounds may fail for a while, and the last fault's
		// new master may still sit out its quarantine: A tries again
		// until it gets the lease, within its TTL, not within the
		// workers' few attempts.
		actx, cancel := context.WithTimeout(ctx, 2*ttl)
		defer cancel()
		var err error
		for {
			if l, err = es[0].Acquire(actx, resource, workerRetry); err == nil {
				break
			}
			if !sleep(actx, 50*time.Millisecond) {
				return err
			}
		}
		h = r.rec.Held(resource, "shard0/A", l.Value(), time.Now(), l.Until(), l.Token())
		return nil
	})
	if l == nil {
		return err
	}
	defer func() {
		r.rec.Ended(h, time.Now(), l.Until())
		_ = l.Release(context.Background())
	}()
	for time.Now().Before(l.Until()) && ctx.Err() == nil {
		if l2, err := es[1].TryAcquire(ctx, resource); err == nil {
			h2 := r.rec.Held(resource, "shard1/B", l2.Value(), time.Now(), l2.Until(), l2.Token())
			r.rec.Ended(h2, time.Now(), l2.Until())
			_ = l2.Release(ctx)
		}
		sleep(ctx, 10*time.Millisecond) // a pace
	}
	return err
}
