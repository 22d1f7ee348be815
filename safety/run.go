package safety

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/redlease/redlease/engine"
	"github.com/redlease/redlease/internal/hashslot"
	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/node"
)

// Fault kinds, as Config.Kinds and Report.Faults name them.
const (
	// FaultKillRestart: a node killed with -9 and restarted without its
	// data.
	FaultKillRestart = "kill+restart"
	// FaultPause: a node stopped (SIGSTOP) and resumed.
	FaultPause = "pause"
	// FaultSlowLink: a node's link slowed through the proxy.
	FaultSlowLink = "slow link"
	// FaultMajorityPause: three nodes paused for longer than a TTL.
	FaultMajorityPause = "majority pause"
	// FaultBareMajority: the Redlock critique's restart: two nodes dead, a
	// third restarted empty, then the two back empty.
	FaultBareMajority = "restart under a bare majority"
	// FaultScriptFlush: SCRIPT FLUSH on a node while leases come and go.
	FaultScriptFlush = "script flush"
	// FaultDebugSleep: a node stalled (CLIENT PAUSE ALL 50-300ms, from a
	// connection of its own) with batches in flight. (DEBUG SLEEP, as
	// the name says, until engines counted DEBUG calls as reloads.)
	FaultDebugSleep = "debug sleep"
	// FaultSnapshotRestart: a node snapshotted (SAVE), then, after some
	// leases came and went, killed and restarted from that snapshot: it
	// keeps the epoch key but loses the writes after the snapshot.
	FaultSnapshotRestart = "snapshot restart"
	// FaultIdleEngine: an engine that stayed idle longer than the
	// restart quarantine acquires right after a node restarted empty.
	FaultIdleEngine = "idle engine"
	// FaultNewEngine: an engine created in the middle of the run joins
	// the contention (the oldest such engine retires).
	FaultNewEngine = "new engine"
	// FaultClientKill: CLIENT KILL TYPE normal on a node: every engine's
	// connection to it dies, batches in flight included.
	FaultClientKill = "client kill"
	// FaultPubSubKill: CLIENT KILL TYPE pubsub on a node: the engines'
	// watchers lose their subscriptions, and with them announcements of
	// releases, until they subscribe again.
	FaultPubSubKill = "pubsub kill"
	// FaultClockJump: a node's wall clock steps ahead by more than a TTL
	// while it serves leases (the first time, the node is also restarted
	// with its clock ahead). Keys on it expire early: Redlock's timing
	// assumption is broken, and overlaps this explains are reported apart.
	FaultClockJump = "clock jump"
	// FaultFailover: a spare process that has run for a while replicates
	// a node, is cut off (promoted) while leases come and go on the node,
	// and takes its place behind its address when the node dies, as a
	// managed Redis's replica does: it lacks the node's latest lock keys.
	// The node's process becomes the next spare.
	FaultFailover = "failover"
	// FaultEviction: a node given a memory limit with maxmemory-policy
	// volatile-ttl, filled by another tenant's cache entries until it has
	// evicted keys (lock keys, whose TTLs are the shortest, first), then
	// set back to noeviction and emptied of the cache.
	FaultEviction = "eviction"
	// FaultFlush: a node emptied in place by FLUSHALL, FLUSHDB, FLUSHALL
	// ASYNC or SWAPDB 0 1, half the time right before a new engine joins.
	FaultFlush = "flush"
	// FaultRepromote: the spare copies a node's data and is cut off; the
	// node, after more leases, is made the spare's replica (a full resync
	// to older data, its own marker with it) and promoted again.
	FaultRepromote = "repromote"
	// FaultFailback: a node's address moves to the spare (cut off from it
	// a moment before) while leases come and go, then back to the node,
	// a stale former primary that kept running with its own marker.
	FaultFailback = "failback"
	// FaultReload: SAVE, leases come and go, DEBUG RELOAD NOSAVE: the
	// same process rolled back to the snapshot.
	FaultReload = "reload"
	// FaultProxySwitch: behind a proxy that keeps client connections
	// (KeepProxy), a node's process changes under the engines: restarted
	// from a snapshot, or replaced by the spare, a lagging replica.
	FaultProxySwitch = "proxy switch"
	// FaultClockStep: a node restarted empty whose wall clock then steps
	// ahead by more than the quarantine, so that its uptime says it has
	// run for longer.
	FaultClockStep = "clock step"
	// FaultSentinelFailover: a Sentinel master set's replicas are cut off
	// from its master (their PSYNC denied) while leases come and go, then
	// Sentinel promotes one: the new master lacks those leases' keys, and
	// the old one is resynced from it. Only on the master sets of
	// Config.Topology.
	FaultSentinelFailover = "sentinel failover"
	// FaultACL: the node's user loses pub/sub, transactions and CONFIG
	// for a while (ACL SETUSER), as a managed node's may: releases grant
	// nobody there, acquires that went plain are asked again through the
	// script; half the time it also reloads in place meanwhile (acl).
	FaultACL = "acl"
)

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

// Config sets up a Run. Zero fields take the defaults in brackets.
type Config struct {
	// Nodes is how many redis-server processes Run starts on loopback
	// (free ports, temporary directories), breaks, and stops at the end.
	// [5, or len(Topology)]
	Nodes int
	// Topology gives the kind of each node, Standalone, Sentinel,
	// SentinelDefault or ClusterNode; nil: Nodes standalone nodes. Each
	// fault kind hits the nodes of its kind (hits); one that finds none is
	// not injected.
	Topology []string
	Duration time.Duration // [30s]
	// MinEach, with Faults: the run goes on past Duration, up to three
	// times it, until every chosen kind that has nodes to hit was injected
	// MinEach times (a loaded machine fails more injections, and a kind
	// tried once more at its round's end may still miss). 0: Duration
	// alone.
	MinEach   int
	Engines   int           // engines at the start [3]
	Workers   int           // goroutines per engine [8]
	Resources int           // [4]
	TTL       time.Duration // lease TTL [300ms]
	// Faults turns on fault injection, and holders that pause past their
	// validity.
	Faults bool
	// Kinds chooses the faults to inject, by name (see Kinds); empty but
	// not nil: none. [all]
	Kinds []string
	// RestartQuarantine is passed to every engine; < 0 turns it off.
	// [the engine's default: the TTL]
	RestartQuarantine time.Duration
	// UnsafeEviction is passed to every engine: nodes that may evict lock
	// keys grant all the same, to see the checker catch what follows.
	UnsafeEviction bool
	Logf           func(format string, args ...any) // progress; nil: quiet
	// Seed fixes the run's random choices: the faults' order and targets,
	// and each worker's resources and holds, so that two builds can be
	// run on one schedule (the timing still varies). 0: a random seed,
	// which Report.Seed gives.
	Seed uint64
}

