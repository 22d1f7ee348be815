package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlease/redlease/engine"
	"github.com/redlease/redlease/internal/hashslot"
	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/node"
)

// failoverResult is what failShard measured. Rates are cycles/s, by
// side: [0] the other shards' resources, [1] the failed shard's.
type failoverResult struct {
	masters, workers, resources, failed int
	failover, quarantine                time.Duration // CLUSTER FAILOVER's own time; from its end to the shard's first grant
	before, during, after               [2]float64
}

func (r failoverResult) print(out io.Writer) {
	fmt.Fprintf(out, "failover: %d masters, a replica each; redlease, %d workers, %d resources (%d on the failed shard); CLUSTER FAILOVER took %v, the shard served again %v after it\n",
		r.masters, r.workers, r.resources, r.failed, r.failover.Round(time.Millisecond), r.quarantine.Round(time.Millisecond))
	fmt.Fprintf(out, "%-26s %12s %12s %12s\n", "cycles/s", "before", "quarantine", "after")
	fmt.Fprintf(out, "%-26s %12.0f %12.0f %12.0f\n", "the other shards' resources", r.before[0], r.during[0], r.after[0])
	fmt.Fprintf(out, "%-26s %12.0f %12.0f %12.0f\n", "the failed shard's", r.before[1], r.during[1], r.after[1])
	fmt.Fprintf(out, "the other shards kept %.0f%% of their rate during the quarantine\n", 100*r.during[0]/r.before[0])
}

// failShard runs the failover workload (-cluster N -workload failover):
// what a failover inside a Redis Cluster costs the resources of the
// shards that did not fail. It starts a cluster of its own (N masters,
// a replica each), has redlease's workers take and release its resources
// uncontended, as the uncontended workload does, and after a baseline
// fails the master of one shard over (CLUSTER FAILOVER, graceful: the
// replica has every write, yet it is a new master, which each engine
// meets untrusted). It measures the cycles/s of the failed shard's
// resources and of the others' before the failover, while the failed
// shard sits out its quarantine, and after: the other shards' rate in the
// quarantine over their baseline is the number the cluster issue asks to
// stay at 90% or more.
func failShard(ctx context.Context, masters, workers, resources int, baseline time.Duration) (failoverResult, error) {
	rc, err := redisproc.StartBenchRedisCluster(masters, 1)
	if err != nil {
		return failoverResult{}, err
	}
	defer rc.Close()
	cfg := engine.Config{Nodes: []string{node.Target{Cluster: rc.Addrs()[:1]}.String()}, TTL: lockTTL}
	if err := engine.MarkNew(ctx, cfg); err != nil {
		return failoverResult{}, err
	}
	e, err := engine.New(cfg)
	if err != nil {
		return failoverResult{}, err
	}
	defer e.Close()

	// The failed shard is probe's, a resource the workers leave alone,
	// so that a worker holding it never fails the probe's TryAcquire
	// (which a loaded run once took for 10 more seconds of quarantine);
	// each resource counts its cycles for its side, in buckets of a
	// tenth of a second.
	const probe = "redlease:failover:probe"
	names := make([]string, resources)
	failed := make([]bool, resources)
	for i := range names {
		names[i] = "redlease:res:" + strconv.Itoa(i) // as the uncontended workload names them
	}
	slotOf := func(name string) int { return hashslot.Of(node.LockKey(engine.DefaultKeyPrefix, name)) }
	victim, err := rc.MasterOf(ctx, slotOf(probe))
	if err != nil {
		return failoverResult{}, err
	}
	for i := range names {
		m, err := rc.MasterOf(ctx, slotOf(names[i]))
		if err != nil {
			return failoverResult{}, err
		}
		failed[i] = m == victim
	}
	// Room for the warm-up, the baseline twice, and up to three minutes
	// for the failover and the quarantine.
	const bucket = 100 * time.Millisecond
	most := int((time.Second + 2*baseline + 3*time.Minute) / bucket)
	counts := [2][]atomic.Int64{make([]atomic.Int64, most), make([]atomic.Int64, most)}
	start := time.Now()

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			bg := context.WithoutCancel(runCtx)
			for i := w; runCtx.Err() == nil; i += workers {
				r := i % resources
				l, err := e.TryAcquire(bg, names[r])
				if err != nil {
					continue // the failed shard's, in its quarantine: the worker goes on to its next
				}
				if l.Release(bg) == nil {
					side := 0
					if failed[r] {
						side = 1
					}
					if b := int(time.Since(start) / bucket); b < most {
						counts[side][b].Add(1)
					}
				}
			}
		})
	}
	defer wg.Wait()
	defer stop()

	if !sleepCtx(ctx, baseline+time.Second) { // a second of warm-up
		return failoverResult{}, ctx.Err()
	}
	failStart := time.Since(start)
	if _, err := rc.Failover(ctx, victim, ""); err != nil {
		return failoverResult{}, err
	}
	failEnd := time.Since(start)
	// The quarantine: until the engine serves the failed shard again,
	// bounded by the buckets.
	var back time.Duration
	for back == 0 && time.Since(start) < time.Duration(most)*bucket-baseline {
		tried := time.Since(start) // the quarantine ended after the last refused try: count to this one's start
		if l, err := e.TryAcquire(ctx, probe); err == nil {
			back = tried
			_ = l.Release(ctx)
			break
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return failoverResult{}, ctx.Err()
		}
	}
	if back == 0 {
		return failoverResult{}, fmt.Errorf("failover: the failed shard did not serve again within %v", time.Duration(most)*bucket-baseline-failEnd)
	}
	if !sleepCtx(ctx, baseline) {
		return failoverResult{}, ctx.Err()
	}
	end := time.Since(start)
	stop()
	wg.Wait()

	rate := func(side int, from, to time.Duration) float64 {
		var n int64
		for b := int(from / bucket); b < min(int(to/bucket), most); b++ {
			n += counts[side][b].Load()
		}
		return float64(n) / (to - from).Seconds()
	}
	return failoverResult{
		masters: masters, workers: workers, resources: resources, failed: countTrue(failed),
		failover: failEnd - failStart, quarantine: back - failEnd,
		before: [2]float64{rate(0, time.Second, failStart), rate(1, time.Second, failStart)},
		// The quarantine proper: from the failover's end to the shard's
		// first grant, a bucket in from each end.
		during: [2]float64{rate(0, failEnd+bucket, back-bucket), rate(1, failEnd+bucket, back-bucket)},
		after:  [2]float64{rate(0, back+bucket, end), rate(1, back+bucket, end)},
	}, nil
}

// sleepCtx sleeps for d, or until ctx ends: false then.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}
