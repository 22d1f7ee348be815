package safety

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlease/redlease/engine"
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

// Config sets up a Run. Zero fields take the defaults in brackets.
type Config struct {
	// Nodes is how many redis-server processes Run starts on loopback
	// (free ports, temporary directories), breaks, and stops at the end.
	// [5, or len(Topology)]
	Nodes int
	// Topology gives the kind of each node, Standalone, Stock, Sentinel,
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
	r.stock = make([]bool, cfg.Nodes)
	for i, kind := range cfg.Topology {
		switch kind {
		case Standalone, Stock:
			start := redisproc.StartNodes
			if kind == Stock {
				start, r.stock[i] = redisproc.StartBenchNodes, true // DEBUG off
			}
			c, err := start(1)
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
			return Report{}, fmt.Errorf("safety: node kind %q: the kinds are %q, %q, %q, %q and %q", kind, Standalone, Stock, Sentinel, SentinelDefault, ClusterNode)
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
	r.wg.Go(func() { r.stalls.watch(ctx) })
	r.wg.Wait()

	rep := Report{Duration: time.Since(start), Seed: cfg.Seed, Faults: r.faults, Lost: int(r.lost.Load()),
		Acquisitions: r.rec.Count(), AcquireFailures: int(r.failures.Load()),
		LatePauses: int(r.pauses.Load()), EndedWithoutDone: int(r.noDone.Load()), Blocked: int(r.blocked.Load()),
		StaleResumes: int(r.staleResumes.Load()), StalledDone: int(r.stalledDone.Load()),
		Stranded:   int(r.stranded.Load()),
		ClockJumps: r.jumps, Lapses: r.lapses,
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
	rep.LongestStall, rep.Stalls = r.stalls.longest()
	return rep, nil
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
	stock    []bool   // the Stock nodes
	addrs    []string // the proxies' and master sets', which the engines dial
	rec      Recorder
	store    Store
	log      *engineLog
	idles    int            // idle engines made, to name them
	wg       sync.WaitGroup // workers, injector, progress, retiring engines

	nodesDown    atomic.Int32 // nodes dead or paused right now
	failures     atomic.Int64
	lastErr      atomic.Pointer[error] // a worker's last failure, for a stalled run's log
	lost         atomic.Int64
	pauses       atomic.Int64
	noDone       atomic.Int64
	stranded     atomic.Int64 // FaultOneAddress's failovers the engines did not come back from
	stalledDone  atomic.Int64 // Done late, but no later than the process stalled
	stalls       stallWatch
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