// Report is what a Run saw.
type Report struct {
	Duration         time.Duration
	Seed             uint64         // Config.Seed, or the one drawn: the schedule, to run again
	Acquisitions     int            // leases held
	AcquireFailures  int            // acquisitions that gave up (retries exhausted or a node fault)
	Overlaps         []Overlap      // must be empty
	OverlapStale     StaleWrites    // what fencing made of the stale holders' writes in Overlaps
	TokenRegressions int            // must be 0
	Writes           int            // accepted by the fenced store
	StaleRejected    int            // writes the store refused thanks to fencing
	LatePauses       int            // holders that paused past their validity before writing
	Lost             int            // leases that ended with ErrLeaseLost
	EndedWithoutDone int            // leases whose Done was still open after their deadline; must be 0
	Blocked          int            // resources a dead process left held on a quorum past a TTL (FaultKilledAfterRelease); must be 0
	StaleResumes     int            // leases released (a quorum deleted their keys) that Resume took up again; must be 0
	Faults           map[string]int // injected, by kind
	AcquireP99       time.Duration  // all nodes up
	AcquireP99Down   time.Duration  // one node dead or paused

	// ClockJumps are the clock steps injected. ClockOverlaps are the
	// overlapping holdings they explain: the first holding's key sat on a
	// node when its clock stepped past the key's expiry, and the second
	// was acquired after the step began. Redlock promises nothing then, so
	// OK ignores them; ClockStale shows what fencing made of the stale
	// holders' writes in them.
	ClockJumps    []ClockJump
	ClockOverlaps []Overlap
	ClockStale    StaleWrites
	// ClockRegressions counts the tokens that did not increase because
	// the token before them came from a node clock ahead of the host's:
	// the fencing argument assumes node clocks differ by less than the
	// restart quarantine (see package lease). TokenRegressions excludes
	// them.
	ClockRegressions int

	// Lapses are the lapses of every key of a held lease that FaultHeal
	// injected: Redlock's timing broken for that lease, as a clock step
	// on every node would break it. LapseOverlaps are the overlapping
	// holdings they explain (see Lapse), which OK ignores: another owner
	// in the gap, until the lease's next extension finds it lost.
	Lapses        []Lapse
	LapseOverlaps []Overlap

	// Timeline lists the faults injected, in order, to read overlaps by.
	Timeline []Injected

	log *engineLog // the engines' node warnings, printed beside overlaps
}

// Injected is one fault: its kind, the node it hit (an index into
// the run's nodes; the first of them, for faults that hit several; -1 for
// none) and when it started and ended.
type Injected struct {
	Kind       string
	Node       int
	Start, End time.Time
}

// near returns the faults that were under way from a second before the
// first holding of o was acquired until the second was.
func (r Report) near(o Overlap) []Injected {
	var near []Injected
	for _, f := range r.Timeline {
		if !f.Start.After(o.Second.Acquired) && f.End.After(o.First.Acquired.Add(-time.Second)) {
			near = append(near, f)
		}
	}
	return near
}

// ClockJump is one step of the wall clock of node Node (an index into
// the run's nodes): it happened between From and To (when TIME read the new
// clock), to Ahead of the host's clock.
type ClockJump struct {
	Node     int
	From, To time.Time
	Ahead    time.Duration
	// Keys maps each lock key on the node just before the step to its
	// owner value: the keys the step may have expired early. The node's
	// writes are paused from before that read until after the step, so
	// none is missing.
	Keys map[string]string
}

// explains reports whether the jump cut the first holding of o short: its
// key sat on the node when the clock stepped, and the second holding was
// acquired after that.
func (j ClockJump) explains(o Overlap) bool {
	return j.Keys[lockKey(o.First.Resource)] == o.First.Value && o.First.End.After(j.From) &&
		o.Second.Acquired.After(j.From)
}

// lockKey is the key the engines of a Run lock resource under.
func lockKey(resource string) string { return node.LockKey(engine.DefaultKeyPrefix, resource) }

// faultPrefix is the KeyPrefix of the engines of faults that take
// resources of their own (heal, leave, a shard's lost lease): another
// deployment on the same nodes, whose longer leases never meet the
// workers' resources, so that their TTLs, recorded under their own
// prefix, do not lengthen the workers' quarantines (node's TTL record:
// deployments that share no resource need not wait for each other).
const faultPrefix = "redlease-fault:"

// faultKey is a fault's own resource's lock key.
func faultKey(resource string) string { return node.LockKey(faultPrefix, resource) }

// lockKeysScript answers every lock key of a node with its owner value,
// flat: key, value, key, value. One script, so the pairs are consistent.
const lockKeysScript = `#!lua flags=no-writes
local out = {}
for _, k in ipairs(redis.call('KEYS', ARGV[1])) do
  out[#out + 1] = k
  out[#out + 1] = redis.call('GET', k)
end
return out`

// lockKeys reads the lock keys of n and their owner values.
func lockKeys(ctx context.Context, n *redisproc.Node) (map[string]string, error) {
	v, err := n.Do(ctx, "EVAL", lockKeysScript, "0", lockKey("*"))
	if err != nil {
		return nil, err
	}
	flat, _ := v.([]any)
	keys := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		k, _ := flat[i].(string)
		val, _ := flat[i+1].(string)
		keys[k] = val
	}
	return keys, nil
}

// OK reports whether every safety property held. Overlaps that a clock
// jump explains do not count; a write that fencing let through after a
// newer holder's does, wherever it happened.
func (r Report) OK() bool {
	return len(r.Overlaps) == 0 && r.TokenRegressions == 0 && r.EndedWithoutDone == 0 && r.Blocked == 0 && r.StaleResumes == 0 &&
		r.OverlapStale.Failed == 0 && r.ClockStale.Failed == 0
}

// String reports the guarantees; ClockReport the clock jumps.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: %d acquisitions (%d gave up), %d overlaps, %d token regressions, %d writes, %d stale writes rejected (%d holders paused past their validity), %d lost leases, %d ended without Done; acquire p99 %v (all up), %v (one node down); faults %v",
		r.Duration.Round(time.Second), r.Acquisitions, r.AcquireFailures, len(r.Overlaps), r.TokenRegressions,
		r.Writes, r.StaleRejected, r.LatePauses, r.Lost, r.EndedWithoutDone,
		r.AcquireP99.Round(time.Microsecond), r.AcquireP99Down.Round(time.Microsecond), r.Faults)
	fmt.Fprintf(&b, "; %d keys blocked by a dead process; %d released leases resumed; seed %d", r.Blocked, r.StaleResumes, r.Seed)
	r.writeOverlaps(&b, r.Overlaps, true)
	if len(r.Overlaps) > 0 {
		fmt.Fprintf(&b, "\n  stale holders' writes in these overlaps: %v", r.OverlapStale)
	}
	return b.String()
}

