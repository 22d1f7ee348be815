package safety

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/redlease/redlease/engine"
	"github.com/redlease/redlease/internal/redisproc"
)

// Config sets up a Run. Zero fields take the defaults in brackets.
type Config struct {
	Cluster   *redisproc.Cluster // the nodes to use and break; required
	Duration  time.Duration      // [30s]
	Engines   int                // [3]
	Workers   int                // goroutines per engine [8]
	Resources int                // [4]
	TTL       time.Duration      // lease TTL [300ms]
	// Faults turns on node kills and restarts without persistence, node
	// pauses, slow links and holders that pause past their validity.
	Faults bool
	// RestartQuarantine is passed to every engine; < 0 turns it off.
	// [the engine's default: the TTL]
	RestartQuarantine time.Duration
	Logf              func(format string, args ...any) // progress; nil: quiet
}

// Report is what a Run saw.
type Report struct {
	Duration         time.Duration
	Acquisitions     int            // leases held
	AcquireFailures  int            // acquisitions that gave up (retries exhausted or a node fault)
	Overlaps         []Overlap      // must be empty
	TokenRegressions int            // must be 0
	Writes           int            // accepted by the fenced store
	StaleRejected    int            // writes the store refused thanks to fencing
	LatePauses       int            // holders that paused past their validity before writing
	Lost             int            // leases that ended with ErrLeaseLost
	EndedWithoutDone int            // leases whose Done was still open after their deadline; must be 0
	Faults           map[string]int // injected, by kind
	AcquireP99       time.Duration  // all nodes up
	AcquireP99Down   time.Duration  // one node dead or paused
}

// OK reports whether every safety property held.
func (r Report) OK() bool {
	return len(r.Overlaps) == 0 && r.TokenRegressions == 0 && r.EndedWithoutDone == 0
}

func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: %d acquisitions (%d gave up), %d overlaps, %d token regressions, %d writes, %d stale writes rejected (%d holders paused past their validity), %d lost leases, %d ended without Done; acquire p99 %v (all up), %v (one node down); faults %v",
		r.Duration.Round(time.Second), r.Acquisitions, r.AcquireFailures, len(r.Overlaps), r.TokenRegressions,
		r.Writes, r.StaleRejected, r.LatePauses, r.Lost, r.EndedWithoutDone,
		r.AcquireP99.Round(time.Microsecond), r.AcquireP99Down.Round(time.Microsecond), r.Faults)
	for i, o := range r.Overlaps {
		if i == 5 {
			fmt.Fprintf(&b, "\n  ... %d more", len(r.Overlaps)-5)
			break
		}
		fmt.Fprintf(&b, "\n  overlap: %v", o)
	}
	return b.String()
}

// Run contends, records, breaks things, and reports. It returns an error
// only when it could not run; safety violations are in the Report.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg = withDefaults(cfg)
	c := cfg.Cluster
	proxies := make([]*Proxy, len(c.Nodes))
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		p, err := NewProxy(n.Addr())
		if err != nil {
			return Report{}, err
		}
		defer p.Close()
		proxies[i], addrs[i] = p, p.Addr()
	}
	var engines []*engine.Engine
	defer func() {
		for _, e := range engines {
			_ = e.Close()
		}
	}()
	for range cfg.Engines {
		e, err := engine.New(engine.Config{
			Nodes: addrs, TTL: cfg.TTL, RestartQuarantine: cfg.RestartQuarantine,
			HealthInterval: 100 * time.Millisecond, RetryAttempts: 8,
		})
		if err != nil {
			return Report{}, err
		}
		engines = append(engines, e)
	}

	r := &run{cfg: cfg, cluster: c, proxies: proxies, faults: map[string]int{}}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for ei, e := range engines {
		for w := range cfg.Workers {
			wg.Go(func() { r.worker(ctx, e, fmt.Sprintf("e%d/w%d", ei, w)) })
		}
	}
	if cfg.Faults {
		wg.Go(func() { r.inject(ctx) })
	}
	if cfg.Logf != nil {
		wg.Go(func() { r.progress(ctx, start) })
	}
	wg.Wait()

	rep := Report{Duration: time.Since(start), Faults: r.faults, Lost: int(r.lost.Load()),
		Acquisitions: r.rec.Count(), AcquireFailures: int(r.failures.Load()),
		LatePauses: int(r.pauses.Load()), EndedWithoutDone: int(r.noDone.Load())}
	rep.Overlaps, rep.TokenRegressions = r.rec.Check()
	rep.Writes, rep.StaleRejected = r.store.Counts()
	rep.AcquireP99, rep.AcquireP99Down = p99(r.latUp), p99(r.latDown)
	return rep, nil
}

func withDefaults(c Config) Config {
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
	return c
}

type run struct {
	cfg     Config
	cluster *redisproc.Cluster
	proxies []*Proxy
	rec     Recorder
	store   Store

	nodesDown atomic.Int32 // nodes dead or paused right now
	failures  atomic.Int64
	lost      atomic.Int64
	pauses    atomic.Int64
	noDone    atomic.Int64

	mu      sync.Mutex
	faults  map[string]int
	latUp   []time.Duration
	latDown []time.Duration
}

