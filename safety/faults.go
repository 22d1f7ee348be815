package safety

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"time"
)

// faultKind is one row of the fault registry: a kind's name (a Fault...
// constant), the kind of node it hits (Standalone, Sentinel or
// ClusterNode), how many times a round of the run injects it, its
// injector, and how many nodes of that kind it needs to be injected. The kind list (Kinds), the nodes a kind may hit (hits), the
// dispatch (fault) and a round (inject) all derive from the registry: a
// new kind is a row and its injector (and its name's constant).
type faultKind struct {
	name     string
	hits     string
	perRound int // 0: once
	inject   injector
	takes    int // nodes of its kind it needs at least
}

// injector injects a fault on node k (and, for a fault that hits
// several, on the next nodes of its kind: run.nodesFor); hold is a random
// time the fault lasts, for the injectors that take one. An error says
// why it could not: the run tries it once more at the end of the round.
type injector func(r *run, ctx context.Context, rng *rand.Rand, k int, hold time.Duration) error

// registry is every fault kind the checker knows, in Kinds' order. (Set
// in init: some injectors ask it which nodes they may hit.)
var registry []faultKind

func init() {
	registry = []faultKind{
		{FaultKillRestart, Standalone, 2, (*run).killRestart, 1},
		{FaultPause, Standalone, 2, (*run).pause, 1},
		{FaultSlowLink, Standalone, 2, (*run).slowLink, 1},
		{FaultMajorityPause, Standalone, 1, (*run).majorityPause, 1},
		{FaultBareMajority, Standalone, 1, (*run).bareMajority, 3},
		{FaultLongerLeases, Standalone, 1, (*run).longerLeases, 3},
		{FaultScriptFlush, Standalone, 1, command("SCRIPT", "FLUSH"), 1},
		{FaultDebugSleep, Standalone, 1, (*run).debugSleep, 1},
		{FaultSnapshotRestart, Standalone, 1, (*run).snapshotRestart, 1},
		{FaultIdleEngine, Standalone, 1, withoutHold((*run).idleAcquire), 1},
		{FaultNewEngine, Standalone, 1, func(r *run, ctx context.Context, _ *rand.Rand, _ int, _ time.Duration) error { return r.join(ctx) }, 1},
		{FaultClientKill, Standalone, 1, command("CLIENT", "KILL", "TYPE", "normal"), 1},
		{FaultPubSubKill, Standalone, 1, command("CLIENT", "KILL", "TYPE", "pubsub"), 1},
		{FaultClockJump, Standalone, 1, withoutHold((*run).clockJump), 1},
		{FaultEviction, Standalone, 1, (*run).eviction, 1},
		{FaultFailover, Standalone, 1, withoutRand((*run).failover), 1},
		{FaultFlush, Standalone, 1, withoutHold((*run).flush), 1},
		{FaultRepromote, Standalone, 1, withoutRand((*run).repromote), 1},
		{FaultWritableReplica, Standalone, 1, withoutRand((*run).writableReplica), 1},
		{FaultOneAddress, Standalone, 1, withoutRand((*run).oneAddress), 1},
		{FaultFailback, Standalone, 1, withoutRand((*run).failback), 1},
		{FaultReload, Standalone, 1, withoutRand((*run).reload), 1},
		{FaultProxySwitch, Standalone, 1, (*run).proxySwitch, 1},
		{FaultClockStep, Standalone, 1, func(r *run, ctx context.Context, _ *rand.Rand, k int, _ time.Duration) error {
			return r.clockStep(ctx, k)
		}, 1},
		{FaultFenceExpiry, Standalone, 1, func(r *run, ctx context.Context, rng *rand.Rand, _ int, _ time.Duration) error {
			return r.fenceExpiry(ctx, rng)
		}, 1},
		{FaultQuarantinedLeave, Standalone, 1, withoutHold((*run).quarantinedLeave), 1},
		{FaultKilledAfterRelease, Standalone, 1, func(r *run, ctx context.Context, rng *rand.Rand, _ int, _ time.Duration) error {
			return r.killedAfterRelease(ctx, rng)
		}, 1},
		{FaultHeal, Standalone, 1, withoutHold((*run).heal), 1},
		{FaultSentinelFailover, Sentinel, 1, withoutRand((*run).sentinelFailover), 1},
		{FaultACL, Standalone, 1, (*run).acl, 1},
		{FaultSwappedTwin, Stock, 1, withoutRand((*run).swappedTwin), 1},
		{FaultShardFailover, ClusterNode, 1, onShard((*run).shardFailover), 1},
		{FaultShardKill, ClusterNode, 1, onShard((*run).shardKill), 1},
		{FaultSlotMigration, ClusterNode, 1, onShard((*run).slotMigration), 1},
		{FaultShardSnapshot, ClusterNode, 1, onShard((*run).shardSnapshot), 1},
		{FaultShardFlush, ClusterNode, 1, onShard((*run).shardFlush), 1},
	}
}

// Kinds lists the fault kinds the checker knows.
func Kinds() []string {
	names := make([]string, len(registry))
	for i, f := range registry {
		names[i] = f.name
	}
	return names
}

// kindNamed is kind's row of the registry.
func kindNamed(kind string) (faultKind, bool) {
	i := slices.IndexFunc(registry, func(f faultKind) bool { return f.name == kind })
	if i < 0 {
		return faultKind{}, false
	}
	return registry[i], true
}

