package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlease/redlease/engine"
)

// The held workload: N leases kept alive by auto-extension. Only redlease
// extends leases by itself, so it is the only client of this workload.
const (
	heldTTL     = 3 * time.Second // WithTTL of every held lease: extended every second
	heldMaxHold = time.Hour       // WithAutoExtend: far beyond any run
	heldWorkers = 64              // goroutines acquiring (and, with -nodes, releasing) the leases
	// heldSweep is how often the run empties every lease's own event
	// channel, as holders reading Lease.Events would, so the engine's
	// EventsDropped counts what the subscription missed, not what nobody
	// read. A lease emits one event a second, three to four while its
	// extensions fail; its channel keeps seven.
	heldSweep = 250 * time.Millisecond
	// heldLossSlack bounds the wait for the leases to end after the pause,
	// beyond their TTL.
	heldLossSlack = 5 * time.Second
)

// heldHold is how long a held run holds the leases: -duration, but at
// least 2×TTL so that every lease extends about six times.
func heldHold(d time.Duration) time.Duration { return max(d, 2*heldTTL) }

// heldDrift is the engine's drift allowance for heldTTL with the default
// DriftFactor: TTL·DriftFactor + 2ms (docs/DESIGN-NOTES.md, "How it works"). An Until is
// its round's start + TTL − drift.
var heldDrift = time.Duration(float64(heldTTL)*engine.DefaultDriftFactor) + 2*time.Millisecond

// settleHeap collects garbage twice: what sync.Pools keep (the lease
// actors' votes between rounds, say) outlives one collection, not two, so
// that the reading counts only what the leases hold on to.
func settleHeap() {
	runtime.GC()
	runtime.GC()
}

// heldOut is what a held run measured, beyond the counters.
type heldOut struct {
	leases         int             // held at the end of the acquisition
	heapPerLease   float64         // no holder has called Events
	heapWithEvents float64         // every holder has
	acquire        []time.Duration // sorted
	release        []time.Duration // sorted; only with -nodes
	window         time.Duration   // the hold, as measured
	late           []time.Duration // sorted; extensions whose round started in the hold
	extendFailed   int             // ExtendFailed events before the loss phase
	lags           []time.Duration // sorted; nil without the loss phase
	dropped        uint64
	errors         int
	firstErr       error
}

func (h *heldOut) fail(err error) {
	if h.errors == 0 {
		h.firstErr = err
	}
	h.errors++
}

// extension is one Extended event: its round's start and how late that
// start was against plan (the previous Until's round start + TTL/3), both
// as durations since the run's base time.
type extension struct{ start, late time.Duration }

// heldListener reads the engine's subscription for the whole run. It
// owns everything it writes until its channel is closed and it returns.
type heldListener struct {
	base      time.Time
	last      map[string]time.Time // previous Until per resource
	ext       []extension
	lossPhase atomic.Bool // set before the nodes are paused
	failed    int         // ExtendFailed before the loss phase
	firstFail error
}

func (h *heldListener) run(events <-chan engine.Event) {
	for ev := range events {
		prev, seen := h.last[ev.Resource]
		h.last[ev.Resource] = ev.Until
		switch {
		case ev.Kind == engine.Extended && seen:
			// Both Untils are a round start + TTL − drift: their gap is
			// the gap between the rounds' starts.
			h.ext = append(h.ext, extension{
				start: ev.Until.Add(heldDrift - heldTTL).Sub(h.base),
				late:  ev.Until.Sub(prev) - heldTTL/3,
			})
		case ev.Kind == engine.ExtendFailed && !h.lossPhase.Load():
			if h.failed == 0 {
				h.firstFail = ev.Err
			}
			h.failed++
		}
	}
}

