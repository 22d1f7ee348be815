// Command bench measures redlease against its peers at their strongest
// honest settings (go-redsync over go-redis and over rueidis, the raw
// Redlock commands straight through rueidis, and on one node rueidislock
// and bsm/redislock), on the same Redis nodes in the same run, on one node
// and on five, and prints a table, ratios against the strongest peer, and
// optionally JSON and an SVG plot. Run it from the repository root:
//
//	go run ./bench -h
//
// It is a module of its own (joined to the root by go.work) so that users
// of the engine package never compile the comparison clients.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/node"
)

// defaultNodeCounts: the suite runs on one node (most services run a
// single Redis) and on five.
var defaultNodeCounts = []int{1, 5}

// Defaults per workload for -workers and -resources.
var (
	defaultWorkers   = map[string][]int{uncontended: {1, 128, 512}, contended: {16, 128}, trylock: {64}, degraded: defaultDegradedWorkers}
	defaultResources = map[string]int{uncontended: 1000, contended: 4, trylock: 8, degraded: 1000}
)

const usageText = `Usage: go run ./bench [flags]

Benchmarks redlease against its peers, each at its strongest honest
configuration, on the same nodes in the same process, one after another:

  redlease               the engine at its defaults
  redsync                go-redsync v4 (default options) over go-redis v9
                         (default options)
  redsync-rueidis        go-redsync v4 over rueidis (its rueidis adapter),
                         rueidis at its defaults (2 connections per node on 2
                         cores, no flush delay)
  redsync-rueidis-tuned  the same over rueidis tuned for batching
  raw                    the commands a perfect Redlock client needs, straight
                         through rueidis at its defaults: SET NX PX on all
                         nodes at once, decide at quorum, compare-and-delete
                         on all
  raw-tuned              raw over rueidis tuned for batching
  rueidislock            (1 node only) rueidis' single-Redis lock, tuned
                         rueidis, one key per lock (KeyMajority 1)
  redislock              (1 node only) bsm/redislock, a single-Redis lock,
                         over go-redis v9 (default options)

"Tuned" rueidis is set for batching:
  {{tuned}}
so that concurrent commands share writes, as redlease's node actors make
them share (the chosen settings and the measurements behind them are
beside the constants in bench/clients.go). Client-side caching is off,
except for rueidislock, which waits on it. All clients use a {{ttl}} TTL;
every run is preceded by a FLUSHALL and a warm-up that is not measured.

The suite runs once per node count (-n), on the first N of the nodes; the
single-node clients run only at -n 1. The ratios give, per row, redlease
against the strongest peer of that row (the highest cycles/s, named) and
against each peer, with both clients' CPU per cycle; at 1 worker also
redlease's acquire p50 over raw's and raw-tuned's.

Without -workload the suite is uncontended at 1, 128 and 512 workers on
each node count, then held on the largest.

-cluster N -workload failover measures what a failover inside a Redis
Cluster costs the shards that did not fail: on a cluster of its own (N
masters, a replica each), redlease's workers (the first -workers, 128 by
default) take and release the resources uncontended; after -duration
(at least 3s) one master is failed over (CLUSTER FAILOVER: its replica
has every write, yet engines meet it as a new master and quarantine its
slots), and the run goes on until its resources are served again and
-duration more. It prints the cycles/s of that shard's resources and of
the others' before, during the quarantine and after.

Services reach Redis over a network, not loopback: -rtt repeats the whole
suite per added round-trip time (e.g. -rtt 0,200us,1ms: one zone, across
zones). Above 0, every client under test, redlease and each peer alike,
reaches each node through a delay proxy; the bench's own FLUSHALL,
seeding and INFO go direct. The proxies run in a process of their own
(this program, started again), so their CPU is not in cli CPU; it is
reported per cycle as proxy CPU on the progress line and in -json, and
the proxies share the machine's cores with the clients and the nodes.
A proxy is a latency, not a throughput limit: each chunk it reads goes
out half the RTT later, while it reads on, so pipelined commands share
the delay. Its sleeps are nanosleeps on a thread of their own (Go's
timers round sub-millisecond sleeps up to about 1ms in an idle process).
Its own hop (waking it, a read and a write per chunk each way) adds
50-130µs to a round trip on a 2-core VM, so the bench measures it once
per RTT (PING p50 through a proxy against direct), sets the proxies'
delay that much lower, and prints the RTT then added; the ratios and
-json give it too. The proxies cost about a plain forwarding proxy's CPU,
up to twice that at low rates: 5-9µs per cycle at 128 workers on one node
(a third of a core), but 300-800µs at 1 worker, where each chunk wakes
the process. Connecting is not delayed, only what is sent; a dead node
behind a proxy (degraded) takes connections and drops them at once.

Workloads:
  uncontended  W workers, R resources; worker w cycles over its own resources
               w, w+W, w+2W, ...; a cycle is a single-round acquire (redlease
               TryAcquire, redsync TryLock, rueidislock TryWithContext,
               redislock Obtain without retries) plus release; a failed
               acquire is an error, never retried.
  contended    W workers on R resources (worker w on resource w mod R, through
               client instance w mod -instances: engines apart, as services
               run one per process); a cycle is an acquire with the client's
               own retries (redlease Acquire, redsync Lock, rueidislock
               WithContext, raw and redislock: redlease's default schedule),
               a hold of -hold (default none), and the release.
               Also reports hand-offs, changes of holder: their count, and
               their latency from a holder's call to Release to the next
               holder's (another worker's) acquire returning; "round", the
               p50 of the client's own single-round acquire of a resource
               nobody else wants, probed every 20ms during the run (an
               uncontended round at the same load, to set a hand-off
               against; the probes' commands, about 1% of the run's, count
               in its costs); and fairness, the fewest acquisitions of a
               worker over the mean (1: fair, 0: a worker starved).
  trylock      W workers on R resources (worker w on resource w mod R, one
               client instance), each in the loop people write around a
               try-lock: a single-round acquire, tried again at once when
               refused; a winner releases at once. A refusal is a try, not
               an error ("tries/s"); any other failed acquire and every
               failed release is an error. 64 workers on 8 resources unless
               -workers and -resources say otherwise.
  degraded     uncontended with 1 node dead, on the largest node count (at
               least 3), at 1 and 128 workers unless -workers says otherwise:
               shows what a dead minority costs next to the healthy
               uncontended numbers. The client connects to all nodes, then the
               first node is killed (SIGKILL), then the warm-up runs:
               redsync's go-redis clients are pinged when made, which a dead
               node would fail, and the warm-up absorbs each client's
               discovery of the dead node, so the measured part is the steady
               degraded state. After the run the node is restarted empty on
               its port and re-seeded (FLUSHALL and redlease's epoch key, as
               before every run). The server CPU of these runs is that of the
               live nodes. Needs the nodes the bench started itself: skipped,
               with a note, with -nodes. The ratios end with redlease's
               degraded / uncontended acquire p50 and p99 at the same workers
               (run both workloads to get them); -json gives these runs
               "dead_nodes": 1; -plot gives them a row.
  held         redlease only: the Redlock peers do not extend a lease by
               themselves (rueidislock does, on one Redis), so whatever
               -clients says, held is one run, of redlease, on the largest
               node count. N leases (-leases) on distinct resources, acquired
               by 64 goroutines (Acquire, with retries) with WithTTL(3s) and
               WithAutoExtend(1h), so each extends every second; then held for
               -duration, but at least 2×TTL = 6s so that every lease extends
               about six times. Then, on nodes the bench started itself (not
               with -nodes), a majority of the nodes (3 of 5) is paused
               (SIGSTOP) until every lease is lost, and resumed; with -nodes
               the leases are released instead. -workers, -resources and
               -warmup do not apply (no warm-up: the acquisitions precede the
               measured hold).

Reported per run: cycles/s; acquire p50/p99/p99.9 and release p50/p99 (µs);
errors; this process's CPU per cycle (getrusage) and its write syscalls per
cycle (/proc/self/io syscw); the nodes' CPU per cycle (INFO cpu); the
added RTT (rtt, 0 without -rtt; -json: added_rtt_us, and
added_rtt_measured_us and proxy_cpu_us_per_cycle with a proxy); the
commands the client sent per cycle (cmds: counted on its connections as they
are written, a script is one; redlease sends each batch to a node as one
script call carrying its commands, and counts those it carries) and the
commands the nodes ran (calls: INFO total_commands_processed, which counts
the calls inside scripts too).

Held runs get a table of their own, after the others (latencies in µs):
  heap B/l  heap per lease: HeapAlloc after runtime.GC once the leases are
            acquired, minus the same before, over the leases held
  +events   the same once every holder called Lease.Events, which makes
            the lease's event channel
  ext/s     extensions whose round started during the hold, per second
  late      how late those extension rounds started against their plan,
            p50/p99/max: consecutive Untils of a lease are round starts plus
            the same TTL − drift, so late = (Until − previous Until) − TTL/3,
            read from an Engine.Subscribe(4×N) stream
  lost      lost-signal lag, p50/p99/p99.9/max: from each lease's Until to
            its Context being cancelled (context.AfterFunc, which adds a
            goroutine's start to the true moment Done closed) after the
            pause; negative when Done closed before Until, as the engine
            arms the end a margin (TTL/50, 60ms here) before it; every
            lease must end with ErrLeaseLost. "-" with -nodes
  <Until %  the share of those ends seen before Until (the goal: Done no
            later than Until, in at least 99.9% of them)
  cli CPU, srv CPU, writes  per extension, over the hold
  dropped   Engine.Stats().EventsDropped at the end of the run. The run
            empties every lease's own event channel every 250ms, as holders
            reading Lease.Events would, so this counts what the subscription
            missed
  errors    failed acquires, leases that ended during the hold, leases not
            ended with ErrLeaseLost within TTL+5s of the pause, failed
            releases
In -json a held run has leases, heap_bytes_per_lease,
heap_bytes_per_lease_with_events, extensions_per_s,
extend_late_{p50,p99,max}_us, extend_failed (ExtendFailed events before the
loss phase), events_dropped, lost_lag_{p50,p99,p999,max}_us and
lost_before_until (a fraction; both omitted with -nodes), and keeps the common fields: workers = the 64 acquiring goroutines,
resources = leases, duration_s = the hold, cycles = extensions in the hold,
cycles_per_s = extensions_per_s, acquire_* = the N acquires, release_* = the
final releases (0 unless -nodes: the leases were lost), *_per_cycle = per
extension. -plot leaves held out.

Flags:
`

