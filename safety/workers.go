package safety

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/redlease/redlease/engine"
)

// The workers: engines taking, holding, writing with and releasing leases, each checked as it ends.

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
			r.lastErr.Store(&err)
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
	closed := doneOpen(l)
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

// doneSlack is how late after Until a channel got from Done may still
// be open: the runtime's time to run the deadline timer's goroutine.
const doneSlack = 200 * time.Millisecond

// doneOpen watches the channel a holder got from l's Done before its
// deadline, as one that keeps it would, and looks at it doneSlack after
// Until (Until as it is then: an extension moves it): it sends when it
// found the channel still open past that, or the zero time when it
// found it closed. Only the engine's timer counts: a look that runs late
// is more lenient, not less, and it never calls Done or Err again, which
// would end the lease on the caller's goroutine (engine.Lease.Done).
func doneOpen(l *engine.Lease) <-chan time.Time {
	done, open := l.Done(), make(chan time.Time, 1)
	go func() {
		for {
			t := time.NewTimer(time.Until(l.Until()) + doneSlack)
			select {
			case <-done:
				t.Stop()
				open <- time.Time{}
				return
			case <-t.C:
			}
			select {
			case <-done:
				open <- time.Time{}
				return
			default:
			}
			if now := time.Now(); now.After(l.Until().Add(doneSlack)) {
				open <- now
				return
			}
		}
	}()
	return open
}

// checkDone counts a lease whose Done was still open doneSlack after its
// deadline, beyond what the process stalled meanwhile (or was never
// closed), and a lost one. open is doneOpen's.
func (r *run) checkDone(h *Holding, l *engine.Lease, open <-chan time.Time) {
	var at time.Time
	select {
	case at = <-open:
	case <-time.After(time.Until(l.Until()) + 5*time.Second):
		at = <-open
	}
	if !at.IsZero() {
		// What the process stalled after Until, no engine could have saved.
		late, stalled := at.Sub(l.Until()), r.stalls.within(l.Until(), at)
		if late-stalled > doneSlack {
			r.noDone.Add(1)
			if r.cfg.Logf != nil {
				r.cfg.Logf("safety: %s's lease on %q: Done still open %v after Until, %v of it with the process stalled (%v)",
					h.Holder, h.Resource, late.Round(time.Millisecond), stalled.Round(time.Millisecond), l.Err())
			}
		} else {
			r.stalledDone.Add(1)
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
