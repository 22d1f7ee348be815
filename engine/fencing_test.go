package engine

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlease/redlease/node"
)

// Successive holders of a resource, across engines, see strictly
// increasing tokens; a lease without WithFencing has token 0.
func TestFencingTokensIncrease(t *testing.T) {
	c := startNodes(t, 5)
	var engines []*Engine
	for range 3 {
		// A loaded machine (a stress run) once left a release unconfirmed
		// by a quorum within the default 50ms node timeout: the tokens are
		// under test here, not the timeout.
		engines = append(engines, newEngine(t, c.Addrs(), slowNodes, func(cfg *Config) { cfg.RetryAttempts = 100000 }))
	}
	ctx := t.Context()
	plain, err := engines[0].Acquire(ctx, "plain")
	if err != nil {
		t.Fatal(err)
	}
	if plain.Token() != 0 {
		t.Fatalf("token without WithFencing = %d", plain.Token())
	}

	var (
		mu   sync.Mutex
		last uint64
		n    atomic.Int32
		wg   sync.WaitGroup
	)
	for g := range 12 {
		e := engines[g%3]
		wg.Go(func() {
			for n.Add(1) <= 120 {
				l, err := e.Acquire(ctx, "fenced", WithFencing())
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock() // held: the previous holder has released
				if l.Token() <= last {
					t.Errorf("token %d after %d", l.Token(), last)
				}
				last = l.Token()
				mu.Unlock()
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if ev := <-plain.Events(); ev.Kind != Acquired || ev.Token != 0 {
		t.Fatalf("first event %+v, want Acquired with token 0", ev)
	}
}

// Counters live in Redis without persistence: after every node lost its
// data, the clock floor keeps the next token above the last one.
func TestFencingSurvivesRestartOfAllNodes(t *testing.T) {
	c := startNodes(t, 3)
	e := newEngine(t, c.Addrs(), func(cfg *Config) {
		cfg.RestartQuarantine = -1 // the floor, not the quarantine, is under test
		cfg.HealthInterval = 50 * time.Millisecond
	})
	ctx := t.Context()
	l, err := e.Acquire(ctx, "r", WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	before := l.Token()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		if err := n.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	var after uint64
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err := e.Acquire(ctx, "r", WithFencing())
		if err == nil {
			after = l.Token()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no lease after the restarts: %v", err)
		}
	}
	if after <= before {
		t.Fatalf("token %d after the restarts, %d before", after, before)
	}
}

// Fence counters of resources fenced once expire once idle: a thousand
// fenced acquisitions of distinct resources leave no key without a TTL
// (but the epoch marker), and none lives longer than node.FenceIdle
// (issue 27, 9).
func TestFenceCountersExpire(t *testing.T) {
	c := startNodes(t, 3)
	e := newEngine(t, c.Addrs())
	ctx := t.Context()
	for i := range 1000 {
		l, err := e.TryAcquire(ctx, fmt.Sprintf("job-%d", i), WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range c.Nodes {
		keys, err := n.Do(ctx, "KEYS", "*")
		if err != nil {
			t.Fatal(err)
		}
		fences := 0
		for _, k := range keys.([]any) {
			key := k.(string)
			if key == e.cfg.epochKey() {
				continue
			}
			pttl, err := n.Do(ctx, "PTTL", key)
			if err != nil {
				t.Fatal(err)
			}
			if ms := pttl.(int64); ms < 0 || ms > node.FenceIdle.Milliseconds() {
				t.Fatalf("node %d: %s lives %d ms more, want a TTL of at most %v", i, key, ms, node.FenceIdle)
			}
			if strings.HasSuffix(key, ":fence") {
				if ms := pttl.(int64); ms < (node.FenceIdle - time.Minute).Milliseconds() {
					t.Fatalf("node %d: %s lives %d ms more, want node.FenceIdle (batch.lua's fenceIdle)", i, key, ms)
				}
				fences++
			}
		}
		if fences == 0 {
			t.Fatalf("node %d kept no fence counter: nothing was checked", i)
		}
	}
}