func main() {
	if rtt, ok := os.LookupEnv(proxyEnv); ok {
		os.Exit(serveProxies(rtt, os.Args[1:])) // the proxy process: see -rtt
	}
	os.Exit(mainCode())
}

// mainCode is main without os.Exit, so every deferred Close runs first.
func mainCode() int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	nodesFlag := fs.String("nodes", "", "comma-separated host:port of independent Redis masters to use instead of starting\nlocal redis-server processes on free loopback ports (as many as -n needs); they are\nFLUSHALLed before every run, so never point this at Redis holding data you need")
	countsFlag := fs.String("n", "", "comma-separated node counts: the suite runs once per count, on the first N nodes\n(default 1,5; with -nodes, all of them)")
	duration := fs.Duration("duration", 2*time.Second, "measured time per run")
	warmup := fs.Duration("warmup", 300*time.Millisecond, "unmeasured warm-up before each run")
	workersFlag := fs.String("workers", "", "comma-separated worker counts for every workload\n(default 1,128,512 for uncontended, 16,128 for contended, 1,128 for degraded)")
	resources := fs.Int("resources", 0, "resources per run for every workload (default 1000 for uncontended and degraded, 4 for contended)")
	workloadFlag := fs.String("workload", strings.Join(defaultWorkloads, ","), "comma-separated workloads: "+strings.Join(workloadNames, ", ")+" (held: redlease only;\ndegraded: not with -nodes; held and degraded run on the largest node count only)")
	leasesFlag := fs.Int("leases", 10000, "leases held at once in the held workload")
	hold := fs.Duration("hold", 0, "how long each holder of a contended run keeps the lock before releasing it")
	instances := fs.Int("instances", defaultInstances, "client instances (engines, for redlease) a contended run spreads its workers over,\nworker w on instance w mod N, as services run one per process")
	clientsFlag := fs.String("clients", strings.Join(clientNames, ","), "comma-separated clients")
	jsonPath := fs.String("json", "", "write the results to `FILE` as a JSON array")
	plotPath := fs.String("plot", "", "write an SVG plot to `FILE` (.svg): per workload and node count (and added RTT)\na row with cycles/s and acquire p99 against workers, one line per client")
	cpuProfile := fs.String("cpuprofile", "", "write this process's CPU profile of the whole suite to `FILE` (go tool pprof);\nrun one client and one workload to read it")
	rttFlag := fs.String("rtt", "0", "comma-separated round-trip times to add between every client and each node\n(e.g. 0,200us,1ms): the suite runs once per RTT; above 0 through delay proxies (see above)")
	clusterFlag := fs.Int("cluster", 0, "with N > 0, the one node is a Redis Cluster of N masters the bench starts (no replicas,\nDEBUG off, as Redis ships): the suite runs at -n 1 with the clients that run on a cluster\n(redlease, redsync-rueidis, raw and rueidislock, over rueidis' cluster client), and each\nrun gives each master's CPU per cycle; not with -nodes or -rtt, nor degraded or held")
	memProfile := fs.String("memprofile", "", "write a heap profile to `FILE` at the end of the suite, and for the held\nworkload while its leases are held")
	markdownPath := fs.String("markdown", "", "write a Markdown page of the suite to `FILE` (docs/PERFORMANCE.md is one): a fixed explanation,\nthe command line, the date and the machine, then the tables printed on stdout")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), strings.NewReplacer("{{tuned}}", tunedHelp(), "{{ttl}}", lockTTL.String()).Replace(usageText))
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		return usageError(fs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}

	workloads, err := list(*workloadFlag, workloadNames)
	if err != nil {
		return usageError(fs, err)
	}
	clients, err := list(*clientsFlag, clientNames)
	if err != nil {
		return usageError(fs, err)
	}
	var workers []int
	if *workersFlag != "" {
		if workers, err = ints(*workersFlag); err != nil {
			return usageError(fs, fmt.Errorf("-workers: %w", err))
		}
	}
	if *duration <= 0 || *warmup < 0 || *resources < 0 || *leasesFlag < 1 {
		return usageError(fs, errors.New("-duration and -leases must be > 0, -warmup and -resources >= 0"))
	}
	if *plotPath != "" && !strings.HasSuffix(strings.ToLower(*plotPath), ".svg") {
		return usageError(fs, fmt.Errorf("-plot %q: only .svg is supported", *plotPath))
	}
	rtts, err := durations(*rttFlag)
	if err != nil {
		return usageError(fs, fmt.Errorf("-rtt: %w", err))
	}
	addrs := splitList(*nodesFlag)
	counts := defaultNodeCounts
	switch {
	case *countsFlag != "":
		if counts, err = ints(*countsFlag); err != nil {
			return usageError(fs, fmt.Errorf("-n: %w", err))
		}
	case len(addrs) > 0:
		counts = []int{len(addrs)}
	}
	failover := slices.Contains(workloads, failoverWorkload)
	if failover {
		if *clusterFlag <= 0 {
			return usageError(fs, errors.New("-workload failover fails a shard of a Redis Cluster over: it needs -cluster N"))
		}
		workloads = slices.DeleteFunc(workloads, func(w string) bool { return w == failoverWorkload })
	}
	if *clusterFlag > 0 {
		if len(addrs) > 0 || slices.ContainsFunc(rtts, func(d time.Duration) bool { return d > 0 }) {
			return usageError(fs, errors.New("-cluster starts its cluster itself, on loopback: not with -nodes or -rtt"))
		}
		clusterMasters, counts = *clusterFlag, []int{1}
		if off := slices.DeleteFunc(slices.Clone(clients), func(c string) bool { return onCluster[c] }); len(off) > 0 {
			fmt.Fprintf(os.Stderr, "bench: note: -cluster: leaving out %s (not over a cluster client here)\n", strings.Join(off, ", "))
			clients = slices.DeleteFunc(clients, func(c string) bool { return !onCluster[c] })
		}
		workloads = slices.DeleteFunc(workloads, func(w string) bool { return w == degraded || w == heldWorkload })
		if len(clients) == 0 || len(workloads) == 0 && !failover {
			return usageError(fs, errors.New("-cluster: nothing left to run (clients: "+strings.Join(slices.Sorted(maps.Keys(onCluster)), ", ")+"; workloads: uncontended, contended)"))
		}
	}
	slices.Sort(counts)
	counts = slices.Compact(counts)
	most := counts[len(counts)-1]
	if len(addrs) > 0 && most > len(addrs) {
		return usageError(fs, fmt.Errorf("-n %d: -nodes gives only %d", most, len(addrs)))
	}
	if len(addrs) > 0 && slices.Contains(workloads, degraded) {
		fmt.Fprintln(os.Stderr, "bench: note: skipping the degraded workload with -nodes: it kills a node, so it needs the nodes the bench starts itself")
		workloads = slices.DeleteFunc(workloads, func(w string) bool { return w == degraded })
		if len(workloads) == 0 {
			return usageError(fs, errors.New("nothing left to run"))
		}
	}
	if most < 3 && slices.Contains(workloads, degraded) {
		fmt.Fprintf(os.Stderr, "bench: note: skipping the degraded workload on %d node%s: killing one leaves no quorum (needs -n 3 or more)\n", most, plural(most))
		workloads = slices.DeleteFunc(workloads, func(w string) bool { return w == degraded })
		if len(workloads) == 0 {
			return usageError(fs, errors.New("nothing left to run"))
		}
	}
	if single := slices.DeleteFunc(slices.Clone(clients), func(c string) bool { return !singleNode[c] }); len(single) > 0 && most > 1 {
		where := "on the 1-node rows"
		if counts[0] != 1 {
			where = "with -n 1: not in this suite"
		}
		fmt.Fprintf(os.Stderr, "bench: note: the single-Redis locks (%s) run only %s\n", strings.Join(single, ", "), where)
	}
	if *hold < 0 {
		return usageError(fs, fmt.Errorf("-hold must be >= 0, got %v", *hold))
	}
	if *instances < 1 {
		return usageError(fs, fmt.Errorf("-instances must be at least 1, got %d", *instances))
	}
	// The whole plan once per added RTT, so that a proxy process serves
	// one group of runs.
	var plan []run
	for _, rtt := range rtts {
		for _, r := range makePlan(workloads, clients, workers, *resources, *leasesFlag, counts) {
			r.rtt = rtt
			plan = append(plan, r)
		}
	}
	for i := range plan {
		if plan[i].workload == contended {
			plan[i].instances, plan[i].hold = *instances, *hold
		}
	}
	if len(plan) == 0 && len(workloads) > 0 {
		return usageError(fs, errors.New("nothing to run: the single-node clients run only at -n 1"))
	}
	if slices.Contains(workloads, heldWorkload) && !slices.Contains(clients, "redlease") {
		fmt.Fprintln(os.Stderr, "bench: note: the held workload runs redlease only, whatever -clients says")
	}
	for _, r := range plan {
		if (r.workload == uncontended || r.workload == degraded) && r.workers > r.resources {
			fmt.Fprintf(os.Stderr, "bench: warning: %d workers on %d resources: uncontended workers will share resources\n", r.workers, r.resources)
			break
		}
	}

	if *cpuProfile != "" {
		stopProfile, err := startCPUProfile(*cpuProfile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: -cpuprofile: %v\n", err)
			return 1
		}
		defer stopProfile()
	}
	heapProfile = *memProfile

	// Ctrl-C or SIGTERM ends the current run; the deferred Closes then
	// stop the nodes. A second signal kills at once (redisproc's nodes die
	// with this process all the same).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop)

	suiteStart := time.Now()
	var fo *failoverResult // the failover workload's, when it ran
	if failover {
		w := 128
		if len(workers) > 0 {
			w = workers[0]
		}
		fmt.Fprintf(os.Stderr, "bench: failover: a Redis Cluster of %d masters with a replica each, one shard failed over\n", clusterMasters)
		r, err := failShard(ctx, clusterMasters, w, cmp.Or(*resources, 1000), max(*duration, 3*time.Second))
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: failover: %v\n", err)
			return 1
		}
		fo = &r
		if len(plan) == 0 {
			printResults(os.Stdout, fo, nil)
			if *markdownPath != "" {
				m := thisMachine(os.Args[1:], suiteStart)
				m.Took = time.Since(suiteStart)
				if err := writeMarkdown(*markdownPath, m, fo, nil, nil); err != nil {
					fmt.Fprintf(os.Stderr, "bench: -markdown: %v\n", err)
					return 1
				}
			}
			return 0
		}
	}

	var cluster *redisproc.Cluster // nil with -nodes or -cluster: no loss phase in held, no degraded
	var masters []string           // -cluster's
	if clusterMasters > 0 {
		fmt.Fprintf(os.Stderr, "bench: starting a Redis Cluster of %d masters\n", clusterMasters)
		rc, err := redisproc.StartBenchRedisCluster(clusterMasters, 0)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
			return 1
		}
		defer rc.Close()
		masters, addrs = rc.Addrs(), rc.Addrs()[:1] // the clients find the others from one
	}
	if len(addrs) == 0 {
		fmt.Fprintf(os.Stderr, "bench: starting %d redis-server nodes\n", most)
		cluster, err = redisproc.StartBenchNodes(most)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err) // says how to install redis-server
			return 1
		}
		defer cluster.Close()
		addrs = cluster.Addrs()
	}
	admAddrs := addrs
	if masters != nil {
		admAddrs = masters
	}
	adm, err := newAdmin(admAddrs)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		return 1
	}
	defer adm.close()
	if masters != nil {
		adm.mark = node.Target{Cluster: addrs}.String()
	}

	b := &bench{addrs: addrs, dial: addrs, admin: adm, cluster: cluster, duration: *duration, warmup: *warmup, plan: plan, progress: newProgress(os.Stderr)}
	var what []string
	if n := len(plan) - countHeld(plan); n > 0 {
		what = append(what, fmt.Sprintf("%d of %v (+%v warm-up)", n, *duration, *warmup))
	}
	if countHeld(plan) > 0 {
		what = append(what, fmt.Sprintf("held: %d leases for %v", *leasesFlag, heldHold(*duration)))
	}
	withRTT := ""
	if len(rtts) > 1 || rtts[0] > 0 {
		withRTT = " with added RTT " + joinDurations(rtts, ", ")
	}
	fmt.Fprintf(os.Stderr, "bench: %d runs (%s) on %s node%s%s, GOMAXPROCS=%d, %s; about %v\n",
		len(plan), strings.Join(what, ", "), joinInts(counts, " and "), plural(most), withRTT,
		runtime.GOMAXPROCS(0), runtime.Version(), b.left(0).Round(time.Second))
	start := time.Now()
	results, err := b.runAll(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	}
	fmt.Fprintf(os.Stderr, "bench: %d runs in %v\n\n", len(results), time.Since(start).Round(100*time.Millisecond))
	writeHeapProfile("")

	printResults(os.Stdout, fo, results)
	code := 0
	if err != nil {
		code = 1
		if ctx.Err() != nil {
			code = 130
		}
	}
	var wroteJSON, wrotePlot string // for -markdown's links
	if *jsonPath != "" && len(results) > 0 {
		if err := writeJSON(*jsonPath, results); err != nil {
			fmt.Fprintf(os.Stderr, "bench: -json: %v\n", err)
			code = 1
		} else {
			wroteJSON = *jsonPath
		}
	}
	if *plotPath != "" && len(results) > 0 {
		if err := writePlot(*plotPath, results, clients, *duration); err != nil {
			fmt.Fprintf(os.Stderr, "bench: -plot: %v\n", err)
			code = 1
		} else {
			wrotePlot = *plotPath
		}
	}
	if *markdownPath != "" && (len(results) > 0 || fo != nil) {
		m := thisMachine(os.Args[1:], suiteStart)
		m.Took = time.Since(suiteStart)
		vctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		m.Redis = adm.version(vctx)
		cancel()
		m.JSON, m.Plot = relTo(*markdownPath, wroteJSON), relTo(*markdownPath, wrotePlot)
		runErr := err
		if err := writeMarkdown(*markdownPath, m, fo, results, runErr); err != nil {
			fmt.Fprintf(os.Stderr, "bench: -markdown: %v\n", err)
			code = 1
		}
	}
	return code
}

