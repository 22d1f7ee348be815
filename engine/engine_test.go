package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/redlease/redlease/internal/leakcheck"
	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/internal/testwait"
	"github.com/redlease/redlease/lease"
)

func newEngine(t *testing.T, addrs []string, tune ...func(*Config)) *Engine {
	t.Helper()
	cfg := Config{Nodes: addrs}
	for _, f := range tune {
		f(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func lockKey(resource string) string { return DefaultKeyPrefix + "{" + resource + "}" }

// values returns the lock key's value on every node ("" when absent).
func values(t *testing.T, c *redisproc.Cluster, resource string) []string {
	t.Helper()
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		v, _, err := n.Get(t.Context(), lockKey(resource))
		if err != nil {
			t.Fatalf("GET on node %d: %v", i, err)
		}
		out[i] = v
	}
	return out
}

func count(vals []string, want string) int {
	n := 0
	for _, v := range vals {
		if v == want {
			n++
		}
	}
	return n
}

func TestAcquireRelease(t *testing.T) {
	c := startNodes(t, 5)
	e := newEngine(t, c.Addrs())
	ctx := t.Context()

	l, err := e.Acquire(ctx, "orders", WithTTL(2*time.Second))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	returned := time.Now()
	if l.Resource() != "orders" || len(l.Value()) != 27 {
		t.Fatalf("Resource %q Value %q", l.Resource(), l.Value())
	}
	// Validity below TTL − drift (20ms + 2ms), as seen when Acquire returns.
	if validity := l.Until().Sub(returned); validity >= 2*time.Second-22*time.Millisecond {
		t.Fatalf("validity %v is not below TTL - drift", validity)
	}
	if !l.Until().After(time.Now()) {
		t.Fatalf("Until %v already passed", l.Until())
	}
	if got := count(values(t, c, "orders"), l.Value()); got < 3 {
		t.Fatalf("lease value on %d nodes, want a majority", got)
	}
	select {
	case <-l.Done():
		t.Fatal("Done closed while held")
	default:
	}
	if l.Err() != nil {
		t.Fatalf("Err while held: %v", l.Err())
	}

	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done open after Release")
	}
	if !errors.Is(l.Err(), ErrReleased) {
		t.Fatalf("Err after Release = %v, want ErrReleased", l.Err())
	}
	// Release returns once a quorum confirmed; the rest follow.
	if got := count(values(t, c, "orders"), ""); got < 3 {
		t.Fatalf("key left on %d nodes after Release", 5-got)
	}
	waitGone(t, c, "orders")
	if err := l.Release(ctx); !errors.Is(err, ErrReleased) {
		t.Fatalf("second Release = %v, want ErrReleased", err)
	}
}

// Under load, with many leases' messages queued at each actor at once,
// every TryAcquire and Release on a free resource succeeds: a lease actor
// neither parks nor moves on with messages for it still queued. (A
// mailbox that took messages out of its queue without counting them as
// waiting once made leases park with votes to handle: releases timed out
// only with hundreds of callers on five nodes.)
func TestBusyEngineAnswersEveryCall(t *testing.T) {
	c := startNodes(t, 5)
	// A node timeout that load (under -race, on 2 cores) never reaches:
	// only a call nobody answers fails.
	e := newEngine(t, c.Addrs(), func(cfg *Config) { cfg.NodeTimeout = 5 * time.Second })
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	calls := context.WithoutCancel(ctx) // a cycle started runs to its end
	const workers = 256
	var cycles atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				resource := fmt.Sprintf("busy-%d-%d", w, i%4)
				l, err := e.TryAcquire(calls, resource)
				if err != nil {
					t.Errorf("TryAcquire %s: %v", resource, err)
					return
				}
				if err := l.Release(calls); err != nil {
					t.Errorf("Release %s: %v", resource, err)
					return
				}
				cycles.Add(1)
			}
		})
	}
	wg.Wait()
	if cycles.Load() < workers {
		t.Fatalf("%d cycles by %d workers in 1s", cycles.Load(), workers)
	}
}

