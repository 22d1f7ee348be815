package main

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The workloads. held (many leases kept alive by auto-extension, see
// held.go) is for redlease only. degraded is uncontended with one node
// dead (see degraded.go).
const (
	uncontended      = "uncontended"
	contended        = "contended"
	heldWorkload     = "held"
	degraded         = "degraded"
	trylock          = "trylock"
	failoverWorkload = "failover" // -cluster only: see failover.go
)

// workloadNames are the workloads the benchmark knows; defaultWorkloads
// is the suite run without -workload, in its order. uncontended compares
// the clients at 1, 128 and 512 workers (the targets: throughput
// at 128 and 512, acquire p50 at 1), on one node and on five; held is
// redlease's own, on five. That is 42 runs of 2s plus warm-up (eight
// clients on one node, six on five) and a held run of about 12s: about
// two minutes. contended and degraded are left out so that the suite
// stays under 3 minutes on a 2-core machine.
var (
	workloadNames    = []string{uncontended, contended, trylock, degraded, heldWorkload, failoverWorkload}
	defaultWorkloads = []string{uncontended, heldWorkload}
)

// run is one measured run of the plan: one client, one workload, one
// worker count.
type run struct {
	client    string
	workload  string
	nodes     int // the first nodes of the suite's
	workers   int
	resources int
	instances int           // client instances the workers spread over (contended; else 1)
	hold      time.Duration // contended: how long each holder keeps the lock
	rtt       time.Duration // added between the clients and each node (-rtt)
}

// defaultInstances: a contended run spreads its workers over this many
// client instances, so that fairness between engines shows, not only
// between the goroutines of one.
const defaultInstances = 3

// workerStats is what one worker records. Each worker owns its own, so the
// loop shares nothing but the client under test; the slices are
// preallocated so recording neither allocates nor moves memory mid-run.
type workerStats struct {
	acquire, release, handoff []time.Duration
	tries                     int // trylock: single-round acquires, refused or not
	errors                    int
	firstErr                  error
}

// drive runs r's workload on lks for d (worker w on lks[w mod len]), or until ctx ends, and returns each
// worker's stats, the probed rounds (contended: see probeWorker) and the
// wall time until the last worker stopped. An
// uncontended cycle started before the end runs to completion and counts;
// a contended acquire cut short by the end is not counted, as a cycle or
// as an error. perWorker sizes each worker's latency slices.
func drive(ctx context.Context, lks []locker, r run, d time.Duration, perWorker int) ([]workerStats, []time.Duration, time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	// The client's name in the key keeps runs of different clients apart
	// even if a FLUSHALL were missed.
	names := make([]string, r.resources)
	for i := range names {
		names[i] = r.client + ":res:" + strconv.Itoa(i)
	}
	stats := make([]workerStats, r.workers)
	for i := range stats {
		stats[i].acquire = make([]time.Duration, 0, perWorker)
		stats[i].release = make([]time.Duration, 0, perWorker)
		if r.workload == contended {
			stats[i].handoff = make([]time.Duration, 0, perWorker)
		}
	}
	var released []atomic.Int64 // contended: when each resource's last Release began
	base := time.Now()
	if r.workload == contended {
		released = make([]atomic.Int64, r.resources)
	}

	var wg sync.WaitGroup
	var probed []time.Duration
	start := time.Now()
	if r.workload == contended {
		probed = make([]time.Duration, 0, int(d/probeEvery)+1)
		wg.Go(func() { probeWorker(ctx, lks[0], r.client+":probe", &probed) })
	}
	for w := range r.workers {
		st, lk := &stats[w], lks[w%len(lks)]
		switch r.workload {
		case contended:
			wg.Go(func() { contendedWorker(ctx, lk, names, w, r.hold, st, released, base) })
		case trylock:
			wg.Go(func() { trylockWorker(ctx, lk, names[w%len(names)], st) })
		default: // uncontended and degraded
			wg.Go(func() { uncontendedWorker(ctx, lk, names, w, r.workers, st) })
		}
	}
	wg.Wait()
	return stats, probed, time.Since(start)
}

// probeEvery is how often a contended run probes the client's own
// single-round acquire: rarely enough that the probes' commands are about
// 1% of the run's.
const probeEvery = 20 * time.Millisecond

// probeWorker times, every probeEvery while the contended workers run, a
// single-round acquire of a resource nobody else wants (then releases
// it): the uncontended round at the same load, which a hand-off is
// measured against. Its cycles are not the run's; its commands and CPU
// count in the run's per-cycle costs.
func probeWorker(ctx context.Context, lk locker, resource string, out *[]time.Duration) {
	bg := context.WithoutCancel(ctx)
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		t0 := time.Now()
		l, err := lk.acquire(bg, resource, false)
		took := time.Since(t0)
		if err == nil && l.Release(bg) == nil {
			*out = append(*out, took)
		}
	}
}