// bench is one suite: the nodes, the plan, and how long each run takes.
type bench struct {
	addrs            []string // the nodes, for the bench's own commands
	admin            *admin
	cluster          *redisproc.Cluster // the nodes the bench started; nil with -nodes
	duration, warmup time.Duration
	plan             []run
	progress         *progress

	// The clients under test dial the nodes at dial: addrs, or with an
	// added RTT, proxy's ports in front of them; measuredRTT is the RTT
	// the proxies added, as measured at their start.
	dial        []string
	proxy       *proxyProc
	measuredRTT time.Duration
}

// runAll runs the plan in order and returns the results so far when one
// run fails or ctx ends.
func (b *bench) runAll(ctx context.Context) ([]Result, error) {
	var results []Result
	defer func() { b.proxy.close() }()
	for i, r := range b.plan {
		if i == 0 || r.rtt != b.plan[i-1].rtt {
			if err := b.link(r.rtt); err != nil {
				return results, fmt.Errorf("added RTT %v: %w", r.rtt, err)
			}
		}
		res, err := b.on(r.nodes).runOne(ctx, i, r)
		if err != nil {
			b.progress.abort()
			if ctx.Err() != nil {
				err = errors.New("interrupted")
			}
			what := fmt.Sprintf("nodes=%d workers=%d", r.nodes, r.workers)
			if r.workload == heldWorkload {
				what = fmt.Sprintf("leases=%d", r.resources)
			}
			return results, fmt.Errorf("run %d (%s %s %s): %w", i+1, r.client, r.workload, what, err)
		}
		results = append(results, res)
	}
	return results, nil
}

