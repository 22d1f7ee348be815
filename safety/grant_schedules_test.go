package safety

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/redlease/redlease/engine"
	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/internal/testwait"
)

// Issue 27, 6: "A grant on a node that sits out a quarantine." L holds R
// on nodes 1 and 3 (node 2 held a foreign key during its acquire); W, then
// Y, wait for it, queued on every node. Node 3 evicts keys, L's among them,
// and sits out its quarantine (a fresh TryAcquire is refused). Y gives up:
// its leave on node 3 finds the key free and names W next there. Had it
// granted W the key too, W would count node 3 and take node 2, and hold
// beside L. A node that sits out a quarantine grants nothing: W must not
// hold while L does.
func TestScheduleGrantOnAQuarantinedNode(t *testing.T) {
	c := redisproc.Start(t, 3)
	seedEpoch(t, c)
	ctx := t.Context()
	const resource = "sitting-out"
	cfg := engine.Config{Nodes: c.Addrs(), TTL: 10 * time.Second, HealthInterval: 50 * time.Millisecond}
	el, ew, ey := newEngine(t, cfg), newEngine(t, cfg), newEngine(t, cfg)
	h := newHolders(t, c, resource)
	noPolling := engine.WithRetry(func() backoff.BackOff { return backoff.NewConstantBackOff(time.Minute) })
	defer func() {
		if t.Failed() {
			t.Logf("nodes: %s", h.owners())
		}
	}()

	// L on nodes 1 and 3.
	if err := c.Nodes[1].Set(ctx, lockKey(resource), "foreign", 0); err != nil {
		t.Fatal(err)
	}
	l, err := el.TryAcquire(ctx, resource)
	if err != nil {
		t.Fatalf("setup: L: %v", err)
	}
	h.held("L", l)
	h.quiet(el) // node 2 refused it: not after the key is gone
	if _, err := c.Nodes[1].Do(ctx, "DEL", lockKey(resource)); err != nil {
		t.Fatal(err)
	}
	h.mustOwn(0, l.Value())
	h.mustOwn(1, "")
	h.mustOwn(2, l.Value())

	// W, then Y, wait: W queued on every node before Y comes.
	wEvents, stopWEvents := ew.Subscribe(64)
	defer stopWEvents()
	yEvents, stopYEvents := ey.Subscribe(64)
	defer stopYEvents()
	wctx, stopW := context.WithCancel(ctx)
	wDone := make(chan struct{})
	go func() {
		defer close(wDone)
		if lw, err := ew.Acquire(wctx, resource, noPolling); err == nil {
			h.held("W", lw)
		}
	}()
	waitQuietly(t, "W", wEvents)
	yctx, giveUp := context.WithCancel(ctx)
	yDone := make(chan struct{})
	go func() {
		defer close(yDone)
		if ly, err := ey.Acquire(yctx, resource, noPolling); err == nil {
			t.Errorf("setup: Y acquired: %s", ly.Value())
		}
	}()
	waitQuietly(t, "Y", yEvents)

	// Node 3 evicts keys (another tenant's cache entries, whose TTLs are
	// the shortest), and with them L's key, then stops evicting.
	n3 := c.Nodes[2]
	config := func(args ...string) {
		for i := 0; i < len(args); i += 2 {
			if _, err := n3.Do(ctx, "CONFIG", "SET", args[i], args[i+1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	config("maxmemory", "2mb", "maxmemory-policy", "volatile-ttl")
	entry := strings.Repeat("x", 1000)
	for i := 0; ; i++ {
		if v, err := n3.Info(ctx, "stats", "evicted_keys"); err != nil {
			t.Fatal(err)
		} else if v != "0" {
			break
		}
		if i == 20000 {
			t.Fatal("setup: node 3 evicted nothing")
		}
		if _, err := n3.Do(ctx, "SET", fmt.Sprintf("cache:%d", i), entry, "EX", "5"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n3.Do(ctx, "DEL", lockKey(resource)); err != nil { // evicted, as far as anyone can tell
		t.Fatal(err)
	}
	config("maxmemory-policy", "noeviction", "maxmemory", "0")
	testwait.Eventually(t, 10*time.Second, "setup: node 3 quarantined by Y's and W's engines", func() bool {
		return ey.Stats().Nodes[2].QuarantinedUntil.After(time.Now()) && ew.Stats().Nodes[2].QuarantinedUntil.After(time.Now())
	})
	if fresh, err := newEngine(t, cfg).TryAcquire(ctx, resource); err == nil {
		h.held("fresh", fresh)
		h.check()
		t.Fatal("a fresh TryAcquire took R beside L")
	}

	// Y gives up: its leave on node 3 names W.
	giveUp()
	<-yDone
	select {
	case <-wDone:
	case <-time.After(2 * time.Second): // W, named, tried and waits again
		stopW()
		<-wDone
	}
	stopW()
	h.check()
}