// uncontendedWorker cycles over its own resources w, w+W, w+2W, ... so no
// two workers ever want the same lock (with more workers than resources,
// worker w shares resource w mod R). Every acquire is a single round: a
// failure is an error, never retried.
func uncontendedWorker(ctx context.Context, lk locker, names []string, w, workers int, st *workerStats) {
	var mine []string
	for i := w; i < len(names); i += workers {
		mine = append(mine, names[i])
	}
	if len(mine) == 0 {
		mine = append(mine, names[w%len(names)])
	}
	// A cycle started runs to completion even when the run ends: an
	// acquire cut short may leave its key behind on a node (a client that
	// cleans up with the caller's context cannot), which the next cycle on
	// that resource would find taken. The wall time counts until the last
	// cycle ended.
	bg := context.WithoutCancel(ctx)
	for i := 0; ctx.Err() == nil; i++ {
		cycle(bg, lk, mine[i%len(mine)], st, nil)
	}
}

// cycle is a single-round acquire of name and, when it won, a release at
// once, recorded in st: both latencies, or the error. A failed acquire
// that tolerated says is expected (nil: none) is no error.
func cycle(bg context.Context, lk locker, name string, st *workerStats, tolerated func(error) bool) {
	t0 := time.Now()
	l, err := lk.acquire(bg, name, false)
	t1 := time.Now()
	if err != nil {
		if tolerated == nil || !tolerated(err) {
			st.fail(err)
		}
		return
	}
	err = l.Release(bg)
	t2 := time.Now()
	if err != nil {
		st.fail(err)
		return
	}
	st.acquire = append(st.acquire, t1.Sub(t0))
	st.release = append(st.release, t2.Sub(t1))
}

// contendedWorker loops on resource w mod R with the client's retries, so
// each resource has W/R workers queuing for it. A hand-off is a change of
// holder: its latency runs from the moment the previous holder (another
// worker) called Release to the moment this worker's acquire returned. A
// worker that wins its own resource back is no hand-off: that is the
// unfairness of a lock that lets the last holder race ahead of waiters
// asleep in their backoff, and the hand-off count shows how much of it
// there is.
func contendedWorker(ctx context.Context, lk locker, names []string, w int, hold time.Duration, st *workerStats, released []atomic.Int64, base time.Time) {
	r := w % len(names)
	bg := context.WithoutCancel(ctx)
	for ctx.Err() == nil {
		t0 := time.Now()
		l, err := lk.acquire(ctx, names[r], true)
		t1 := time.Now()
		if err != nil {
			if ctx.Err() == nil {
				st.fail(err)
			}
			continue
		}
		// Only holders write released[r], so what we read right after
		// winning is the previous holder's mark.
		if at, who, ok := unmark(released[r].Load()); ok && who != w {
			st.handoff = append(st.handoff, t1.Sub(base)-at)
		}
		if hold > 0 {
			time.Sleep(hold)
		}
		released[r].Store(mark(time.Since(base), w))
		t2 := time.Now()
		err = l.Release(bg)
		t3 := time.Now()
		if err != nil {
			st.fail(err)
			continue
		}
		st.acquire = append(st.acquire, t1.Sub(t0))
		st.release = append(st.release, t3.Sub(t2))
	}
}

// trylockWorker is the loop people write around a try-lock, and that
// every lock benchmark runs: a single-round acquire of its resource
// (shared with the other workers of resource w mod R), tried again at
// once when refused; a winner releases at once. A refusal is a try, not
// an error: an acquire that failed otherwise (a timeout, a node error)
// and every failed release are errors.
func trylockWorker(ctx context.Context, lk locker, name string, st *workerStats) {
	bg := context.WithoutCancel(ctx)
	for ctx.Err() == nil {
		cycle(bg, lk, name, st, refused)
		st.tries++
	}
}

// A release mark packs when a holder called Release (ns since the run's
// base, 43 bits: 2.4 hours) and which worker it was, plus one (20 bits),
// into one int64, so the next holder reads both at once. Zero: no mark yet.
const markWorkerBits = 20

func mark(at time.Duration, worker int) int64 {
	return int64(at)<<markWorkerBits | int64(worker+1)
}

func unmark(m int64) (at time.Duration, worker int, ok bool) {
	if m == 0 {
		return 0, 0, false
	}
	return time.Duration(m >> markWorkerBits), int(m&(1<<markWorkerBits-1)) - 1, true
}

func (st *workerStats) fail(err error) {
	if st.errors == 0 {
		st.firstErr = err
	}
	st.errors++
}