// pings is how many PINGs measure the RTT a proxy adds, each way.
const pings = 300

// link sets the clients' way to the nodes for the runs with added RTT
// rtt: direct for 0, otherwise through a new proxy process (the previous
// one ends), whose added RTT it measures and reports.
func (b *bench) link(rtt time.Duration) error {
	b.proxy.close()
	b.proxy, b.dial, b.measuredRTT = nil, b.addrs, 0
	if rtt == 0 {
		return nil
	}
	p, err := startProxies(rtt, b.addrs)
	if err != nil {
		return err
	}
	b.proxy, b.dial = p, p.addrs
	direct, proxied, err := pingRTT(b.addrs[0], p.addrs[0], pings)
	if err != nil {
		return fmt.Errorf("PING through the proxy: %w", err)
	}
	// The proxies' own hop (waking their process, reading, writing) adds
	// to their delay: set them once for that much less, so that they add
	// about the RTT asked for (measured with the machine otherwise idle).
	set := rtt
	if hop := proxied - direct - rtt; hop > 0 {
		set = max(rtt-hop, 0).Round(time.Microsecond)
		if err := p.setRTT(set); err != nil {
			return err
		}
		if direct, proxied, err = pingRTT(b.addrs[0], p.addrs[0], pings); err != nil {
			return fmt.Errorf("PING through the proxy: %w", err)
		}
	}
	b.measuredRTT = proxied - direct
	us := func(d time.Duration) time.Duration { return d.Round(time.Microsecond) }
	fmt.Fprintf(os.Stderr, "bench: added RTT %v: every client reaches the nodes through delay proxies (pid %d), set to %v as their own hop adds the rest; PING p50 %v through one, %v direct: %v added\n",
		rtt, p.cmd.Process.Pid, set, us(proxied), us(direct), us(b.measuredRTT))
	return nil
}