// ClockReport tells the clock jumps apart from the guarantees: the
// overlaps they explain and what fencing did with the stale writes.
func (r Report) ClockReport() string {
	var b strings.Builder
	fmt.Fprintf(&b, "clock jumps (outside Redlock's assumptions, not violations): %d steps of a node's clock by more than a TTL; %d overlaps they explain; stale holders' writes in them: %v; %d token regressions after a token from a clock ahead",
		len(r.ClockJumps), len(r.ClockOverlaps), r.ClockStale, r.ClockRegressions)
	r.writeOverlaps(&b, r.ClockOverlaps, false)
	fmt.Fprintf(&b, "\nlapses of every key of a lease (outside them too): %d; %d overlaps they explain (another owner in the gap, before the lease learned it was lost)",
		len(r.Lapses), len(r.LapseOverlaps))
	return b.String()
}

// writeOverlaps writes the first overlaps, each with the faults around it
// (times from the second holder's acquisition) and, with logs, what the
// two holders' engines logged of their nodes meanwhile.
func (r Report) writeOverlaps(b *strings.Builder, overlaps []Overlap, logs bool) {
	for i, o := range overlaps {
		if i == 5 {
			fmt.Fprintf(b, "\n  ... %d more", len(overlaps)-5)
			break
		}
		fmt.Fprintf(b, "\n  overlap: %v", o)
		for _, f := range r.near(o) {
			where := ""
			if f.Node >= 0 {
				where = fmt.Sprintf(" on node %d", f.Node)
			}
			fmt.Fprintf(b, "\n    %s%s from %v to %v", f.Kind, where,
				f.Start.Sub(o.Second.Acquired).Round(time.Millisecond), f.End.Sub(o.Second.Acquired).Round(time.Millisecond))
		}
		if !logs || r.log == nil {
			continue
		}
		for _, l := range r.log.between(o.First.Acquired.Add(-time.Second), o.Second.Acquired.Add(100*time.Millisecond),
			o.First.Resource, engineOf(o.First.Holder), engineOf(o.Second.Holder)) {
			fmt.Fprintf(b, "\n    %v %s: %s", l.At.Sub(o.Second.Acquired).Round(time.Millisecond), l.Engine, l.Text)
		}
	}
}

// Run contends, records, breaks things, and reports. It returns an error
// only when it could not run; safety violations are in the Report.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg = withDefaults(cfg)
	for _, k := range cfg.Kinds {
		if !slices.Contains(Kinds(), k) {
			return Report{}, fmt.Errorf("safety: unknown fault kind %q; the kinds are %q", k, Kinds())
		}
	}
	spare, err := redisproc.StartNodes(1)
	if err != nil {
		return Report{}, fmt.Errorf("safety: %w", err)
	}
	defer spare.Close()
	r := &run{cfg: cfg, cluster: &redisproc.Cluster{}, spare: spare, faults: map[string]int{},
		proxies: make([]*Proxy, cfg.Nodes), addrs: make([]string, cfg.Nodes), sets: make([]*redisproc.SentinelSet, cfg.Nodes),
		clusters:  make([]*redisproc.RedisCluster, cfg.Nodes),
		restarted: make([]time.Time, cfg.Nodes)}
	defer r.cluster.Close()
	for i, kind := range cfg.Topology {
		switch kind {
		case Standalone:
			c, err := redisproc.StartNodes(1)
			if err != nil {
				return Report{}, fmt.Errorf("safety: %w", err)
			}
			p, err := NewProxy(c.Nodes[0].Addr())
			if err != nil {
				c.Close()
				return Report{}, err
			}
			defer p.Close()
			r.cluster.Nodes = append(r.cluster.Nodes, c.Nodes[0])
			r.proxies[i], r.addrs[i] = p, p.Addr()
		case Sentinel, SentinelDefault:
			periods := redisproc.FastSentinel
			if kind == SentinelDefault {
				periods = redisproc.DefaultSentinel
			}
			set, err := redisproc.StartSentinelSetWith(1, 3, periods)
			if err != nil {
				return Report{}, fmt.Errorf("safety: %w", err)
			}
			defer set.Close()
			r.cluster.Nodes = append(r.cluster.Nodes, set.Servers[0]) // its master, while it is
			r.sets[i], r.addrs[i] = set, node.Target{MasterSet: set.Name, Sentinels: set.SentinelAddrs()}.String()
		case ClusterNode:
			c, err := redisproc.StartRedisCluster(clusterMasters, 1)
			if err != nil {
				return Report{}, fmt.Errorf("safety: %w", err)
			}
			defer c.Close()
			r.cluster.Nodes = append(r.cluster.Nodes, c.Servers[0]) // a master, at first
			r.clusters[i], r.addrs[i] = c, node.Target{Cluster: c.Addrs()}.String()
		default:
			return Report{}, fmt.Errorf("safety: node kind %q: the kinds are %q, %q, %q and %q", kind, Standalone, Sentinel, SentinelDefault, ClusterNode)
		}
	}
	r.log = newEngineLog(r.addrs)
	defer r.closeEngines()
	var engines []*engine.Engine
	for ei := range cfg.Engines {
		e, err := r.newEngine(fmt.Sprintf("e%d", ei), workHealth)
		if err != nil {
			return Report{}, err
		}
		engines = append(engines, e)
	}
	if cfg.Faults && cfg.kind(FaultIdleEngine) {
		// Met while the nodes are fresh: each keeps the epoch restore
		// pending for its first batch, however long it idles.
		for range idlePool {
			if err := r.addIdle(); err != nil {
				return Report{}, err
			}
		}
	}

	limit := cfg.Duration
	if cfg.MinEach > 0 && cfg.Faults {
		limit *= 3
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	start := time.Now()
	if limit > cfg.Duration {
		r.wg.Go(func() { r.endWhenInjected(ctx, cancel) })
	}
	for ei, e := range engines {
		for w := range cfg.Workers {
			rng := r.rand(startStreams + uint64(ei*cfg.Workers+w))
			r.wg.Go(func() { r.worker(ctx, e, fmt.Sprintf("e%d/w%d", ei, w), rng) })
		}
	}
	if cfg.Faults {
		r.wg.Go(func() { r.inject(ctx) })
	}
	if cfg.Logf != nil {
		r.wg.Go(func() { r.progress(ctx, start) })
	}
	r.wg.Wait()

	rep := Report{Duration: time.Since(start), Seed: cfg.Seed, Faults: r.faults, Lost: int(r.lost.Load()),
		Acquisitions: r.rec.Count(), AcquireFailures: int(r.failures.Load()),
		LatePauses: int(r.pauses.Load()), EndedWithoutDone: int(r.noDone.Load()), Blocked: int(r.blocked.Load()),
		StaleResumes: int(r.staleResumes.Load()),
		ClockJumps:   r.jumps, Lapses: r.lapses,
		Timeline: r.timeline, log: r.log}
	overlaps, regressions := r.rec.Check()
	rep.Overlaps, rep.ClockOverlaps = split(overlaps, r.jumps)
	rep.Overlaps, rep.LapseOverlaps = split(rep.Overlaps, r.lapses)
	for _, g := range regressions {
		if g.aheadOfHost() {
			rep.ClockRegressions++
		} else {
			rep.TokenRegressions++
		}
	}
	rep.OverlapStale, rep.ClockStale = Stale(rep.Overlaps), Stale(rep.ClockOverlaps)
	rep.Writes, rep.StaleRejected = r.store.Counts()
	rep.AcquireP99, rep.AcquireP99Down = p99(r.latUp), p99(r.latDown)
	return rep, nil
}