// hits is the kind of node a fault of kind hits (and only those):
// Sentinel for master sets, ClusterNode for clusters, Stock for a swapped
// twin, Standalone for the others, most of them through the node's proxy.
func hits(kind string) string {
	f, _ := kindNamed(kind)
	return f.hits
}

// command is an injector that sends node k one command.
func command(args ...string) injector {
	return func(r *run, ctx context.Context, _ *rand.Rand, k int, _ time.Duration) error {
		_, err := r.cluster.Nodes[k].Do(ctx, args...)
		return err
	}
}

// withoutHold is an injector of f, which takes no hold.
func withoutHold(f func(*run, context.Context, *rand.Rand, int) error) injector {
	return func(r *run, ctx context.Context, rng *rand.Rand, k int, _ time.Duration) error {
		return f(r, ctx, rng, k)
	}
}

// withoutRand is an injector of f, which draws nothing at random.
func withoutRand(f func(*run, context.Context, int, time.Duration) error) injector {
	return func(r *run, ctx context.Context, _ *rand.Rand, k int, hold time.Duration) error {
		return f(r, ctx, k, hold)
	}
}

// The injectors of the standalone kinds that fit in a few lines.

func (r *run) killRestart(ctx context.Context, _ *rand.Rand, k int, hold time.Duration) error {
	n := r.cluster.Nodes[k]
	r.nodesDown.Add(1)
	defer r.nodesDown.Add(-1)
	_ = n.Kill()
	sleep(ctx, hold)
	return r.restart(k, n.Restart) // empty: no persistence
}

func (r *run) pause(ctx context.Context, _ *rand.Rand, k int, hold time.Duration) error {
	n := r.cluster.Nodes[k]
	r.nodesDown.Add(1)
	defer r.nodesDown.Add(-1)
	_ = n.Pause()
	sleep(ctx, hold)
	_ = n.Resume()
	return nil
}

// majorityPause: no quorum for a while: leases are lost, none granted.
func (r *run) majorityPause(ctx context.Context, _ *rand.Rand, k int, hold time.Duration) error {
	paused := r.next(FaultMajorityPause, k, min(3, len(r.nodesFor(FaultMajorityPause))))
	r.nodesDown.Add(int32(len(paused)))
	defer r.nodesDown.Add(int32(-len(paused)))
	for _, i := range paused {
		_ = r.cluster.Nodes[i].Pause()
	}
	sleep(ctx, r.cfg.TTL+hold)
	for _, i := range paused {
		_ = r.cluster.Nodes[i].Resume()
	}
	return nil
}

// bareMajority is the Redlock critique's case: with two nodes dead,
// leases live on exactly three; one of those loses its data, and the dead
// two come back empty. Only restart quarantine keeps a contender from
// taking those three while a holder holds.
func (r *run) bareMajority(ctx context.Context, _ *rand.Rand, k int, hold time.Duration) error {
	three := r.next(FaultBareMajority, k, 3)
	a, b, c := three[0], three[1], three[2]
	r.nodesDown.Add(2)
	defer r.nodesDown.Add(-2)
	_, _ = r.cluster.Nodes[a].Kill(), r.cluster.Nodes[b].Kill()
	sleep(ctx, hold)
	_ = r.cluster.Nodes[c].Kill()
	var errs []error
	for _, i := range []int{c, a, b} {
		errs = append(errs, r.restart(i, r.cluster.Nodes[i].Restart))
	}
	return errors.Join(errs...)
}

func (r *run) slowLink(ctx context.Context, rng *rand.Rand, k int, hold time.Duration) error {
	r.proxies[k].SetDelay(time.Duration(5+rng.IntN(60)) * time.Millisecond)
	sleep(ctx, hold)
	r.proxies[k].SetDelay(0)
	return nil
}

func (r *run) debugSleep(ctx context.Context, rng *rand.Rand, k int, _ time.Duration) error {
	woke, err := r.cluster.Nodes[k].Stall(time.Duration(50+rng.IntN(250)) * time.Millisecond)
	if err != nil {
		return err
	}
	r.nodesDown.Add(1)
	defer r.nodesDown.Add(-1)
	select {
	case <-woke:
	case <-ctx.Done():
	}
	return nil
}

func (r *run) snapshotRestart(ctx context.Context, _ *rand.Rand, k int, hold time.Duration) error {
	n := r.cluster.Nodes[k]
	if err := n.Save(ctx); err != nil {
		return err
	}
	sleep(ctx, hold/2) // leases come and go after the snapshot
	r.nodesDown.Add(1)
	defer r.nodesDown.Add(-1)
	return r.restart(k, n.RestartFromSnapshot)
}

func (r *run) eviction(ctx context.Context, _ *rand.Rand, k int, hold time.Duration) error {
	r.nodesDown.Add(1) // it refuses acquires
	defer r.nodesDown.Add(-1)
	return r.evict(ctx, r.cluster.Nodes[k], hold)
}

// next is n nodes that a fault of kind may hit, from k on.
func (r *run) next(kind string, k, n int) []int {
	on := r.nodesFor(kind)
	out := make([]int, n)
	for j := range out {
		out[j] = on[(slices.Index(on, k)+j)%len(on)]
	}
	return out
}