// runOne is one run: FLUSHALL, a fresh client, a warm-up, then the
// measured part between two snapshots of the counters. A degraded run
// kills a node once the client is connected, before the warm-up, and
// restarts and re-seeds it once the client is closed.
func (b *bench) runOne(ctx context.Context, i int, r run) (res Result, err error) {
	if r.workload == heldWorkload {
		return b.runHeld(ctx, i, r)
	}
	if err := b.admin.flushAll(ctx); err != nil {
		return Result{}, err
	}
	lks := make([]locker, max(r.instances, 1))
	for i := range lks {
		if lks[i], err = newLocker(r.client, b.dial); err != nil {
			for _, lk := range lks[:i] {
				lk.close()
			}
			return Result{}, err
		}
	}
	closeLocker := sync.OnceFunc(func() {
		for _, lk := range lks {
			lk.close()
		}
	})
	defer closeLocker()

	label := fmt.Sprintf("[%d/%d] %s %s nodes=%d%s workers=%d", i+1, len(b.plan), r.client, r.workload, r.nodes, rttLabel(r.rtt), r.workers)
	if len(lks) > 1 {
		label += fmt.Sprintf(" instances=%d", len(lks))
	}
	if r.hold > 0 {
		label += fmt.Sprintf(" hold=%v", r.hold)
	}
	dead := 0
	if r.workload == degraded {
		defer func() {
			closeLocker() // before the restart: the client never sees the new process
			if rerr := b.reviveNode(ctx); rerr != nil && err == nil {
				err = rerr
			}
		}()
		if err := b.killNode(); err != nil {
			return Result{}, err
		}
		dead = 1
		label += fmt.Sprintf(" (node %s killed)", b.addrs[deadNode])
	}

	b.progress.begin(label)
	b.progress.status("warming up; suite " + fmtLeft(b.left(i)))
	warm, _, warmElapsed := drive(ctx, lks, r, b.warmup, 64)
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	// Size the latency slices from the warm-up's pace, with room to spare.
	warmCycles := 0
	for _, s := range warm {
		warmCycles += len(s.acquire)
	}
	perWorker := 64
	if warmElapsed > 0 {
		perWorker += int(1.5 * float64(warmCycles) / float64(r.workers) * b.duration.Seconds() / warmElapsed.Seconds())
	}
	warm = nil
	runtime.GC() // the warm-up's garbage is not this run's cost

	before, err := take(ctx, b.admin, b.proxy)
	if err != nil {
		return Result{}, err
	}
	writes := b.progress.tick(ctx, time.Now().Add(b.duration), func(runLeft time.Duration) string {
		return fmtLeft(runLeft) + "; suite " + fmtLeft(runLeft+b.left(i+1))
	})
	stats, probed, elapsed := drive(ctx, lks, r, b.duration, perWorker)
	progressWrites := writes()
	after, err := takeAfter(ctx, b.admin, b.proxy)
	if err != nil {
		return Result{}, err
	}
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	res = summarize(r, len(b.addrs), stats, probed, elapsed, before, after, progressWrites)
	res.DeadNodes = dead
	res.MeasuredRTTUS = micros(b.measuredRTT)
	summary := fmt.Sprintf("%.0f cycles/s, acquire p99 %s, %d errors", res.CyclesPerS, fmtMicros(res.AcquireP99), res.Errors)
	if res.TriesPerS != nil {
		summary += fmt.Sprintf(", %.0f tries/s", *res.TriesPerS)
	}
	if res.ProxyCPU != nil {
		summary += fmt.Sprintf(", proxy CPU %.1fµs/cycle", *res.ProxyCPU)
	}
	// redlease's view of the nodes: the dead one should be down, and
	// only on a degraded run; say so either way on a degraded run, and
	// otherwise only when something is off (a node left quarantined by a
	// missed re-seed, say).
	if h := engineHealth(lks[0]); h != "" && (dead > 0 || h != "engine: all nodes up") {
		summary += "; " + h
	}
	b.progress.end(summary)
	if n, first := goRedisLog.take(); n > 0 {
		fmt.Fprintf(os.Stderr, "    go-redis logged %d lines, first: %s\n", n, first)
	}
	if res.FirstError != "" {
		fmt.Fprintf(os.Stderr, "    first error: %s\n", res.FirstError)
	}
	return res, nil
}