// explainer is a broken timing assumption that explains some overlaps:
// a ClockJump, a Lapse.
type explainer interface{ explains(o Overlap) bool }

// split sets apart the overlaps that one of why explains.
func split[E explainer](overlaps []Overlap, why []E) (ours, explained []Overlap) {
	for _, o := range overlaps {
		if slices.ContainsFunc(why, func(e E) bool { return e.explains(o) }) {
			explained = append(explained, o)
		} else {
			ours = append(ours, o)
		}
	}
	return ours, explained
}

func withDefaults(c Config) Config {
	if c.Nodes == 0 && c.Topology == nil {
		c.Nodes = 5
	}
	if c.Topology == nil {
		c.Topology = slices.Repeat([]string{Standalone}, c.Nodes)
	}
	c.Nodes = len(c.Topology)
	if c.Duration == 0 {
		c.Duration = 30 * time.Second
	}
	if c.Engines == 0 {
		c.Engines = 3
	}
	if c.Workers == 0 {
		c.Workers = 8
	}
	if c.Resources == 0 {
		c.Resources = 4
	}
	if c.TTL == 0 {
		c.TTL = 300 * time.Millisecond
	}
	if c.Kinds == nil {
		c.Kinds = Kinds()
	}
	for c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	return c
}

// rand is the random source of one of the run's streams of choices: the
// injector's (0), a starting worker's, a joining engine's worker's.
func (r *run) rand(stream uint64) *rand.Rand { return rand.New(rand.NewPCG(r.cfg.Seed, stream)) }

// The streams of workers: those of the starting engines, then those of
// the engines that join, apart.
const (
	startStreams  = 1
	joinStreams   = 1 << 32
	laggardStream = 1 << 48 // plus the failovers so far
)

func (c *Config) kind(k string) bool { return slices.Contains(c.Kinds, k) }

// quarantine is how long after a restart the engines keep a node out.
func (c *Config) quarantine() time.Duration {
	switch {
	case c.RestartQuarantine < 0:
		return 0
	case c.RestartQuarantine > 0:
		return c.RestartQuarantine
	}
	return c.TTL // the engine's default: MaxTTL, which is the TTL here
}

const (
	// workHealth is the health interval of the engines that work: they
	// notice a restart within a third of the default TTL.
	workHealth = 100 * time.Millisecond
	// idlePool is how many idle engines wait for an idle-engine fault.
	idlePool = 4
	// maxJoined bounds the engines that joined mid-run; the oldest retires.
	maxJoined = 2
	// laggardHealth is the health interval of sentinelFailover's laggard:
	// longer than Sentinel takes to demote a former master (about 1s with
	// FastSentinel's periods; up to 18s with DefaultSentinel's, hence
	// laggardHealthDefault on a topology with a SentinelDefault set).
	laggardHealth        = 2 * time.Second
	laggardHealthDefault = 20 * time.Second
)

type run struct {
	cfg     Config
	cluster *redisproc.Cluster
	spare   *redisproc.Cluster       // one node, the next failover's replica
	proxies []*Proxy                 // nil for a master set
	sets    []*redisproc.SentinelSet // the master sets; nil for a standalone node
	// clusters are the Redis Clusters; nil for a node of another kind.
	clusters []*redisproc.RedisCluster
	addrs    []string // the proxies' and master sets', which the engines dial
	rec      Recorder
	store    Store
	log      *engineLog
	idles    int            // idle engines made, to name them
	wg       sync.WaitGroup // workers, injector, progress, retiring engines

	nodesDown    atomic.Int32 // nodes dead or paused right now
	failures     atomic.Int64
	lost         atomic.Int64
	pauses       atomic.Int64
	noDone       atomic.Int64
	blocked      atomic.Int64
	staleResumes atomic.Int64

	// The injector's own: Run sets them up before the injector starts
	// and reads them after it ended; meanwhile only the injector does.
	restarted []time.Time // each node's last restart
	idle      []*idleEngine
	joined    []*joinedEngine
	joins     int
	jumps     []ClockJump
	lapses    []Lapse
	leavers   []*engine.Engine // FaultQuarantinedLeave's (grant_faults.go)
	healers   []*engine.Engine // FaultHeal's (heal_faults.go)
	laggard   *engine.Engine   // FaultSentinelFailover's and FaultShardFailover's
	// shardEngines are loseLease's (cluster_faults.go).
	shardEngines []*engine.Engine
	timeline     []Injected

	mu        sync.Mutex
	engines   []*engine.Engine // every engine not yet closed
	released  [64]staleLease   // the last unfenced leases released (resumeStale), a ring
	nreleased int
	faults    map[string]int
	latUp     []time.Duration
	latDown   []time.Duration
}

// idleEngine is an engine that acquires nothing until its fault comes.
type idleEngine struct {
	name  string
	e     *engine.Engine
	since time.Time
}

// joinedEngine is an engine created mid-run, with workers of its own.
type joinedEngine struct {
	e      *engine.Engine
	cancel context.CancelFunc
	work   sync.WaitGroup
}