func TestTryAcquireHeldFailsFast(t *testing.T) {
	c := startNodes(t, 5)
	a := newEngine(t, c.Addrs())
	b := newEngine(t, c.Addrs())
	ctx := t.Context()

	held, err := a.Acquire(ctx, "report")
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	start := time.Now()
	_, err = b.TryAcquire(ctx, "report")
	took := time.Since(start)
	if !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryAcquire on a held resource = %v, want ErrNotAcquired", err)
	}
	if took > 500*time.Millisecond {
		t.Fatalf("TryAcquire took %v to fail", took)
	}
	var ae *AcquireError
	if !errors.As(err, &ae) || ae.Attempts != 1 || len(ae.Nodes) != 5 {
		t.Fatalf("error %v: want an *AcquireError with 1 attempt and 5 nodes", err)
	}
	taken := 0
	for _, n := range ae.Nodes {
		if n.Outcome == Taken {
			taken++
		}
	}
	if taken < 3 {
		t.Fatalf("%d nodes answered Taken, want at least 3: %v", taken, err)
	}
	vals := values(t, c, "report")
	if got := count(vals, held.Value()); got < 3 || got+count(vals, "") != 5 {
		t.Fatalf("keys after a failed contender: %q; want the holder's on a majority and no other", vals)
	}
}

// A round that wins only a minority must delete its own keys everywhere.
// Nodes 0 and 2 are paused so that the round fails only at the node
// timeout, long after nodes 1 and 3 granted; node 4 holds another owner's
// key.
func TestFailedAttemptCleansUp(t *testing.T) {
	c := startNodes(t, 5)
	e := newEngine(t, c.Addrs(), func(cfg *Config) { cfg.NodeTimeout = 300 * time.Millisecond })
	ctx := t.Context()
	if err := c.Nodes[4].Set(ctx, lockKey("job"), "someone-else", time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 2} {
		if err := c.Nodes[i].Pause(); err != nil {
			t.Fatal(err)
		}
	}
	_, err := e.TryAcquire(ctx, "job")
	for _, i := range []int{0, 2} {
		if err := c.Nodes[i].Resume(); err != nil {
			t.Fatal(err)
		}
	}
	var ae *AcquireError
	if !errors.As(err, &ae) {
		t.Fatalf("TryAcquire = %v, want *AcquireError", err)
	}
	want := []Outcome{Timeout, Granted, Timeout, Granted, Taken}
	for i, n := range ae.Nodes {
		if n.Outcome != want[i] {
			t.Fatalf("node %d answered %v, want %v: %v", i, n.Outcome, want[i], err)
		}
	}
	// The paused nodes may still apply the acquire they had buffered: a
	// late grant that only the TTL clears. The others must be clean.
	got := values(t, c, "job")
	if got[1] != "" || got[3] != "" || got[4] != "someone-else" {
		t.Fatalf("after the failed attempt keys are %q: want nodes 1 and 3 empty, node 4 untouched", got)
	}
}