// on is b narrowed to its first n nodes. The cluster (for the held and
// degraded workloads, which pause and kill nodes) only when that is all of
// them.
func (b *bench) on(n int) *bench {
	nb := *b
	nb.addrs, nb.admin, nb.dial = b.addrs[:n], b.admin.first(n), b.dial[:n]
	if n < len(b.addrs) {
		nb.cluster = nil
	}
	return &nb
}

// left estimates the time the runs from i on take.
func (b *bench) left(i int) time.Duration {
	const setup = 150 * time.Millisecond   // FLUSHALL, connecting, summarizing
	const restart = 100 * time.Millisecond // degraded: restarting and re-seeding the dead node
	var d time.Duration
	for j, r := range b.plan[min(i, len(b.plan)):] {
		if k := i + j; r.rtt > 0 && (k == 0 || r.rtt != b.plan[k-1].rtt) {
			d += 2 * pings * (r.rtt + 200*time.Microsecond) // link's PINGs, at most twice
		}
		if r.workload == heldWorkload {
			// Acquiring at about 10,000 leases/s, two GCs, the hold and
			// the loss phase.
			d += time.Duration(r.resources)*100*time.Microsecond + time.Second + heldHold(b.duration) + b.lossTime()
			continue
		}
		d += b.duration + b.warmup + setup
		if r.workload == degraded {
			d += restart
		}
	}
	return d
}