// newEngine creates an engine named name (the prefix of its holders'
// names) over the proxies, closed by closeEngines unless closed before.
func (r *run) newEngine(name string, health time.Duration) (*engine.Engine, error) {
	return r.startEngine(name, engine.Config{Nodes: r.addrs, TTL: r.cfg.TTL, HealthInterval: health})
}

// startEngine makes an engine of cfg with the run's quarantine, eviction rule,
// attempts and logger, and keeps it for the run's end.
func (r *run) startEngine(name string, cfg engine.Config) (*engine.Engine, error) {
	cfg.RestartQuarantine, cfg.UnsafeEviction = r.cfg.RestartQuarantine, r.cfg.UnsafeEviction
	cfg.RetryAttempts, cfg.Logger = 8, r.log.logger(name)
	e, err := engine.New(cfg)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.engines = append(r.engines, e)
	r.mu.Unlock()
	return e, nil
}

func (r *run) closeEngine(e *engine.Engine) {
	r.mu.Lock()
	r.engines = slices.DeleteFunc(r.engines, func(x *engine.Engine) bool { return x == e })
	r.mu.Unlock()
	_ = e.Close()
}

func (r *run) closeEngines() {
	r.mu.Lock()
	engines := r.engines
	r.engines = nil
	r.mu.Unlock()
	for _, e := range engines {
		_ = e.Close()
	}
}

// addIdle adds an engine to the idle pool. It probes like a service at
// rest would (the engine's default interval), not like the workers.
func (r *run) addIdle() error {
	r.idles++
	name := fmt.Sprintf("idle%d", r.idles)
	e, err := r.newEngine(name, 0)
	if err != nil {
		return err
	}
	r.idle = append(r.idle, &idleEngine{name: name, e: e, since: time.Now()})
	return nil
}

// worker takes leases on random resources until ctx ends.
func (r *run) worker(ctx context.Context, e *engine.Engine, name string, rng *rand.Rand) {
	for ctx.Err() == nil {
		if rng.IntN(15) == 0 {
			r.resumeStale(ctx, e, name, rng)
			continue
		}
		if err := r.hold(ctx, e, name, rng); err != nil && ctx.Err() == nil {
			r.failures.Add(1)
		}
	}
}

// workerRetry is the workers' schedule: quick, capped, bounded by the engine's
// attempts.
var workerRetry = engine.WithRetry(func() backoff.BackOff {
	return backoff.NewExponentialBackOff(backoff.WithInitialInterval(time.Millisecond),
		backoff.WithMaxInterval(20*time.Millisecond), backoff.WithMaxElapsedTime(0))
})

// hold takes a lease on a random resource and acts as its holder: it
// works a little, writes to the fenced store with its token (on the even
// resources; the odd ones' leases are not fenced, so that releases grant
// them, and do not write) and releases.
// One in twenty is a long holder: auto-extended for up to 3 TTLs, it works
// for 1 to 2 and may be lost meanwhile; half of them change their TTL at
// once (Extend with ExtendTTL: half or twice the run's). Half of the others take a lease
// of half the TTL, so that leases of two TTLs share the nodes' batches,
// and one in ten holds for its whole validity: a key that expires before
// its lease's Until (a node that sent one lease's TTL for another's, say)
// lets a second holder in while the first still holds. With faults on,
// one in 30 pauses past its validity before writing, as a holder stopped
// by GC or a frozen VM would. It returns Acquire's error.
func (r *run) hold(ctx context.Context, e *engine.Engine, name string, rng *rand.Rand) error {
	res := rng.IntN(r.cfg.Resources)
	resource := fmt.Sprintf("res-%d", res)
	long := rng.IntN(20) == 0
	// The odd resources' holders are not fenced: only they may take a
	// release's grant (a grant brings no token), and they do not write.
	fenced := res%2 == 0
	opts := []engine.Option{workerRetry}
	if fenced {
		opts = append(opts, engine.WithFencing())
	}
	work := time.Duration(rng.IntN(3000)) * time.Microsecond
	switch {
	case long:
		opts = append(opts, engine.WithAutoExtend(3*r.cfg.TTL))
		work = r.cfg.TTL + time.Duration(rng.Int64N(int64(r.cfg.TTL)))
	case rng.IntN(2) == 0:
		opts = append(opts, engine.WithTTL(r.cfg.TTL/2))
	}
	whole := !long && rng.IntN(10) == 0
	down := r.nodesDown.Load() > 0
	start := time.Now()
	var l *engine.Lease
	var err error
	if !fenced && !long && rng.IntN(3) == 0 {
		l, err = tryAcquire(ctx, e, resource, rng, opts)
	} else {
		l, err = e.Acquire(ctx, resource, opts...)
	}
	if err != nil || l == nil { // nil, nil: a TryAcquire refused until it gave up
		return err
	}
	acquired := time.Now()
	r.latency(acquired.Sub(start), down)
	h := r.rec.Held(resource, name, l.Value(), acquired, l.Until(), l.Token())
	closed := doneAt(l)
	if whole {
		work = time.Until(l.Until()) // Done closes first, a margin before
	}

	if r.cfg.Faults && !long && rng.IntN(30) == 0 {
		r.pauses.Add(1)
		time.Sleep(time.Until(l.Until()) + time.Duration(rng.IntN(50))*time.Millisecond)
		if fenced {
			r.write(h, l) // a newer holder may have written: refused
		}
		r.checkDone(h, l, closed)
		return nil
	}
	if long && rng.IntN(2) == 0 {
		// Its auto-extension goes on with another TTL from now: half or
		// twice the run's (within the 3-TTL hold), as a holder whose work
		// turns out shorter or longer asks.
		ttl := r.cfg.TTL / 2
		if rng.IntN(2) == 0 {
			ttl = 2 * r.cfg.TTL
		}
		_ = l.Extend(ctx, engine.ExtendTTL(ttl))
	}
	select {
	case <-time.After(work):
	case <-l.Done():
	}
	select {
	case <-l.Done(): // lost (or expired) while working: stop, do not write
		r.rec.Ended(h, time.Now(), l.Until())
	default:
		if fenced {
			r.write(h, l)
		}
		r.rec.Ended(h, time.Now(), l.Until())
		if err := l.Release(context.Background()); err == nil && !fenced {
			r.remember(resource, l.Value())
		}
	}
	r.checkDone(h, l, closed)
	return nil
}

// staleLease is a lease that was released: its resource and value.
type staleLease struct{ resource, value string }

// remember keeps a lease released a moment ago, for resumeStale.
func (r *run) remember(resource, value string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.released[r.nreleased%len(r.released)] = staleLease{resource, value}
	r.nreleased++
}

