package engine

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
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