// makePlan orders the runs by node count, workload, worker count, then
// client, so the clients of one point run back to back on a machine in
// the same state. The single-node clients run only on one node. The held
// workload is a single run, of redlease, with leases leases; it and the
// degraded workload (which pause a majority of the nodes and kill one)
// run on the largest node count only.
func makePlan(workloads, clients []string, workers []int, resources, leases int, counts []int) []run {
	var plan []run
	most := counts[len(counts)-1]
	for _, n := range counts {
		for _, wl := range workloads {
			if (wl == heldWorkload || wl == degraded) && n != most {
				continue
			}
			if wl == heldWorkload {
				plan = append(plan, run{client: "redlease", workload: wl, nodes: n, workers: heldWorkers, resources: leases})
				continue
			}
			ws, res := workers, resources
			if ws == nil {
				ws = defaultWorkers[wl]
			}
			if res == 0 {
				res = defaultResources[wl]
			}
			for _, w := range ws {
				for _, c := range clients {
					if singleNode[c] && n != 1 {
						continue
					}
					plan = append(plan, run{client: c, workload: wl, nodes: n, workers: w, resources: res})
				}
			}
		}
	}
	return plan
}

func countHeld(plan []run) int {
	n := 0
	for _, r := range plan {
		if r.workload == heldWorkload {
			n++
		}
	}
	return n
}