// resumeStale takes up, with Resume, a lease released a moment ago. Its
// keys are gone from so many nodes that no quorum holds them (Release
// returned nil), so Resume must
// refuse it, unless nodes answer from a dataset that lost the release (a
// reload, a snapshot, a stale replica) and its check counts them: one
// that succeeds is the bug (Report.StaleResumes), recorded as a holding
// too, for the overlap it may make.
func (r *run) resumeStale(ctx context.Context, e *engine.Engine, name string, rng *rand.Rand) {
	r.mu.Lock()
	n := min(r.nreleased, len(r.released))
	var s staleLease
	if n > 0 {
		s = r.released[rng.IntN(n)]
	}
	r.mu.Unlock()
	if n == 0 {
		return
	}
	l, err := e.Resume(ctx, engine.Handle{Resource: s.resource, Value: s.value})
	if err != nil {
		return
	}
	r.staleResumes.Add(1)
	r.log.add(logLine{At: time.Now(), Engine: name, Resource: s.resource, Text: "Resume took up a released lease: " + s.value})
	h := r.rec.Held(s.resource, name+"/resumed", s.value, time.Now(), l.Until(), l.Token())
	time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
	r.rec.Ended(h, time.Now(), l.Until())
	_ = l.Release(context.Background())
}

// tryAcquire takes the lease with TryAcquire, again after a refusal, for
// up to two seconds: a round that neither queues nor fences, which goes to
// the nodes as a plain SET (see package node, plain.go), so that every
// dataset fault meets plain acquires too. Not acquired until then, it gives
// up with neither a lease nor an error: refusals are what a TryAcquire of
// a contended resource gets, not failures.
func tryAcquire(ctx context.Context, e *engine.Engine, resource string, rng *rand.Rand, opts []engine.Option) (*engine.Lease, error) {
	giveUp := time.Now().Add(2 * time.Second)
	for {
		l, err := e.TryAcquire(ctx, resource, opts...)
		var ae *engine.AcquireError
		switch {
		case err == nil || ctx.Err() != nil:
			return l, err
		case !errors.As(err, &ae):
			return nil, err
		case time.Now().After(giveUp):
			return nil, nil
		}
		// Not a spin: the checker's machine runs the nodes and the faults too.
		time.Sleep(time.Duration(10+rng.IntN(20)) * time.Millisecond)
	}
}

func (r *run) write(h *Holding, l *engine.Lease) {
	ok, at := r.store.write(l.Resource(), l.Token())
	r.rec.Wrote(h, at, ok)
}

// doneAt sends the time l's Done closed.
func doneAt(l *engine.Lease) <-chan time.Time {
	at := make(chan time.Time, 1)
	go func() {
		<-l.Done()
		at <- time.Now()
	}()
	return at
}

// checkDone counts a lease whose Done closed later than its deadline
// (plus scheduling slack), or not at all, and a lost one. closed is
// doneAt's: when Done closed, however late the holder looks.
func (r *run) checkDone(h *Holding, l *engine.Lease, closed <-chan time.Time) {
	var at time.Time
	select {
	case at = <-closed:
	case <-time.After(time.Until(l.Until()) + 5*time.Second):
		at = <-closed
	}
	if late := at.Sub(l.Until()); late > 200*time.Millisecond {
		r.noDone.Add(1)
		if r.cfg.Logf != nil {
			r.cfg.Logf("safety: %s's lease on %q: Done closed %v after Until (%v)", h.Holder, h.Resource,
				late.Round(time.Millisecond), l.Err())
		}
	}
	if errors.Is(l.Err(), engine.ErrLeaseLost) {
		r.lost.Add(1)
	}
}

func (r *run) latency(d time.Duration, down bool) {
	r.mu.Lock()
	if down {
		r.latDown = append(r.latDown, d)
	} else {
		r.latUp = append(r.latUp, d)
	}
	r.mu.Unlock()
}

// endWhenInjected ends the run (cancel) once Duration has passed and
// every chosen kind that has nodes to hit was injected MinEach times.
func (r *run) endWhenInjected(ctx context.Context, cancel context.CancelFunc) {
	if !sleep(ctx, r.cfg.Duration) {
		return
	}
	for {
		r.mu.Lock()
		done := true
		for _, k := range r.cfg.Kinds {
			if len(r.nodesFor(k)) > 0 && r.faults[k] < r.cfg.MinEach {
				done = false
			}
		}
		r.mu.Unlock()
		if done {
			cancel()
			return
		}
		if !sleep(ctx, 100*time.Millisecond) {
			return
		}
	}
}

