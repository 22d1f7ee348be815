// Command safety runs redlease's safety checker on 5 local redis-server
// nodes it starts and breaks (see package safety for the fault kinds:
// kills and restarts without persistence or from a stale snapshot,
// pauses, stalls, slow links, script cache flushes, killed connections,
// idle and new engines, clock jumps; datasets lost in place or behind a
// live connection: flushes, re-promotions, failbacks, reloads, proxy
// switches, clock steps after a restart; a lease's keys lapsing on every
// node after a heal; holders pausing past their validity). It prints the
// guarantees' report, then the clock jumps' and lapses' report apart, and
// exits 1 if any safety property was violated.
//
//	go run ./safety/cmd/safety -duration 10m
//	go run ./safety/cmd/safety -kinds 'snapshot restart,idle engine'
//	go run ./safety/cmd/safety -seed 42 # a report's schedule again
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redlease/redlease/safety"
)

func main() {
	var cfg safety.Config
	flag.DurationVar(&cfg.Duration, "duration", 2*time.Minute, "how long to run")
	flag.IntVar(&cfg.Engines, "engines", 3, "engines contending from the start")
	flag.IntVar(&cfg.Workers, "workers", 8, "goroutines per engine")
	flag.IntVar(&cfg.Resources, "resources", 4, "resources they contend for")
	flag.DurationVar(&cfg.TTL, "ttl", 300*time.Millisecond, "lease TTL")
	flag.BoolVar(&cfg.Faults, "faults", true, "inject faults")
	kinds := flag.String("kinds", "", "comma-separated fault kinds to inject (default: all), of: "+strings.Join(safety.Kinds(), ", "))
	flag.DurationVar(&cfg.RestartQuarantine, "quarantine", 0, "restart quarantine (0: the engine's default, the TTL; negative, e.g. -1s: off, to see the checker catch violations)")
	flag.BoolVar(&cfg.UnsafeEviction, "unsafe-eviction", false, "let nodes that may evict lock keys grant (Config.UnsafeEviction), to see the checker catch violations")
	nodes := flag.Int("nodes", 5, "redis-server nodes to start")
	topology := flag.String("topology", "", "comma-separated kind of each node, standalone, stock (a standalone node with DEBUG off, as Redis ships it: only the swapped twin fault hits it), sentinel (a Sentinel master set: a master, a replica, three sentinels) sentinel-default (one whose sentinels run with Sentinel's own periods: INFO every 10s, hello every 2s) or cluster (a Redis Cluster: 3 masters with a replica each), e.g. cluster,standalone,standalone; overrides -nodes")
	flag.Uint64Var(&cfg.Seed, "seed", 0, "the schedule's random choices (faults, workers), as a run's report gives it, to run it again, e.g. on another build (the timing still varies); 0: random")
	flag.Parse()
	if *kinds != "" {
		for k := range strings.SplitSeq(*kinds, ",") {
			cfg.Kinds = append(cfg.Kinds, strings.TrimSpace(k))
		}
	}
	if *topology != "" {
		for k := range strings.SplitSeq(*topology, ",") {
			cfg.Topology = append(cfg.Topology, strings.TrimSpace(k))
		}
		*nodes = len(cfg.Topology)
	}
	os.Exit(run(cfg, *nodes))
}

func run(cfg safety.Config, nodes int) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.Topology == nil {
		cfg.Nodes = nodes
	}
	cfg.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	kinds := "all"
	if cfg.Kinds != nil {
		kinds = strings.Join(cfg.Kinds, ", ")
	}
	topology := ""
	if cfg.Topology != nil {
		topology = " (" + strings.Join(cfg.Topology, ",") + ")"
	}
	fmt.Fprintf(os.Stderr, "safety: %d engines x %d workers on %d resources, %d nodes%s, TTL %v, faults %v (%s), for %v\n",
		cfg.Engines, cfg.Workers, cfg.Resources, nodes, topology, cfg.TTL, cfg.Faults, kinds, cfg.Duration)
	rep, err := safety.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "safety:", err)
		return 1
	}
	fmt.Println(rep)
	fmt.Println(rep.ClockReport())
	if !rep.OK() {
		fmt.Println("SAFETY VIOLATED")
		return 1
	}
	fmt.Println("ok: every safety property held (overlaps a clock jump or a lapse explains are reported above, apart)")
	return 0
}