// list splits a comma-separated flag and checks each item against known.
func list(s string, known []string) ([]string, error) {
	items := splitList(s)
	if len(items) == 0 {
		return nil, fmt.Errorf("empty list, want some of %s", strings.Join(known, ","))
	}
	for _, it := range items {
		if !slices.Contains(known, it) {
			return nil, fmt.Errorf("unknown %q, want some of %s", it, strings.Join(known, ","))
		}
	}
	return items, nil
}

func ints(s string) ([]int, error) {
	var out []int
	for _, it := range splitList(s) {
		n, err := strconv.Atoi(it)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("want positive integers, got %q", it)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

// durations parses a comma-separated list of durations >= 0, sorted,
// without repeats.
func durations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, it := range splitList(s) {
		d, err := time.ParseDuration(it)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("want durations >= 0 (0, 200us, 1ms), got %q", it)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func joinDurations(ds []time.Duration, sep string) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = fmtRTT(micros(d))
	}
	return strings.Join(s, sep)
}

// rttLabel is " rtt=D" for a run with added RTT D, "" without.
func rttLabel(rtt time.Duration) string {
	if rtt == 0 {
		return ""
	}
	return " rtt=" + rtt.String()
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func joinInts(ns []int, sep string) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, sep)
}

func splitList(s string) []string {
	var out []string
	for it := range strings.SplitSeq(s, ",") {
		if it = strings.TrimSpace(it); it != "" {
			out = append(out, it)
		}
	}
	return out
}

func usageError(fs *flag.FlagSet, err error) int {
	fmt.Fprintf(fs.Output(), "bench: %v (see -h)\n", err)
	return 2
}

func fmtLeft(d time.Duration) string {
	return d.Round(100*time.Millisecond).String() + " left"
}

// fmtMicros shows a µs value with a unit that keeps it short.
func fmtMicros(us float64) string {
	if us < 0 { // a lost lag before the deadline
		return "-" + fmtMicros(-us)
	}
	switch {
	case us >= 1e6:
		return trimZero(fmt.Sprintf("%.2f", us/1e6)) + "s"
	case us >= 1e3:
		return trimZero(fmt.Sprintf("%.1f", us/1e3)) + "ms"
	}
	return fmt.Sprintf("%.0fµs", us)
}