// inject breaks nodes, one fault at a time: each round injects every
// chosen kind once, in random order (kill+restart, pause and slow link
// twice: the registry's perRound), with a short calm between faults. A fault that could not be
// injected (its own engine not connected in time, its lease refused by
// what the fault before it left) is tried once more at the end of the
// round: on a loaded machine a bounded run would otherwise miss kinds.
func (r *run) inject(ctx context.Context) {
	defer r.retireAll()
	rng := r.rand(0)
	var round []string
	for _, k := range r.cfg.Kinds {
		f, _ := kindNamed(k)
		for range max(f.perRound, 1) {
			round = append(round, k)
		}
	}
	if len(round) == 0 {
		return
	}
	for ctx.Err() == nil {
		rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		n := len(round)
		for i := 0; i < len(round); i++ {
			kind := round[i]
			if !sleep(ctx, time.Duration(100+rng.IntN(200))*time.Millisecond) {
				return
			}
			on := r.nodesFor(kind)
			if len(on) == 0 {
				continue
			}
			k := on[rng.IntN(len(on))]
			start := time.Now()
			err := r.fault(ctx, rng, kind, k)
			f := Injected{Kind: kind, Node: k, Start: start, End: time.Now()}
			if kind == FaultNewEngine {
				f.Node = -1 // hits no node
			}
			r.timeline = append(r.timeline, f)
			if err != nil {
				if r.cfg.Logf != nil && ctx.Err() == nil {
					r.cfg.Logf("safety: %s fault not injected: %v", kind, err)
				}
				if i < n {
					round = append(round, kind) // once more, at the end
				}
				continue
			}
			r.mu.Lock()
			r.faults[kind]++
			r.mu.Unlock()
		}
		round = round[:n]
	}
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

// sleep waits d unless ctx ends first; false if it did.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// fault injects one fault of kind on node k (and the next ones, for
// faults that hit several), by its injector in the registry, or says why
// it could not.
func (r *run) fault(ctx context.Context, rng *rand.Rand, kind string, k int) error {
	f, ok := kindNamed(kind)
	if !ok {
		return fmt.Errorf("safety: no fault kind %q", kind)
	}
	hold := time.Duration(150+rng.IntN(450)) * time.Millisecond
	return f.inject(r, ctx, rng, k, hold)
}

// serverOf is the server of node i that holds key: node i's, or, for a
// cluster, the master that serves key's slot now.
func (r *run) serverOf(ctx context.Context, i int, key string) (*redisproc.Node, error) {
	if c := r.clusterOf(i); c != nil {
		return c.MasterOf(ctx, hashslot.Of(key))
	}
	return r.cluster.Nodes[i], nil
}

// acl takes pub/sub, transactions and CONFIG from node k's default user
// for hold (FaultACL). Half the time, once the engines' probes have met
// the denial, the node also reloads in place (as reload does): with
// CONFIG denied the engines cannot read whether DEBUG runs, and must
// count the node's losses in every batch as if it did.
func (r *run) acl(ctx context.Context, rng *rand.Rand, k int, hold time.Duration) (err error) {
	n := r.cluster.Nodes[k]
	if _, err := n.Do(ctx, "ACL", "SETUSER", "default", "-@pubsub", "-@transaction", "-config"); err != nil {
		return err
	}
	defer func() {
		_, restored := n.Do(context.WithoutCancel(ctx), "ACL", "SETUSER", "default", "+@all")
		err = errors.Join(err, restored)
	}()
	if rng.IntN(2) == 0 {
		sleep(ctx, hold)
		return nil
	}
	sleep(ctx, engine.DefaultHealthInterval+workHealth) // every engine probed it
	return r.reload(ctx, k, hold)
}

// sentinelFailover fails master set k over to its replica, which misses
// the writes of hold before (FaultSentinelFailover). The working engines
// keep acquiring and releasing throughout, and so does a laggard: an
// engine that probes its nodes only every laggardHealth, so that it keeps
// acquiring on the former master until Sentinel demotes it, while the
// others have met the new one. The old master becomes the replica.
func (r *run) sentinelFailover(ctx context.Context, k int, hold time.Duration) error {
	set := r.sets[k]
	stop, err := r.lag(ctx)
	if err != nil {
		return err
	}
	defer stop()
	r.nodesDown.Add(1) // quarantined once the engines meet the new master
	defer r.nodesDown.Add(-1)
	next, err := set.FailoverLosingWrites(ctx, func(*redisproc.Node) error {
		sleep(ctx, hold) // leases come and go on the master alone
		return nil
	})
	if next != nil {
		r.cluster.Nodes[k] = next
	}
	r.restarted[k] = time.Now()
	return err
}

// lag has a laggard work until stop: an engine that probes its nodes
// only every laggardHealth (and asks a cluster for its view as seldom),
// so that it keeps acquiring on a former master until it is demoted,
// while the others have met the new one.
func (r *run) lag(ctx context.Context) (stop func(), err error) {
	if r.laggard == nil {
		health := laggardHealth
		if slices.Contains(r.cfg.Topology, SentinelDefault) {
			health = laggardHealthDefault
		}
		e, err := r.startEngine("laggard", engine.Config{Nodes: r.addrs, TTL: r.cfg.TTL, HealthInterval: health})
		if err != nil {
			return nil, err
		}
		r.laggard = e
	}
	lctx, cancel := context.WithCancel(ctx)
	var lag sync.WaitGroup
	rng := r.rand(laggardStream + uint64(len(r.timeline))) // the injector's alone
	lag.Go(func() {
		for lctx.Err() == nil {
			if err := r.hold(lctx, r.laggard, "laggard", rng); err != nil {
				sleep(lctx, 10*time.Millisecond)
			}
		}
	})
	return func() {
		cancel()
		lag.Wait()
	}, nil
}

// evict has node n evict keys for a while (FaultEviction). The working
// engines probe the node before it can evict anything (it has a memory
// limit and a policy that evicts, but far above its use), and every engine
// (the idle ones at the default interval) after it evicted the last: that
// a node set to evict and filled within one health interval grants in
// between is a known limit, not what this tries.
func (r *run) evict(ctx context.Context, n *redisproc.Node, hold time.Duration) error {
	config := func(args ...string) error {
		for i := 0; i < len(args); i += 2 {
			if _, err := n.Do(ctx, "CONFIG", "SET", args[i], args[i+1]); err != nil {
				return err
			}
		}
		return nil
	}
	info := func(section, field string) (int, error) {
		v, err := n.Info(ctx, section, field)
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(v)
	}
	// limit sets the memory limit a little above what the node uses now.
	limit := func() error {
		used, err := info("memory", "used_memory")
		if err != nil {
			return err
		}
		return config("maxmemory", strconv.Itoa(used+256<<10))
	}
	err := func() error {
		// First a limit far above the node's use: the engines see a node
		// that may evict (and refuse it) before it can evict anything, as
		// the node's own memory may grow by 256KiB within one probe.
		if err := config("maxmemory", strconv.Itoa(1<<30), "maxmemory-policy", "volatile-ttl"); err != nil {
			return err
		}
		if !sleep(ctx, 2*workHealth) {
			return ctx.Err()
		}
		if err := limit(); err != nil {
			return err
		}
		before, err := info("stats", "evicted_keys")
		if err != nil {
			return err
		}
		entry := strings.Repeat("x", 1000)
		cache := []string{"UNLINK"}
		ooms := 0
		for evicted := before; evicted < before+100 && len(cache) <= 5000; {
			key := "cache:" + strconv.Itoa(len(cache))
			_, err := n.Do(ctx, "SET", key, entry, "EX", "3600")
			if err != nil && strings.HasPrefix(err.Error(), "OOM") && ooms < 20 {
				// Memory the node cannot evict (the engines' buffers,
				// under load) outgrew the headroom, and nothing with a TTL
				// is left to evict: raise the limit and fill on.
				ooms++
				if err := limit(); err != nil {
					return err
				}
				continue
			}
			if err != nil {
				return err
			}
			if cache = append(cache, key); len(cache)%50 == 0 {
				if evicted, err = info("stats", "evicted_keys"); err != nil {
					return err
				}
			}
		}
		sleep(ctx, hold)
		_, err = n.Do(ctx, cache...)
		return err
	}()
	if back := config("maxmemory-policy", "noeviction", "maxmemory", "0"); err == nil {
		err = back
	}
	sleep(ctx, engine.DefaultHealthInterval+workHealth)
	return err
}

// failover replaces node k by the spare (FaultFailover). The spare has run
// since the previous failover (or the run's start), longer than a
// quarantine: only its having been a replica tells it from a process
// trusted at once.
func (r *run) failover(ctx context.Context, k int, hold time.Duration) error {
	n, s := r.cluster.Nodes[k], r.spare.Nodes[0]
	if _, err := n.Do(ctx, "CONFIG", "SET", "repl-diskless-sync-delay", "0"); err != nil {
		return err
	}
	_, port, _ := strings.Cut(n.Addr(), ":")
	if _, err := s.Do(ctx, "REPLICAOF", "127.0.0.1", port); err != nil {
		return err
	}
	for synced := time.Now().Add(5 * time.Second); ; {
		if link, _ := s.Info(ctx, "replication", "master_link_status"); link == "up" {
			break
		}
		if time.Now().After(synced) {
			return errors.New("the spare did not sync within 5s")
		}
		if !sleep(ctx, 10*time.Millisecond) {
			return ctx.Err()
		}
	}
	sleep(ctx, hold) // leases come and go, and reach the spare
	if _, err := s.Do(ctx, "REPLICAOF", "NO", "ONE"); err != nil {
		return err
	}
	sleep(ctx, hold/2) // leases come and go on the node alone
	r.nodesDown.Add(1)
	defer r.nodesDown.Add(-1)
	_ = n.Kill()
	r.proxies[k].Failover(s.Addr())
	r.cluster.Nodes[k], r.spare.Nodes[0] = s, n
	r.restarted[k] = time.Now()
	// The next spare: the node's process, empty, on the host's clock.
	if n.ClockAhead() != 0 {
		if err := n.SetClockAhead(0); err != nil {
			return err
		}
	}
	return n.Restart()
}

// restart runs a restart of node k and notes when it ended.
func (r *run) restart(k int, restart func() error) error {
	err := restart()
	r.restarted[k] = time.Now()
	return err
}

// idleAcquire restarts node k empty and at once has the engine that idled
// longest acquire, hold and release a random resource. A fresh engine
// takes its place in the pool.
func (r *run) idleAcquire(ctx context.Context, rng *rand.Rand, k int) error {
	if len(r.idle) == 0 {
		return errors.New("no idle engine left") // addIdle failed
	}
	idle := r.idle[0]
	r.idle = r.idle[1:]
	defer func() {
		r.closeEngine(idle.e)
		if ctx.Err() == nil {
			if err := r.addIdle(); err != nil && r.cfg.Logf != nil {
				r.cfg.Logf("safety: creating an idle engine: %v", err)
			}
		}
	}()
	// Idle for longer than the quarantine.
	if !sleep(ctx, time.Until(idle.since.Add(r.cfg.quarantine()+time.Millisecond))) {
		return ctx.Err()
	}
	n := r.cluster.Nodes[k]
	r.nodesDown.Add(1)
	_ = n.Kill()
	err := r.restart(k, n.Restart)
	r.nodesDown.Add(-1)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, 2*r.cfg.TTL)
	defer cancel()
	_ = r.hold(actx, idle.e, fmt.Sprintf("%s@%v", idle.name, time.Since(idle.since).Round(time.Millisecond)), rng)
	return nil
}

