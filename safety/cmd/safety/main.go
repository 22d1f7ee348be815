// Command safety runs redlease's safety checker on 5 local redis-server
// nodes it starts and breaks: node kills and restarts without
// persistence, pauses, slow links, holders pausing past their validity.
// It exits 1 if any safety property was violated.
//
//	go run ./safety/cmd/safety -duration 10m
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/safety"
)

func main() {
	var cfg safety.Config
	flag.DurationVar(&cfg.Duration, "duration", 2*time.Minute, "how long to run")
	flag.IntVar(&cfg.Engines, "engines", 3, "engines contending")
	flag.IntVar(&cfg.Workers, "workers", 8, "goroutines per engine")
	flag.IntVar(&cfg.Resources, "resources", 4, "resources they contend for")
	flag.DurationVar(&cfg.TTL, "ttl", 300*time.Millisecond, "lease TTL")
	flag.BoolVar(&cfg.Faults, "faults", true, "inject faults")
	flag.DurationVar(&cfg.RestartQuarantine, "quarantine", 0, "restart quarantine (0: the engine's default, the TTL; negative, e.g. -1s: off, to see the checker catch violations)")
	nodes := flag.Int("nodes", 5, "redis-server nodes to start")
	flag.Parse()
	os.Exit(run(cfg, *nodes))
}

func run(cfg safety.Config, nodes int) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := redisproc.StartNodes(nodes)
	if err != nil {
		fmt.Fprintln(os.Stderr, "safety:", err)
		return 1
	}
	defer c.Close()
	cfg.Cluster = c
	cfg.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	fmt.Fprintf(os.Stderr, "safety: %d engines x %d workers on %d resources, %d nodes, TTL %v, faults %v, for %v\n",
		cfg.Engines, cfg.Workers, cfg.Resources, nodes, cfg.TTL, cfg.Faults, cfg.Duration)
	rep, err := safety.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "safety:", err)
		return 1
	}
	fmt.Println(rep)
	if !rep.OK() {
		fmt.Println("SAFETY VIOLATED")
		return 1
	}
	fmt.Println("ok: every safety property held")
	return 0
}