// runHeld is the held run: acquire N auto-extended leases, measure the
// heap they take, hold them for the hold time measuring their extensions,
// then (nodes started by the bench only) pause a majority of the nodes
// and measure how late after its validity deadline each holder learns
// that its lease is lost.
func (b *bench) runHeld(ctx context.Context, i int, r run) (Result, error) {
	n := r.resources
	hold := heldHold(b.duration)
	if err := b.admin.flushAll(ctx); err != nil {
		return Result{}, err
	}
	e, err := engine.New(engine.Config{Nodes: b.dial})
	if err != nil {
		return Result{}, err
	}
	engines.add(e) // its commands count in cmds
	closed := false
	defer func() {
		engines.remove(e)
		if !closed {
			_ = e.Close()
		}
	}()
	b.progress.begin(fmt.Sprintf("[%d/%d] %s %s%s leases=%d", i+1, len(b.plan), r.client, r.workload, rttLabel(r.rtt), n))

	// Everything the measurement itself keeps is allocated before the
	// first heap reading, so only what the leases cost is counted.
	base := time.Now()
	names := make([]string, n)
	for j := range names {
		names[j] = r.client + ":held:" + strconv.Itoa(j)
	}
	leases := make([]*engine.Lease, n)
	acq := make([][]time.Duration, heldWorkers)
	for w := range acq {
		acq[w] = make([]time.Duration, 0, n/heldWorkers+1)
	}
	perLease := int(hold/(heldTTL/3)) + 8 // extensions during acquisition, hold and loss, with room
	lis := &heldListener{base: base, last: make(map[string]time.Time, n), ext: make([]extension, 0, n*perLease)}
	events, unsubscribe := e.Subscribe(4 * n)
	defer unsubscribe()
	listened := make(chan struct{})
	go func() {
		defer close(listened)
		lis.run(events)
	}()
	out := heldOut{}

	settleHeap()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	// Acquire: heldWorkers goroutines, lease j by worker j mod heldWorkers,
	// each with the engine's retries.
	b.progress.status(fmt.Sprintf("acquiring %d leases; suite %s", n, fmtLeft(b.left(i))))
	var wg sync.WaitGroup
	var mu sync.Mutex // guards out.fail
	for w := range heldWorkers {
		wg.Go(func() {
			for j := w; j < n && ctx.Err() == nil; j += heldWorkers {
				t0 := time.Now()
				l, err := e.Acquire(ctx, names[j], engine.WithTTL(heldTTL), engine.WithAutoExtend(heldMaxHold))
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						out.fail(err)
						mu.Unlock()
					}
					continue
				}
				acq[w] = append(acq[w], time.Since(t0))
				leases[j] = l
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	settleHeap()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	writeHeapProfile("held")
	for _, l := range leases {
		if l != nil {
			out.leases++
		}
	}
	if out.leases == 0 {
		return Result{}, fmt.Errorf("no lease acquired: %w", out.firstErr)
	}
	out.heapPerLease = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(out.leases)
	out.acquire = slices.Concat(acq...)
	slices.Sort(out.acquire)

	// A lease makes its event channel on the holder's first Events call:
	// the heap again once every holder asked for it, as the sweeper below
	// does from now on.
	for _, l := range leases {
		if l != nil {
			_ = l.Events()
		}
	}
	settleHeap()
	var asked runtime.MemStats
	runtime.ReadMemStats(&asked)
	out.heapWithEvents = float64(int64(asked.HeapAlloc)-int64(before.HeapAlloc)) / float64(out.leases)

	// The holders' reader: empties each lease's own event channel.
	sweepDone := make(chan struct{})
	var sweeper sync.WaitGroup
	sweeper.Go(func() { sweepEvents(leases, sweepDone) })
	defer func() {
		if sweepDone != nil {
			close(sweepDone)
			sweeper.Wait()
		}
	}()

	// Hold, measured between two snapshots of the counters.
	beforeSnap, err := take(ctx, b.admin, b.proxy)
	if err != nil {
		return Result{}, err
	}
	t0 := time.Now()
	writes := b.progress.tick(ctx, t0.Add(hold), func(runLeft time.Duration) string {
		return "holding, " + fmtLeft(runLeft) + "; suite " + fmtLeft(runLeft+b.lossTime()+b.left(i+1))
	})
	select {
	case <-time.After(hold):
	case <-ctx.Done():
	}
	t1 := time.Now()
	progressWrites := writes()
	afterSnap, err := takeAfter(ctx, b.admin, b.proxy)
	if err != nil {
		return Result{}, err
	}
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	out.window = t1.Sub(t0)
	for _, l := range leases {
		if l != nil && l.Err() != nil {
			out.fail(fmt.Errorf("lease %s ended while held: %w", l.Resource(), l.Err()))
		}
	}

	if b.cluster != nil {
		lags, err := b.lose(ctx, i, leases, lis, &out)
		if err != nil {
			return Result{}, err
		}
		out.lags = lags
	} else {
		out.release = releaseAll(ctx, leases, &out)
	}

	close(sweepDone)
	sweeper.Wait()
	sweepDone = nil
	out.dropped = e.Stats().EventsDropped
	closed = true
	_ = e.Close() // releases what is left; closes the subscription
	<-listened

	for _, x := range lis.ext {
		if x.start >= t0.Sub(base) && x.start < t1.Sub(base) {
			out.late = append(out.late, x.late)
		}
	}
	slices.Sort(out.late)
	out.extendFailed = lis.failed
	if out.firstErr == nil && lis.firstFail != nil {
		out.firstErr = fmt.Errorf("extension failed: %w", lis.firstFail)
	}

	res := summarizeHeld(r, len(b.addrs), &out, beforeSnap, afterSnap, progressWrites)
	res.MeasuredRTTUS = micros(b.measuredRTT)
	summary := fmt.Sprintf("%.0f ext/s, late p99 %s, %.0f B/lease (%.0f with Events)", res.CyclesPerS, fmtMicros(*res.ExtendLateP99), *res.HeapPerLease, *res.HeapWithEvents)
	if res.LostLagP99 != nil {
		summary += fmt.Sprintf(", lost lag p99 %s p99.9 %s, Done before Until in %.2f%%",
			fmtMicros(*res.LostLagP99), fmtMicros(*res.LostLagP999), 100**res.LostBeforeUntil)
	}
	b.progress.end(fmt.Sprintf("%s, %d extension failures, %d errors", summary, out.extendFailed, res.Errors))
	if res.FirstError != "" {
		fmt.Fprintf(b.progress.f, "    first error: %s\n", res.FirstError)
	}
	return res, nil
}

// lose pauses a majority of the nodes (3 of 5), so that no extension can
// succeed, and returns, sorted, how long after its Until each live lease's
// Context was cancelled (negative: before it); every lease must end with
// ErrLeaseLost. The nodes
// are resumed before it returns.
func (b *bench) lose(ctx context.Context, i int, leases []*engine.Lease, lis *heldListener, out *heldOut) ([]time.Duration, error) {
	type ended struct {
		j   int
		lag time.Duration
	}
	live := 0
	endc := make(chan ended, len(leases))
	for j, l := range leases {
		if l == nil || l.Err() != nil {
			continue
		}
		live++
		context.AfterFunc(l.Context(), func() {
			endc <- ended{j, time.Since(l.Until())}
		})
	}
	paused := b.cluster.Nodes[:len(b.cluster.Nodes)/2+1]
	b.progress.status(fmt.Sprintf("%d of %d nodes paused, waiting for %d leases to be lost; suite %s",
		len(paused), len(b.cluster.Nodes), live, fmtLeft(b.lossTime()+b.left(i+1))))
	lis.lossPhase.Store(true)
	defer func() {
		for _, nd := range paused {
			_ = nd.Resume()
		}
	}()
	for _, nd := range paused {
		if err := nd.Pause(); err != nil {
			return nil, err
		}
	}

	lags := make([]time.Duration, 0, live)
	got := make([]bool, len(leases))
	timeout := time.NewTimer(heldTTL + heldLossSlack)
	defer timeout.Stop()
wait:
	for len(lags) < live {
		select {
		case x := <-endc:
			lags = append(lags, x.lag)
			got[x.j] = true
		case <-timeout.C:
			break wait
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	for j, l := range leases {
		switch {
		case l == nil:
		case !got[j] && l.Err() == nil:
			out.fail(fmt.Errorf("lease %s still held %v after %d of %d nodes paused", l.Resource(), heldTTL+heldLossSlack, len(paused), len(b.cluster.Nodes)))
		case got[j] && !errors.Is(l.Err(), engine.ErrLeaseLost):
			out.fail(fmt.Errorf("lease %s ended with %v, want ErrLeaseLost", l.Resource(), l.Err()))
		}
	}
	slices.Sort(lags)
	return lags, nil
}

// releaseAll releases the live leases with heldWorkers goroutines and
// returns the latencies of the releases, sorted.
func releaseAll(ctx context.Context, leases []*engine.Lease, out *heldOut) []time.Duration {
	bg := context.WithoutCancel(ctx)
	rel := make([][]time.Duration, heldWorkers)
	errs := make([][]error, heldWorkers)
	var wg sync.WaitGroup
	for w := range heldWorkers {
		wg.Go(func() {
			for j := w; j < len(leases); j += heldWorkers {
				l := leases[j]
				if l == nil || l.Err() != nil {
					continue
				}
				t0 := time.Now()
				if err := l.Release(bg); err != nil {
					errs[w] = append(errs[w], err)
					continue
				}
				rel[w] = append(rel[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	for _, es := range errs {
		for _, err := range es {
			out.fail(err)
		}
	}
	all := slices.Concat(rel...)
	slices.Sort(all)
	return all
}

// sweepEvents empties every lease's event channel each heldSweep until
// done is closed.
func sweepEvents(leases []*engine.Lease, done <-chan struct{}) {
	t := time.NewTicker(heldSweep)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		for _, l := range leases {
			if l != nil {
				drain(l.Events())
			}
		}
	}
}

// drain receives what ch holds without blocking; a closed ch is empty.
func drain(ch <-chan engine.Event) {
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		default:
			return
		}
	}
}

// lossTime estimates the loss phase: at most the leases' remaining
// validity, TTL − drift; zero with -nodes, where there is none.
func (b *bench) lossTime() time.Duration {
	if b.cluster == nil {
		return 0
	}
	return heldTTL
}