// join creates an engine whose workers contend until the run ends or the
// engine retires, the oldest joined engine retiring beyond maxJoined.
func (r *run) join(ctx context.Context) error {
	e, err := r.newEngine(fmt.Sprintf("new%d", r.joins+1), workHealth)
	if err != nil {
		return err
	}
	jctx, cancel := context.WithCancel(ctx)
	j := &joinedEngine{e: e, cancel: cancel}
	r.joins++
	for w := range max(1, r.cfg.Workers/2) {
		name := fmt.Sprintf("new%d/w%d", r.joins, w)
		rng := r.rand(joinStreams + uint64(r.joins*r.cfg.Workers+w))
		j.work.Go(func() { r.worker(jctx, e, name, rng) })
	}
	r.joined = append(r.joined, j)
	if len(r.joined) > maxJoined {
		r.retire(r.joined[0])
		r.joined = r.joined[1:]
	}
	return nil
}

// retire stops a joined engine's workers and then closes it, without
// holding up the injector.
func (r *run) retire(j *joinedEngine) {
	j.cancel()
	r.wg.Go(func() {
		j.work.Wait()
		r.closeEngine(j.e)
	})
}

func (r *run) retireAll() {
	for _, j := range r.joined {
		r.retire(j)
	}
	r.joined = nil
}

// clockJump steps node k's wall clock ahead by 2 to 4 TTLs while it serves
// leases, so keys on it expire early. A node still on the host's clock is
// first restarted with its clock ahead (empty, like any restart); the step
// waits until every engine has stopped quarantining the node.
func (r *run) clockJump(ctx context.Context, rng *rand.Rand, k int) error {
	n := r.cluster.Nodes[k]
	jump := time.Duration(2+rng.IntN(3)) * r.cfg.TTL
	if n.ClockAhead() == 0 {
		r.nodesDown.Add(1)
		err := r.restart(k, func() error { return n.RestartClockAhead(jump) })
		r.nodesDown.Add(-1)
		if err != nil {
			return err
		}
	}
	serving := r.restarted[k].Add(r.cfg.quarantine() + time.Duration(100+rng.IntN(200))*time.Millisecond)
	if !sleep(ctx, time.Until(serving)) {
		return ctx.Err()
	}
	// No key is granted between the read of the keys and the step: the
	// node's writes wait (CLIENT PAUSE WRITE) until the clock stepped, so
	// Keys is every key the step may expire early. (Without the pause, a
	// holder granted in that window, some milliseconds, was an overlap no
	// jump explained: 5 in a 30 min run on 3 nodes.)
	if _, err := n.Do(ctx, "CLIENT", "PAUSE", "5000", "WRITE"); err != nil {
		return err
	}
	defer n.Do(context.WithoutCancel(ctx), "CLIENT", "UNPAUSE")
	keys, err := lockKeys(ctx, n)
	if err != nil {
		return err
	}
	ahead := n.ClockAhead() + jump
	from := time.Now()
	err = n.SetClockAhead(ahead)
	// Recorded even on error: the clock moved before TIME was read.
	r.jumps = append(r.jumps, ClockJump{Node: k, From: from, To: time.Now(), Ahead: ahead, Keys: keys})
	return err
}

func (r *run) progress(ctx context.Context, start time.Time) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			ov, _ := r.rec.Check()
			w, s := r.store.Counts()
			r.cfg.Logf("safety: %v: %d acquisitions, %d overlaps (clock jumps included), %d writes, %d stale rejected",
				time.Since(start).Round(time.Second), r.rec.Count(), len(ov), w, s)
		}
	}
}

func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)*99/100]
}