// worker takes leases on random resources until ctx ends. A holder works
// a little, writes to the fenced store with its token and releases. One in
// twenty is a long holder: auto-extended for up to 3 TTLs, it works for 1
// to 2 and may be lost meanwhile. With faults on, one in 30 pauses past
// its validity before writing, as a holder stopped by GC or a frozen VM
// would.
func (r *run) worker(ctx context.Context, e *engine.Engine, name string) {
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	retry := engine.WithRetry(func() backoff.BackOff {
		return backoff.NewExponentialBackOff(backoff.WithInitialInterval(time.Millisecond),
			backoff.WithMaxInterval(20*time.Millisecond), backoff.WithMaxElapsedTime(0))
	})
	for ctx.Err() == nil {
		resource := fmt.Sprintf("res-%d", rng.IntN(r.cfg.Resources))
		long := rng.IntN(20) == 0
		opts := []engine.Option{engine.WithFencing(), retry}
		work := time.Duration(rng.IntN(3000)) * time.Microsecond
		if long {
			opts = append(opts, engine.WithAutoExtend(3*r.cfg.TTL))
			work = r.cfg.TTL + time.Duration(rng.Int64N(int64(r.cfg.TTL)))
		}
		down := r.nodesDown.Load() > 0
		start := time.Now()
		l, err := e.Acquire(ctx, resource, opts...)
		if err != nil {
			if ctx.Err() == nil {
				r.failures.Add(1)
			}
			continue
		}
		acquired := time.Now()
		r.latency(acquired.Sub(start), down)
		h := r.rec.Held(resource, name, acquired, l.Until(), l.Token())

		if r.cfg.Faults && !long && rng.IntN(30) == 0 {
			r.pauses.Add(1)
			time.Sleep(time.Until(l.Until()) + time.Duration(rng.IntN(50))*time.Millisecond)
			r.store.Write(resource, l.Token()) // a newer holder may have written: refused
			r.checkDone(l)
			continue
		}
		select {
		case <-time.After(work):
		case <-l.Done():
		}
		select {
		case <-l.Done(): // lost (or expired) while working: stop, do not write
			r.rec.Ended(h, time.Now(), l.Until())
		default:
			r.store.Write(resource, l.Token())
			r.rec.Ended(h, time.Now(), l.Until())
			_ = l.Release(context.Background())
		}
		r.checkDone(l)
	}
}

// checkDone counts a lease whose Done did not close by its deadline (plus
// scheduling slack), and a lost one.
func (r *run) checkDone(l *engine.Lease) {
	select {
	case <-l.Done():
	case <-time.After(time.Until(l.Until()) + 200*time.Millisecond):
		r.noDone.Add(1)
		<-l.Done()
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

// inject breaks nodes in turn: one node killed with -9 and restarted
// without persistence, one paused (SIGSTOP, then SIGCONT), one link slowed,
// and now and then a majority paused for longer than a TTL, or a restart
// that only restart quarantine makes safe.
func (r *run) inject(ctx context.Context) {
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	sleep := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	kinds := []string{"kill+restart", "pause", "slow link", "kill+restart", "pause", "slow link", "majority pause", "restart under a bare majority"}
	for i := 0; sleep(time.Duration(200+rng.IntN(400)) * time.Millisecond); i++ {
		kind, k := kinds[i%len(kinds)], rng.IntN(len(r.cluster.Nodes))
		n := r.cluster.Nodes[k]
		r.mu.Lock()
		r.faults[kind]++
		r.mu.Unlock()
		hold := time.Duration(200+rng.IntN(800)) * time.Millisecond
		switch kind {
		case "kill+restart":
			r.nodesDown.Add(1)
			_ = n.Kill()
			sleep(hold)
			_ = n.Restart() // empty: no persistence
			r.nodesDown.Add(-1)
		case "pause":
			r.nodesDown.Add(1)
			_ = n.Pause()
			sleep(hold)
			_ = n.Resume()
			r.nodesDown.Add(-1)
		case "majority pause": // no quorum for a while: leases are lost, none granted
			r.nodesDown.Add(3)
			for j := range 3 {
				_ = r.cluster.Nodes[(k+j)%len(r.cluster.Nodes)].Pause()
			}
			sleep(r.cfg.TTL + hold)
			for j := range 3 {
				_ = r.cluster.Nodes[(k+j)%len(r.cluster.Nodes)].Resume()
			}
			r.nodesDown.Add(-3)
		case "restart under a bare majority":
			// The Redlock critique's case: with two nodes dead, leases live
			// on exactly three; one of those loses its data, and the dead
			// two come back empty. Only restart quarantine keeps a
			// contender from taking those three while a holder holds.
			nodes := len(r.cluster.Nodes)
			a, b, c := r.cluster.Nodes[k], r.cluster.Nodes[(k+1)%nodes], r.cluster.Nodes[(k+2)%nodes]
			r.nodesDown.Add(2)
			_, _ = a.Kill(), b.Kill()
			sleep(hold)
			_ = c.Kill()
			_, _, _ = c.Restart(), a.Restart(), b.Restart()
			r.nodesDown.Add(-2)
		case "slow link":
			r.proxies[k].SetDelay(time.Duration(5+rng.IntN(60)) * time.Millisecond)
			sleep(hold)
			r.proxies[k].SetDelay(0)
		}
	}
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
			r.cfg.Logf("safety: %v: %d acquisitions, %d overlaps, %d writes, %d stale rejected",
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