func TestReleaseKeepsForeignKey(t *testing.T) {
	c := startNodes(t, 5)
	e := newEngine(t, c.Addrs())
	ctx := t.Context()
	l, err := e.Acquire(ctx, "cache")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes { // as if the lease expired and another owner took it
		if err := n.Set(ctx, lockKey("cache"), "other-owner", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Release(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Release of a lease whose keys another owner holds: %v, want ErrLeaseLost", err)
	}
	if got := count(values(t, c, "cache"), "other-owner"); got != 5 {
		t.Fatalf("other owner's key survives on %d nodes, want 5", got)
	}
}

// Every up / down / held-by-another mask of 5 nodes: the lease is held
// exactly when at least 3 nodes are up and free, and leaves no key of its
// own behind when it is not.
//
// The 243 masks run in three parallel parts, each on nodes of its own:
// a part's time is its nodes' kills and restarts, not the machine's CPU
// (one part alone took 35-57s).
func TestQuorumEveryMask(t *testing.T) {
	const parts = 3
	for p := range parts {
		t.Run(fmt.Sprint("part ", p), func(t *testing.T) {
			t.Parallel()
			var masks []int
			for m := p; m < 243; m += parts {
				masks = append(masks, m)
			}
			everyMask(t, masks)
		})
	}
}

// everyMask is TestQuorumEveryMask's check of masks, on nodes of its own.
func everyMask(t *testing.T, masks []int) {
	c := startNodes(t, 5)
	// Nodes go down by being killed and come back empty: quarantine (tested
	// in node) would keep them out for a TTL.
	e := newEngine(t, c.Addrs(), func(cfg *Config) {
		cfg.NodeTimeout = time.Second
		cfg.RestartQuarantine = -1
		cfg.HealthInterval = 50 * time.Millisecond // back up soon after a restart
	})
	ctx := t.Context()
	const (
		up = iota
		down
		held
	)
	mask := make([]int, 5)
	for _, m := range masks {
		free := 0
		for i, x := 0, m; i < 5; i, x = i+1, x/3 {
			mask[i] = x % 3
			if mask[i] == up {
				free++
			}
		}
		resource := fmt.Sprintf("mask-%d", m)
		for i, s := range mask {
			switch s {
			case down:
				if err := c.Nodes[i].Kill(); err != nil {
					t.Fatal(err)
				}
			case held:
				if err := c.Nodes[i].Set(ctx, lockKey(resource), "foreign", time.Minute); err != nil {
					t.Fatal(err)
				}
			}
		}
		l, err := e.TryAcquire(ctx, resource)
		if (err == nil) != (free >= 3) {
			t.Fatalf("mask %v (%d free): TryAcquire err = %v, want held=%v", mask, free, err, free >= 3)
		}
		for i, s := range mask {
			if s == down {
				continue
			}
			v, _, gerr := c.Nodes[i].Get(ctx, lockKey(resource))
			if gerr == nil && s == up && err == nil && v == "" {
				// The lease is held at the third grant; a fourth or fifth
				// may still be on its way.
				testwait.Eventually(t, time.Second, fmt.Sprintf("mask %v: the lease's key on node %d", mask, i), func() bool {
					v, _, gerr = c.Nodes[i].Get(ctx, lockKey(resource))
					return gerr != nil || v != ""
				})
			}
			if gerr != nil {
				t.Fatal(gerr)
			}
			switch {
			case s == held && v != "foreign":
				t.Fatalf("mask %v: node %d foreign key became %q", mask, i, v)
			case s == up && err == nil && v != l.Value():
				t.Fatalf("mask %v: node %d has %q, want the lease's value", mask, i, v)
			case s == up && err != nil && v != "":
				t.Fatalf("mask %v: failed attempt left %q on node %d", mask, v, i)
			}
		}
		if err == nil {
			if rerr := l.Release(ctx); rerr != nil {
				t.Fatalf("mask %v: Release: %v", mask, rerr)
			}
		}
		for i, s := range mask {
			if s == down {
				if err := c.Nodes[i].Restart(); err != nil {
					t.Fatal(err)
				}
			}
		}
		waitAllUp(t, e, c)
	}
}

// waitGone waits until no node holds the resource's key.
func waitGone(t *testing.T, c *redisproc.Cluster, resource string) {
	t.Helper()
	var keys []string
	defer func() {
		if t.Failed() {
			t.Logf("keys of %q: %q", resource, keys)
		}
	}()
	testwait.Eventually(t, 2*time.Second, "every node's key of "+resource+" gone", func() bool {
		keys = values(t, c, resource)
		return count(keys, "") == len(c.Nodes)
	})
}

// keysOn counts the nodes among idx that hold the resource's key; it asks
// only those, so the others may be paused.
func keysOn(t *testing.T, c *redisproc.Cluster, resource string, idx ...int) int {
	t.Helper()
	n := 0
	for _, i := range idx {
		v, _, err := c.Nodes[i].Get(t.Context(), lockKey(resource))
		if err != nil {
			t.Fatalf("GET on node %d: %v", i, err)
		}
		if v != "" {
			n++
		}
	}
	return n
}

// waitAllUp waits until every node holds a probe lease again (after a
// restart, the first command on the broken connection may fail).
func waitAllUp(t *testing.T, e *Engine, c *redisproc.Cluster) {
	t.Helper()
	var err error
	defer func() {
		if t.Failed() {
			t.Logf("last probe lease: %v", err)
		}
	}()
	testwait.Eventually(t, 5*time.Second, "every node back, holding a probe lease", func() bool {
		var l *Lease
		if l, err = e.TryAcquire(t.Context(), "probe"); err != nil {
			return false
		}
		all := count(values(t, c, "probe"), l.Value()) == len(c.Nodes)
		err = l.Release(t.Context())
		return err == nil && all
	})
}

// stopAfter is a retry schedule of n quick retries.
func stopAfter(n uint64) func() backoff.BackOff {
	return func() backoff.BackOff {
		return backoff.WithMaxRetries(backoff.NewConstantBackOff(time.Millisecond), n)
	}
}

func TestMutualExclusion(t *testing.T) {
	c := startNodes(t, 5)
	var engines []*Engine
	for range 3 {
		engines = append(engines, newEngine(t, c.Addrs(), func(cfg *Config) {
			cfg.RetryAttempts = 100000
			cfg.NodeTimeout = 500 * time.Millisecond
		}))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const goroutines, total = 24, 240
	// hold: how long each holder stays inside, long enough that a second
	// holder let in beside it would be counted.
	const hold = time.Millisecond
	var (
		inside, taken atomic.Int32
		wg            sync.WaitGroup
		mu            sync.Mutex
		last          time.Time // release time of the previous holder
	)
	for g := range goroutines {
		e := engines[g%len(engines)]
		wg.Go(func() {
			for taken.Add(1) <= total {
				l, err := e.Acquire(ctx, "counter")
				if err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				acquired := time.Now()
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders at once", n)
				}
				mu.Lock()
				if acquired.Before(last) {
					t.Errorf("acquired at %v before the previous release at %v", acquired, last)
				}
				mu.Unlock()
				time.Sleep(hold)
				inside.Add(-1)
				mu.Lock()
				last = time.Now()
				mu.Unlock()
				if err := l.Release(ctx); err != nil {
					t.Errorf("Release: %v", err)
				}
			}
		})
	}
	wg.Wait()
}

// A minority of paused nodes is not waited on; a majority fails promptly.
func TestMinorityDownMajorityDown(t *testing.T) {
	c := startNodes(t, 5)
	e := newEngine(t, c.Addrs(), func(cfg *Config) { cfg.NodeTimeout = 3 * time.Second })
	ctx := t.Context()

	for _, i := range []int{1, 3} {
		if err := c.Nodes[i].Pause(); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	l, err := e.Acquire(ctx, "a")
	if err != nil {
		t.Fatalf("Acquire with 2 of 5 paused: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Acquire with 2 of 5 paused took %v: it waited on the paused nodes", took)
	}
	start = time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with 2 of 5 paused: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Release with 2 of 5 paused took %v: it waited on the paused nodes", took)
	}
	for _, i := range []int{1, 3} {
		if err := c.Nodes[i].Kill(); err != nil {
			t.Fatal(err)
		}
	}
	l, err = e.Acquire(ctx, "b")
	if err != nil {
		t.Fatalf("Acquire with 2 of 5 killed: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with 2 of 5 killed: %v", err)
	}

	if err := c.Nodes[0].Kill(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	_, err = e.Acquire(ctx, "c", WithRetry(stopAfter(3)))
	if !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("Acquire with 3 of 5 killed = %v, want ErrNotAcquired", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Acquire with 3 of 5 killed took %v to fail", took)
	}
	var ae *AcquireError
	if errors.As(err, &ae); ae == nil || ae.Nodes[0].Outcome != Failed {
		t.Fatalf("want node 0 Failed in %v", err)
	}
}

func TestCancelMidRetry(t *testing.T) {
	c := startNodes(t, 5)
	a := newEngine(t, c.Addrs())
	b := newEngine(t, c.Addrs())
	held, err := a.Acquire(t.Context(), "busy")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(150*time.Millisecond, cancel)
	start := time.Now()
	// Retries 1-2ms apart: several fit in 150ms on a loaded machine too
	// (with the default delays, the second did not in one CI run).
	_, err = b.Acquire(ctx, "busy", WithRetryDelay(time.Millisecond, 2*time.Millisecond))
	took := time.Since(start)
	if !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire cancelled mid-retry = %v, want ErrNotAcquired and context.Canceled", err)
	}
	var ae *AcquireError
	if errors.As(err, &ae); ae == nil || ae.Attempts < 2 {
		t.Fatalf("want several attempts before the cancel, got %v", err)
	}
	if took < 150*time.Millisecond || took > time.Second {
		t.Fatalf("Acquire returned after %v, want soon after the cancel at 150ms", took)
	}
	// The holder's key stays on its quorum, and nothing of the contender's
	// is left (a node may have granted the contender before the holder)
	// once its cleanup, sent before Acquire returned, has run.
	testwait.Eventually(t, 5*time.Second, "only the holder's keys left, none of the cancelled contender's", func() bool {
		vals := values(t, c, "busy")
		return count(vals, held.Value())+count(vals, "") == 5
	})
	if vals := values(t, c, "busy"); count(vals, held.Value()) < 3 {
		t.Fatalf("keys after the cancelled contender: %q; want the holder's on a majority", vals)
	}

	ctx, cancel = context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = b.Acquire(ctx, "busy")
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("Acquire past its deadline = %v", err)
	}
}

// An Acquire whose context ends while a stalled node still owes the
// round its answer returns at once; the cleanup goes on behind it and
// deletes the attempt's keys from the nodes that answer. Nodes 0 and 1
// are paused so that the round stays undecided (two grants, one refusal)
// for the whole 1s node timeout.
func TestCancelWithStalledNodeReturnsAtOnce(t *testing.T) {
	const nodeTimeout = time.Second
	// Far below the node timeout that the old wait took, far above what
	// a noisy machine adds to an actor's answer.
	const prompt = nodeTimeout / 5
	c := startNodes(t, 5)
	e := newEngine(t, c.Addrs(), func(cfg *Config) { cfg.NodeTimeout = nodeTimeout })
	if err := c.Nodes[4].Set(t.Context(), lockKey("stalled"), "someone-else", time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1} {
		if err := c.Nodes[i].Pause(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, n := range c.Nodes {
			_ = n.Resume()
		}
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errc := make(chan error, 1)
	returned := make(chan time.Time, 1)
	go func() {
		_, err := e.Acquire(ctx, "stalled")
		returned <- time.Now()
		errc <- err
	}()
	// Mid-round: nodes 2 and 3 granted, nodes 0 and 1 owe their votes.
	healthy := []int{2, 3}
	testwait.Eventually(t, 5*time.Second, "the healthy nodes granted the attempt", func() bool {
		return keysOn(t, c, "stalled", healthy...) == len(healthy)
	})
	cancelled := time.Now()
	cancel()
	var err error
	select {
	case at := <-returned:
		err = <-errc
		if took := at.Sub(cancelled); took > prompt {
			t.Fatalf("Acquire returned %v after its context ended, want within %v (node timeout %v)", took, prompt, nodeTimeout)
		}
	case <-time.After(5 * nodeTimeout):
		t.Fatal("Acquire still running long after its context ended")
	}
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("Acquire = %v, want ErrNotAcquired and context.Canceled", err)
	}
	// The cleanup, sent before Acquire returned, reaches the healthy nodes.
	testwait.Eventually(t, 5*time.Second, "the attempt's key gone from the healthy nodes", func() bool {
		return keysOn(t, c, "stalled", healthy...) == 0
	})
	if v, _, err := c.Nodes[4].Get(t.Context(), lockKey("stalled")); err != nil || v != "someone-else" {
		t.Fatalf("the other owner's key became %q, %v", v, err)
	}
}

// A lease ends by itself, the end margin before Until (never earlier),
// and Until stays its validity deadline.
func TestExpiresAtUntil(t *testing.T) {
	const ttl = 300 * time.Millisecond
	c := startNodes(t, 3)
	e := newEngine(t, c.Addrs())
	l, err := e.Acquire(t.Context(), "short", WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done still open 5s after a 300ms lease")
	}
	ends := l.Until().Add(-lease.EndMargin(ttl))
	if now := time.Now(); now.Before(ends) {
		t.Fatalf("Done closed %v before Until, more than the %v end margin", l.Until().Sub(now), lease.EndMargin(ttl))
	}
	if got, want := context.Cause(l.Context()), ErrExpired; !errors.Is(got, want) {
		t.Fatalf("Context cause = %v, want %v", got, want)
	}
	if !errors.Is(l.Err(), ErrExpired) {
		t.Fatalf("Err = %v, want ErrExpired", l.Err())
	}
	if err := l.Release(t.Context()); !errors.Is(err, ErrExpired) {
		t.Fatalf("Release after expiry = %v, want ErrExpired", err)
	}
}

func TestClose(t *testing.T) {
	c := startNodes(t, 5)
	ctx := t.Context()
	e, err := New(Config{Nodes: c.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	var leases []*Lease
	for i := range 3 {
		l, err := e.Acquire(ctx, fmt.Sprintf("r%d", i))
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for i, l := range leases {
		select {
		case <-l.Done():
		default:
			t.Fatalf("lease %d still open after Close", i)
		}
		if !errors.Is(l.Err(), ErrReleased) || !errors.Is(l.Err(), ErrClosed) {
			t.Fatalf("lease %d Err = %v, want ErrReleased and ErrClosed", i, l.Err())
		}
		if got := count(values(t, c, l.Resource()), ""); got != 5 {
			t.Fatalf("lease %d key left on %d nodes after Close", i, 5-got)
		}
		if err := l.Release(ctx); !errors.Is(err, ErrClosed) {
			t.Fatalf("Release after Close = %v, want ErrClosed", err)
		}
	}
	if _, err := e.Acquire(ctx, "x"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Acquire after Close = %v, want ErrClosed", err)
	}
	if _, err := e.TryAcquire(ctx, "", WithTTL(-1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("TryAcquire with bad input after Close = %v, want ErrClosed", err)
	}
	if _, err := e.TryAcquire(ctx, "x"); !errors.Is(err, ErrClosed) {
		t.Fatalf("TryAcquire after Close = %v, want ErrClosed", err)
	}
	if err := e.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close = %v, want ErrClosed", err)
	}
	// The engine's connections (named "redlease") are closed.
	for i, n := range c.Nodes {
		testwait.Eventually(t, 5*time.Second, fmt.Sprintf("node %d without the engine's connections after Close", i), func() bool {
			list, err := n.Do(ctx, "CLIENT", "LIST")
			if err != nil {
				t.Fatal(err)
			}
			return !strings.Contains(list.(string), "name=redlease ")
		})
	}
	// rueidis goroutines of the test's own clients are still running here;
	// TestMain checks those once every cluster is closed.
	if leaked := leakcheck.Leaked(5*time.Second, "redlease/node", "redlease/lease", "redlease/engine.", "protoactor"); leaked != "" {
		t.Fatalf("goroutines left after Close:\n%s", leaked)
	}
}

// Close while an Acquire is retrying fails it with ErrClosed, not with
// ErrReleased (nothing was held, so nothing was released), and leaves
// nothing behind.
func TestCloseDuringAcquire(t *testing.T) {
	c := startNodes(t, 3)
	a := newEngine(t, c.Addrs())
	held, err := a.Acquire(t.Context(), "x")
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Nodes: c.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := b.Acquire(t.Context(), "x")
		errc <- err
	}()
	// Close once the attempt is under way: its lease actor runs and its
	// first round went out.
	testwait.Eventually(t, 5*time.Second, "the Acquire's first round sent", func() bool { return acquiring(b) })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	err = <-errc
	if !errors.Is(err, ErrClosed) || !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("Acquire during Close = %v, want ErrNotAcquired and ErrClosed", err)
	}
	if errors.Is(err, ErrReleased) {
		t.Fatalf("Acquire during Close = %v: matches ErrReleased, but nothing was held", err)
	}
	var ae *AcquireError
	if !errors.As(err, &ae) || !errors.Is(ae.Cause, ErrClosed) || ae.Attempts < 1 {
		t.Fatalf("Acquire during Close = %v, want an *AcquireError caused by ErrClosed", err)
	}
	if vals := values(t, c, "x"); count(vals, held.Value()) < 2 || count(vals, held.Value())+count(vals, "") != 3 {
		t.Fatalf("keys after the contender's Close: %q; want the holder's on a majority and no other", vals)
	}
}

// acquiring reports whether e has a lease actor that sent a round.
func acquiring(e *Engine) bool {
	s := e.Stats()
	var sent uint64
	for _, n := range s.Nodes {
		sent += n.Commands
	}
	return s.Leases > 0 && sent > 0
}

func TestNewNeedsQuorumReachable(t *testing.T) {
	c := startNodes(t, 5)
	addrs := c.Addrs()
	for _, i := range []int{0, 1} {
		if err := c.Nodes[i].Kill(); err != nil {
			t.Fatal(err)
		}
	}
	e := newEngine(t, addrs)
	l, err := e.Acquire(t.Context(), "r")
	if err != nil {
		t.Fatalf("Acquire with 2 of 5 down at New: %v", err)
	}
	_ = l.Release(t.Context())

	if err := c.Nodes[2].Kill(); err != nil {
		t.Fatal(err)
	}
	e2, err := New(Config{Nodes: addrs})
	if err == nil {
		e2.Close()
		t.Fatal("New with 3 of 5 nodes down succeeded")
	}
	for _, a := range addrs[:3] {
		if !strings.Contains(err.Error(), a) {
			t.Fatalf("New error %q does not name %s", err, a)
		}
	}
}

// A TryAcquire on a resource that this engine holds, or that a caller of
// Acquire waits for here, is answered by the resource actor, without a
// round on the nodes.
func TestTryAcquireHeldHereAnsweredLocally(t *testing.T) {
	c := startNodes(t, 3)
	e := newEngine(t, c.Addrs())
	for _, held := range []func() (*Lease, error){
		func() (*Lease, error) { return e.TryAcquire(t.Context(), "here") },
		func() (*Lease, error) { return e.Acquire(t.Context(), "here") },
	} {
		l, err := held()
		if err != nil {
			t.Fatal(err)
		}
		// The acquire answered at a quorum: its command to node 1 may
		// still be on its way, and would count below.
		testwait.Eventually(t, 2*time.Second, "every node holds the key", func() bool {
			return slices.Equal(values(t, c, "here"), []string{l.Value(), l.Value(), l.Value()})
		})
		// And nothing else is on its way to a node (a release the last
		// iteration sent again, say, on a loaded machine).
		testwait.Eventually(t, 2*time.Second, "no command pending", func() bool {
			for _, n := range e.Stats().Nodes {
				if n.Pending != 0 {
					return false
				}
			}
			return true
		})
		before := e.Stats().Nodes[0].Commands
		_, err = e.TryAcquire(t.Context(), "here")
		var ae *AcquireError
		if !errors.Is(err, ErrNotAcquired) || !errors.As(err, &ae) || ae.Attempts != 0 || len(ae.Nodes) != 0 {
			t.Fatalf("TryAcquire of a resource held here = %v, want an *AcquireError of no round", err)
		}
		if after := e.Stats().Nodes[0].Commands; after != before {
			t.Fatalf("the refused TryAcquire sent %d commands to a node", after-before)
		}
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	l, err := e.TryAcquire(t.Context(), "here")
	if err != nil {
		t.Fatalf("TryAcquire once the resource is free here: %v", err)
	}
	_ = l.Release(t.Context())
}

// What a failed Acquire returns, a nil *Lease, answers as a lease never
// held, so that a deferred Release after a failed Acquire does not panic.
func TestNilLease(t *testing.T) {
	var l *Lease
	_, checkErr := l.Check(t.Context())
	withCtx, cancel := l.WithContext(t.Context())
	defer cancel()
	for name, err := range map[string]error{"Err": l.Err(), "Release": l.Release(t.Context()), "Extend": l.Extend(t.Context()),
		"Extend with a TTL": l.Extend(t.Context(), ExtendTTL(time.Second)), "Check": checkErr,
		"Context's cause": context.Cause(l.Context()), "WithContext's cause": context.Cause(withCtx)} {
		if !errors.Is(err, ErrNotAcquired) {
			t.Errorf("%s of a nil lease = %v, want ErrNotAcquired", name, err)
		}
	}
	if _, open := <-l.Done(); open {
		t.Error("Done of a nil lease is open")
	}
	if _, open := <-l.Events(); open {
		t.Error("Events of a nil lease is open")
	}
	if l.Resource() != "" || l.Value() != "" || l.Token() != 0 || !l.Until().IsZero() {
		t.Error("a nil lease names a resource, a value, a token or a deadline")
	}
}

// Release tells a holder whose lease had lost its keys: with another
// owner's key on a majority, or none, it fails with ErrLeaseLost and says
// what each node found; with its own key on a quorum, it succeeds though
// a minority holds another's (issue 29, 1).
func TestReleaseOfALostLease(t *testing.T) {
	c := startNodes(t, 3)
	e := newEngine(t, c.Addrs())
	for _, tc := range []struct {
		name          string
		foreign, gone []int
		lost          bool
	}{
		{"taken over on a majority", []int{0, 1}, nil, true},
		{"gone from a majority", nil, []int{1, 2}, true},
		{"taken over and gone", []int{0}, []int{2}, true},
		{"taken over on a minority", []int{2}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := e.TryAcquire(t.Context(), "lost")
			if err != nil {
				t.Fatal(err)
			}
			// The acquire answered at a quorum: its command to the third
			// node may still be on its way, and would set the key again
			// after the schedule below deleted it.
			testwait.Eventually(t, 2*time.Second, "every node holds the key", func() bool {
				return slices.Equal(values(t, c, "lost"), []string{l.Value(), l.Value(), l.Value()})
			})
			writeForeign(t, c, "lost", time.Minute, tc.foreign...)
			for _, i := range tc.gone {
				if _, err := c.Nodes[i].Do(t.Context(), "DEL", lockKey("lost")); err != nil {
					t.Fatal(err)
				}
			}
			err = l.Release(t.Context())
			if !tc.lost {
				if err != nil {
					t.Fatalf("Release with the lease's key on a quorum: %v", err)
				}
			} else {
				var re *ReleaseError
				if !errors.Is(err, ErrLeaseLost) || !errors.As(err, &re) {
					t.Fatalf("Release of a lease without its key on a majority = %v, want a *ReleaseError matching ErrLeaseLost", err)
				}
				for i, n := range re.Nodes {
					want := Granted
					switch {
					case slices.Contains(tc.foreign, i):
						want = Taken
					case slices.Contains(tc.gone, i):
						want = Absent
					}
					if n.Outcome != want && !errors.Is(n.Err, lease.ErrNotAnswered) {
						t.Errorf("node %d: %v, want %v", i, n.Outcome, want)
					}
				}
			}
			for _, n := range c.Nodes {
				if _, err := n.Do(t.Context(), "DEL", lockKey("lost")); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
