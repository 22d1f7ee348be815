package safety

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/redlease/redlease/engine"
	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/internal/testwait"
)

// Deterministic replays of schedules that once gave two holders at once
// (DESIGN.md §3, "Lessons paid for"). Each builds its schedule step by
// step on real nodes, waiting on conditions rather than on luck, and fails
// when two leases on one resource are held at the same time.
//
//	go test -race -count=1 -run Schedule -v ./safety/

// seedEpoch marks every node of c as one that served redlease and kept its
// data, so restart quarantine does not hold back tests that are not about
// it. It is the one place that knows how a node is marked.
func seedEpoch(t testing.TB, c *redisproc.Cluster) {
	t.Helper()
	if err := engine.MarkNew(t.Context(), engine.Config{Nodes: c.Addrs()}); err != nil {
		t.Fatal(err)
	}
}

// proxiedNode starts one node that served redlease before (seedEpoch)
// and a Proxy in front of it, closed after the test's engines.
func proxiedNode(t *testing.T) (*redisproc.Cluster, *Proxy) {
	t.Helper()
	c := redisproc.Start(t, 1)
	seedEpoch(t, c)
	p, err := NewProxy(c.Nodes[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return c, p
}

func newEngine(t *testing.T, cfg engine.Config) *engine.Engine {
	t.Helper()
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// holders tracks the leases of one resource in a schedule and checks that
// no two are held at once.
type holders struct {
	t        *testing.T
	c        *redisproc.Cluster
	resource string
	rec      Recorder
	leases   map[string]*engine.Lease // by holder name
}

// lastTry is a schedule's end: name's last try to take the resource
// (acquire is Acquire or TryAcquire), which must be refused; then the
// check. A lease is recorded as held, for check to report.
func (h *holders) lastTry(name string, acquire func() (*engine.Lease, error)) {
	h.t.Helper()
	if l, err := acquire(); err == nil {
		h.held(name, l)
	} else {
		h.t.Logf("%s refused, as it should be: %v", name, err)
	}
	h.check()
}

// withContenders runs schedule twice, each time on 3 fresh nodes that
// served redlease before: with a contender engine made after the restart
// (running false) and with one running through it (see contenderFor).
func withContenders(t *testing.T, schedule func(t *testing.T, c *redisproc.Cluster, running bool)) {
	for _, running := range []bool{false, true} {
		name := map[bool]string{false: "new engine", true: "running engine"}[running]
		t.Run(name, func(t *testing.T) {
			c := redisproc.Start(t, 3)
			seedEpoch(t, c)
			schedule(t, c, running)
		})
	}
}

// contenderFor returns the schedule's contender: made now when running,
// so that it runs through the schedule, else made on the first call.
func contenderFor(t *testing.T, cfg engine.Config, running bool) func() *engine.Engine {
	var e *engine.Engine
	if running {
		e = newEngine(t, cfg)
	}
	return func() *engine.Engine {
		if e == nil {
			e = newEngine(t, cfg)
		}
		return e
	}
}

func newHolders(t *testing.T, c *redisproc.Cluster, resource string) *holders {
	return &holders{t: t, c: c, resource: resource, leases: map[string]*engine.Lease{}}
}

// held records that name holds l since now.
func (h *holders) held(name string, l *engine.Lease) {
	h.rec.Held(h.resource, name, l.Value(), time.Now(), l.Until(), l.Token())
	h.leases[name] = l
}

// check fails the test if two leases are held right now (Err() == nil and
// Until() in the future) or if the recorded [acquired, Until] intervals of
// two of them overlap.
func (h *holders) check() {
	h.t.Helper()
	now := time.Now()
	var live []string
	for name, l := range h.leases {
		if l.Err() == nil && l.Until().After(now) {
			live = append(live, fmt.Sprintf("%s (until +%v)", name, l.Until().Sub(now).Round(time.Millisecond)))
		}
	}
	slices.Sort(live)
	overlaps, _ := h.rec.Check()
	if len(live) > 1 || len(overlaps) > 0 {
		h.t.Errorf("two holders of %q at once: held now by %s; overlapping holdings: %v; lock key on the nodes: %s",
			h.resource, strings.Join(live, ", "), overlaps, h.owners())
	}
}

// owners names the holder whose value each node keeps under the lock key.
func (h *holders) owners() string {
	var b strings.Builder
	for i, n := range h.c.Nodes {
		v, ok, err := n.Get(context.Background(), lockKey(h.resource))
		who := v
		for name, l := range h.leases {
			if l.Value() == v {
				who = name
			}
		}
		switch {
		case err != nil:
			who = "error: " + err.Error()
		case !ok:
			who = "none"
		}
		fmt.Fprintf(&b, "node %d: %s; ", i+1, who)
	}
	return strings.TrimSuffix(b.String(), "; ")
}

// mustOwn fails the test unless node i keeps want (a holder's value, or
// "" for no key) under the lock key: the schedule did not set up as meant.
func (h *holders) mustOwn(i int, want string) {
	h.t.Helper()
	v, ok, err := h.c.Nodes[i].Get(h.t.Context(), lockKey(h.resource))
	if err != nil || ok != (want != "") || v != want {
		h.t.Fatalf("setup: node %d holds %q (exists %v, err %v), want %q; nodes: %s", i+1, v, ok, err, want, h.owners())
	}
}

// quiet waits until e has no command pending on any node: its
// acquire returned at a quorum, and the last node's command, still on
// its way on a loaded machine, would land after the schedule's next step.
func (h *holders) quiet(e *engine.Engine) {
	h.t.Helper()
	testwait.Eventually(h.t, 5*time.Second, "the engine's commands answered", func() bool {
		for _, n := range e.Stats().Nodes {
			if n.Pending != 0 {
				return false
			}
		}
		return true
	})
}

// takeOnTwo has e take the resource on nodes 1 and 2 only: node 3 holds a
// foreign key during the acquire, deleted after it. It records the
// holding as name's.
func (h *holders) takeOnTwo(name string, e *engine.Engine) *engine.Lease {
	h.t.Helper()
	ctx := h.t.Context()
	if err := h.c.Nodes[2].Set(ctx, lockKey(h.resource), "foreign", 0); err != nil {
		h.t.Fatal(err)
	}
	l, err := e.TryAcquire(ctx, h.resource)
	if err != nil {
		h.t.Fatalf("setup: %s: %v", name, err)
	}
	h.held(name, l)
	h.mustOwn(0, l.Value())
	h.mustOwn(1, l.Value())
	h.quiet(e) // node 3 refused it: not after the key is gone
	if _, err := h.c.Nodes[2].Do(ctx, "DEL", lockKey(h.resource)); err != nil {
		h.t.Fatal(err)
	}
	return l
}

// waitQuietly waits until the caller called who waits for a resource
// does so quietly, queued on every node that answered and with no round
// of its own in flight: refused, then refused again by the round that
// looks once its engine's watchers listen. events: its engine's,
// subscribed before the call; the engine's line for the resource must
// not have been watched before.
func waitQuietly(t *testing.T, who string, events <-chan engine.Event) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	rechecked := false
	for {
		select {
		case ev := <-events:
			switch {
			case ev.Kind == engine.Woken && ev.Wake == engine.WakeRecheck:
				rechecked = true
			case rechecked && ev.Kind == engine.Waiting && !ev.Until.IsZero(): // refused by the holder
				return
			}
		case <-timeout:
			t.Fatalf("setup: %s not waiting quietly after 10s", who)
		}
	}
}

// waitQuarantines waits until no node of any engine is quarantined.
func waitQuarantines(t *testing.T, engines ...*engine.Engine) {
	t.Helper()
	var until time.Time
	for _, e := range engines {
		for _, n := range e.Stats().Nodes {
			if n.QuarantinedUntil.After(until) {
				until = n.QuarantinedUntil
			}
		}
	}
	select {
	case <-time.After(time.Until(until) + 10*time.Millisecond):
	case <-t.Context().Done():
		t.Fatal("cancelled while waiting for the quarantine to pass")
	}
}

// (a) "A pending epoch restore lands on a node that has restarted since."
// E1 meets fresh nodes (no epoch key), quarantines them for a TTL from
// their start and keeps the restore of the epoch key pending for the front
// of its next batch to each. It stays idle past the quarantine. E2 takes
// R on nodes 1 and 2 (node 3 holds a foreign key then). Node 1 is killed
// and restarted empty. E1's next Acquire(R) sends restore and acquire in
// one batch to the new process, which grants at once: E1 holds R beside
// E2. The restore must only reach the process that was judged safe.
func TestScheduleRestoreOnRestartedNode(t *testing.T) {
	c := redisproc.Start(t, 3) // fresh nodes: no epoch key
	const resource = "restore-after-restart"
	// No probes during the schedule: E1 is idle and learns nothing.
	cfg := engine.Config{Nodes: c.Addrs(), TTL: 2 * time.Second, HealthInterval: time.Hour}
	e1 := newEngine(t, cfg)
	e2 := newEngine(t, cfg)
	h := newHolders(t, c, resource)
	ctx := t.Context()

	for _, e := range []*engine.Engine{e1, e2} {
		for i, n := range e.Stats().Nodes {
			if !n.QuarantinedUntil.After(time.Now()) {
				t.Fatalf("setup: fresh node %d not quarantined: %+v", i+1, n)
			}
		}
	}
	waitQuarantines(t, e1, e2)

	h.takeOnTwo("E2", e2)

	if err := c.Nodes[0].Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.Nodes[0].Restart(); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond) // well within E2's validity and node 1's quarantine
	defer cancel()
	h.lastTry("E1", func() (*engine.Lease, error) { return e1.Acquire(actx, resource) })
}

// hookBackOff is a retry schedule that runs a hook when the first round
// failed, before the second starts.
type hookBackOff struct {
	rounds atomic.Int32
	hook   func()
}

func (b *hookBackOff) NextBackOff() time.Duration {
	if b.rounds.Add(1) == 1 {
		b.hook()
	}
	return 10 * time.Millisecond
}

func (b *hookBackOff) Reset() {}

// scriptSHA is the SHA1 by which redlease calls the script in
// ../node/<name>: the file the node package embeds.
func scriptSHA(t *testing.T, name string) (body, sha string) {
	t.Helper()
	b, err := os.ReadFile("../node/" + name)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(b)
	return string(b), hex.EncodeToString(sum[:])
}

// (b) "NOSCRIPT re-sends run after the rest of their batch." Node X's
// script cache held the acquire script but not the release script. X was
// stalled (redisproc.Stall, from another connection) with E1's acquire (round r)
// in flight. Nodes A and B hold foreign keys, so round r fails at once; its
// cleanup release (r+1) and, after A's foreign key is gone, the retry
// acquire (r+2) queue at X behind the stalled batch and go out together.
// The acquire is cached and grants "already mine"; the release answers
// NOSCRIPT, is re-sent with EVAL after the batch and deletes the key. E1
// counts X as granted, though X holds nothing of it, and E2 takes R
// through B and X. Commands to one node must take effect in the order
// issued, whatever the script cache holds.
//
// Every command now runs in one batch script (node/batch.lua), so a cache
// holds all of them or none: X's cache is emptied instead, and the stalled
// acquire fails with NOSCRIPT and is sent again in full. The release and
// the retry acquire then share one script call, in order, or, beyond
// node.maxScriptOps commands, calls sent again from the first that failed.
func TestScheduleNoscriptResendAfterBatch(t *testing.T) {
	c := redisproc.Start(t, 3)
	seedEpoch(t, c)
	const resource = "noscript-order"
	a, b, x := c.Nodes[0], c.Nodes[1], c.Nodes[2]
	ctx := t.Context()
	// A node timeout longer than the stall: X's late answers still count.
	cfg := engine.Config{Nodes: c.Addrs(), TTL: 10 * time.Second, NodeTimeout: 2 * time.Second, HealthInterval: time.Hour}
	e1 := newEngine(t, cfg)
	e2 := newEngine(t, cfg)
	h := newHolders(t, c, resource)

	_, batchSHA := scriptSHA(t, "batch.lua")
	if _, err := x.Do(ctx, "SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	if v, err := x.Do(ctx, "SCRIPT", "EXISTS", batchSHA); err != nil || fmt.Sprint(v) != "[0]" {
		t.Fatalf("setup: SCRIPT EXISTS batch = %v, %v; want [0]", v, err)
	}
	for _, n := range []*redisproc.Node{a, b} {
		if err := n.Set(ctx, lockKey(resource), "foreign", 0); err != nil {
			t.Fatal(err)
		}
	}

	woke, err := x.Stall(500 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	// Round r fails on A and B; before round r+2, A's foreign key goes.
	retry := &hookBackOff{hook: func() {
		if _, err := a.Do(context.Background(), "DEL", lockKey(resource)); err != nil {
			t.Errorf("setup: DEL on A: %v", err)
		}
	}}
	l1, err := e1.Acquire(ctx, resource, engine.WithRetry(func() backoff.BackOff { return retry }))
	if err != nil {
		t.Fatalf("setup: E1: %v", err)
	}
	h.held("E1", l1)
	if err := <-woke; err != nil {
		t.Fatal(err)
	}
	if n := retry.rounds.Load(); n != 1 {
		t.Fatalf("setup: E1 took %d failed rounds, want 1", n)
	}
	h.mustOwn(0, l1.Value())

	if _, err := b.Do(ctx, "DEL", lockKey(resource)); err != nil {
		t.Fatal(err)
	}
	h.lastTry("E2", func() (*engine.Lease, error) { return e2.TryAcquire(ctx, resource) })
}

// (c) "A restart that keeps the epoch key but loses recent writes is
// trusted." E2 holds R on nodes 1 and 2, its keys written after node 1's
// last snapshot. Node 1 restarts from that snapshot: it keeps the epoch
// key but not R's key. An engine that reads the epoch key as "kept its
// data" then takes R through nodes 1 and 3 beside E2: a new engine created
// after the restart, and an engine that was running (its probe does not
// notice: it reconnects and acquires). An epoch marker must say which
// process wrote it.
func TestScheduleSnapshotRestartTrusted(t *testing.T) {
	withContenders(t, func(t *testing.T, c *redisproc.Cluster, running bool) {
		const resource = "snapshot-restart"
		ctx := t.Context()
		cfg := engine.Config{Nodes: c.Addrs(), TTL: 10 * time.Second, HealthInterval: time.Hour}
		e2 := newEngine(t, cfg)
		contender := contenderFor(t, cfg, running)
		h := newHolders(t, c, resource)

		if err := c.Nodes[0].Save(ctx); err != nil { // the snapshot: epoch key, no lease
			t.Fatal(err)
		}
		h.takeOnTwo("E2", e2)

		if err := c.Nodes[0].RestartFromSnapshot(); err != nil {
			t.Fatal(err)
		}
		h.mustOwn(0, "")
		if _, ok, err := c.Nodes[0].Get(ctx, engine.DefaultKeyPrefix+"lineage"); !ok || err != nil {
			t.Fatalf("setup: the snapshot lost the epoch key (ok=%v err=%v)", ok, err)
		}

		e := contender()
		actx, cancel := context.WithTimeout(ctx, time.Second) // well within E2's validity
		defer cancel()
		h.lastTry("contender", func() (*engine.Lease, error) { return e.Acquire(actx, resource) })
	})
}

// (e) "A node flushed under a live connection keeps granting." E2 holds
// R on nodes 1 and 2. Node 1 is FLUSHALLed: it loses R's key and its
// epoch marker, but it is the same process and the contender's connection
// to it lives on, so no probe notices before the contender's next acquire.
// Node 1 (empty) and node 3 would grant it R beside E2. The acquire itself
// must find the marker gone, and the node sit out its quarantine: the
// batch script's epoch check, read once per script call.
func TestScheduleFlushUnderLiveConnection(t *testing.T) {
	c := redisproc.Start(t, 3)
	seedEpoch(t, c)
	const resource = "flush-live"
	ctx := t.Context()
	cfg := engine.Config{Nodes: c.Addrs(), TTL: 10 * time.Second, HealthInterval: time.Hour}
	e2 := newEngine(t, cfg)
	contender := newEngine(t, cfg) // connected and probed before the flush
	h := newHolders(t, c, resource)
	h.takeOnTwo("E2", e2)

	if _, err := c.Nodes[0].Do(ctx, "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	h.mustOwn(0, "")
	actx, cancel := context.WithTimeout(ctx, time.Second) // well within E2's validity
	defer cancel()
	h.lastTry("contender", func() (*engine.Lease, error) { return contender.Acquire(actx, resource) })
}

// (d) "A restart just before a second boundary ends its quarantine at
// once." INFO's uptime_in_seconds subtracts whole seconds: a process
// started at .85 reports 1 s of uptime at .12 of the next second. An engine
// that takes that for the uptime dates the start most of a second early,
// and a quarantine shorter than that second is over before it began. E1
// holds R on nodes 1 and 2; node 1 restarts empty at .85; just after the
// second turns, a contender (new, or running since before the restart)
// probes node 1, trusts it and takes R through nodes 1 and 3 beside E1.
func TestScheduleRestartJustBeforeASecond(t *testing.T) {
	withContenders(t, func(t *testing.T, c *redisproc.Cluster, running bool) {
		ctx := t.Context()
		// The default quarantine is MaxTTL, here the TTL: well under a second.
		cfg := engine.Config{Nodes: c.Addrs(), TTL: 600 * time.Millisecond, HealthInterval: time.Hour}
		e1 := newEngine(t, cfg)
		contender := contenderFor(t, cfg, running)
		for try := 1; ; try++ {
			resource := fmt.Sprintf("restart-before-a-second-%d", try)
			h := newHolders(t, c, resource)
			// E1 takes R and node 1 restarts from .8 of a wall-clock
			// second (INFO's seconds follow it); its uptime is read at .12
			// of the next.
			const before, after = 200 * time.Millisecond, 120 * time.Millisecond
			second := time.Now().Truncate(time.Second).Add(time.Second)
			time.Sleep(time.Until(second.Add(-before)))
			l1 := h.takeOnTwo("E1", e1)
			if err := c.Nodes[0].Restart(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Until(second.Add(after)))
			up, err := c.Nodes[0].ServerInfo(ctx, "uptime_in_seconds")
			if err != nil {
				t.Fatal(err)
			}
			if up != "1" || time.Until(l1.Until()) < 100*time.Millisecond {
				// The process started after the second turned, or too late.
				if try == 5 {
					t.Fatalf("setup: 5 tries without a restart just before a second (uptime %s)", up)
				}
				_ = l1.Release(ctx)
				continue
			}
			e := contender()
			actx, cancel := context.WithDeadline(ctx, l1.Until())
			defer cancel()
			h.lastTry("contender", func() (*engine.Lease, error) { return e.Acquire(actx, resource) })
			return
		}
	})
}

// (f) "A node that evicts keys when its memory fills forgets a held lock."
// E2 holds R on nodes 1 and 2. Node 1 is then given a memory limit with
// maxmemory-policy volatile-ttl (CONFIG SET; managed Redis often ships
// volatile-lru). A contender connects (a new engine), or runs through it
// (probing often); another tenant of node 1 writes cache entries with a
// TTL until node 1 has evicted R's key. The contender would take R on
// nodes 1 and 3 beside E2. Node 1 must not vote in acquires while it may
// evict lock keys, nor once it is set back to noeviction, before E2's
// lease has expired: it forgot it. A second new engine tries then too.
func TestScheduleEvictionUnderMemoryPressure(t *testing.T) {
	withContenders(t, func(t *testing.T, c *redisproc.Cluster, running bool) {
		ctx := t.Context()
		const resource = "evicted"
		cfg := engine.Config{Nodes: c.Addrs(), TTL: 10 * time.Second, HealthInterval: time.Hour}
		e2 := newEngine(t, cfg)
		_, contender := probingContender(t, cfg, running)
		h := newHolders(t, c, resource)
		l2 := h.takeOnTwo("E2", e2)

		probed := func() {
			if running {
				waitProbes(t, c.Nodes[0], 2)
			}
		}
		configSet := func(args ...string) {
			for i := 0; i < len(args); i += 2 {
				if _, err := c.Nodes[0].Do(ctx, "CONFIG", "SET", args[i], args[i+1]); err != nil {
					t.Fatal(err)
				}
			}
		}
		configSet("maxmemory", "2mb", "maxmemory-policy", "volatile-ttl")
		var refusedAtNew error
		if !running { // it connects before node 1 evicted anything
			contender, refusedAtNew = engine.New(cfg)
			if contender != nil {
				t.Cleanup(func() { _ = contender.Close() })
			}
		}
		probed()
		entry := strings.Repeat("x", 1000)
		for i := 0; ; i++ {
			if _, ok, err := c.Nodes[0].Get(ctx, lockKey(resource)); err != nil {
				t.Fatal(err)
			} else if !ok {
				break
			}
			if i == 20000 {
				t.Fatalf("setup: node 1 kept the lock key through %d cache entries", i)
			}
			if _, err := c.Nodes[0].Do(ctx, "SET", fmt.Sprintf("cache:%d", i), entry, "EX", "3600"); err != nil {
				t.Fatal(err)
			}
		}
		h.mustOwn(1, l2.Value())
		probed()
		h.lastTry("contender while node 1 evicts", func() (*engine.Lease, error) {
			if refusedAtNew != nil {
				return nil, refusedAtNew
			}
			return contender.TryAcquire(ctx, resource)
		})

		configSet("maxmemory-policy", "noeviction", "maxmemory", "0")
		probed()
		if running {
			h.lastTry("contender once node 1 stopped evicting", func() (*engine.Lease, error) {
				return contender.TryAcquire(ctx, resource)
			})
		}
		h.lastTry("new engine once node 1 stopped evicting", func() (*engine.Lease, error) {
			return newEngine(t, cfg).TryAcquire(ctx, resource)
		})
	})
}

// (g) "A promoted replica grants a lock it never heard of." Managed Redis
// often keeps a replica behind one address and promotes it when the
// primary fails. Replication is asynchronous: the replica may lack the
// latest lock keys, and the epoch marker it copied names the old primary,
// so it is an untrusted process, but one that has run for longer than the
// quarantine. Here the replica is cut off (REPLICAOF NO ONE: promoted)
// before E1 takes R on the primary; then the primary dies and the address
// reaches the replica. A contender (new, or running through the failover)
// would take R beside E1. A promoted replica must sit out the quarantine
// from when it is first seen.
func TestScheduleFailoverToALaggingReplica(t *testing.T) {
	for _, running := range []bool{false, true} {
		t.Run(map[bool]string{false: "new engine", true: "running engine"}[running], func(t *testing.T) {
			ctx := t.Context()
			c := redisproc.Start(t, 2)
			primary, replica := c.Nodes[0], c.Nodes[1]
			p, err := NewProxy(primary.Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			const resource = "failover"
			cfg := engine.Config{Nodes: []string{p.Addr()}, TTL: time.Second, HealthInterval: time.Hour}
			if _, err := primary.Do(ctx, "CONFIG", "SET", "repl-diskless-sync-delay", "0"); err != nil {
				t.Fatal(err)
			}
			_, port, _ := strings.Cut(primary.Addr(), ":")
			if _, err := replica.Do(ctx, "REPLICAOF", "127.0.0.1", port); err != nil {
				t.Fatal(err)
			}
			// The primary's first replica draws it a new replication id: mark after.
			testwait.Eventually(t, 10*time.Second, "setup: the replica's link up", func() bool {
				link, _ := replica.Info(ctx, "replication", "master_link_status")
				return link == "up"
			})
			if err := engine.MarkNew(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			primaryMarker, _, err := primary.Get(ctx, engine.DefaultKeyPrefix+"lineage")
			if err != nil {
				t.Fatal(err)
			}
			// The replica has the marker, and has run for longer than the
			// quarantine (MaxTTL, the TTL), as replicas do.
			testwait.Eventually(t, 10*time.Second, "setup: the replica with the marker, up for 3s", func() bool {
				marker, _, err := replica.Get(ctx, engine.DefaultKeyPrefix+"lineage")
				if err != nil {
					t.Fatal(err)
				}
				up, err := replica.ServerInfo(ctx, "uptime_in_seconds")
				if err != nil {
					t.Fatal(err)
				}
				s, _ := strconv.Atoi(up)
				return marker == primaryMarker && s >= 3
			})
			if _, err := replica.Do(ctx, "REPLICAOF", "NO", "ONE"); err != nil {
				t.Fatal(err)
			}
			e1 := newEngine(t, cfg)
			probing, contender := probingContender(t, cfg, running)
			h := newHolders(t, c, resource)
			l1, err := e1.TryAcquire(ctx, resource)
			if err != nil {
				t.Fatalf("setup: E1: %v", err)
			}
			h.held("E1", l1)
			h.mustOwn(0, l1.Value())
			h.mustOwn(1, "")

			if err := primary.Kill(); err != nil {
				t.Fatal(err)
			}
			p.Failover(replica.Addr())
			if running {
				waitProbes(t, replica, 2)
			}
			h.lastTry("contender", func() (*engine.Lease, error) {
				if !running {
					e, err := engine.New(probing)
					if err != nil {
						return nil, err
					}
					t.Cleanup(func() { _ = e.Close() })
					return e.TryAcquire(ctx, resource)
				}
				return contender.TryAcquire(ctx, resource)
			})
		})
	}
}

// probingContender is cfg probing every 20ms, so that a contender sees a
// node's change within moments, and, when running, that contender, made
// now.
func probingContender(t *testing.T, cfg engine.Config, running bool) (engine.Config, *engine.Engine) {
	cfg.HealthInterval = 20 * time.Millisecond
	if !running {
		return cfg, nil
	}
	return cfg, newEngine(t, cfg)
}

// waitProbes waits until k whole probes (four INFO sections each) ran on
// node n after the call: those of the only engine that probes it often.
func waitProbes(t *testing.T, n *redisproc.Node, k int) {
	t.Helper()
	const sections = 4
	infos := func() int {
		calls, err := n.Calls(t.Context(), "info")
		if err != nil {
			t.Fatal(err)
		}
		return calls
	}
	start := infos()
	testwait.Eventually(t, 10*time.Second, fmt.Sprintf("setup: %d whole probes of %s", k, n.Addr()), func() bool {
		return infos() >= start+k*sections+sections-1
	})
}

// A release grants the key to the waiter it names next, and tells it so
// in an announcement that a slow link delays (here by 150ms): the waiter
// must count its validity from before the grant (when it began to wait),
// not from the announcement, or it holds past its key's expiry, when the
// waiter after it (on a quick link) takes the key.
func TestScheduleLateGrantAnnouncement(t *testing.T) {
	c, p := proxiedNode(t)
	cfg := engine.Config{Nodes: c.Addrs(), TTL: 2 * time.Second}
	slow := cfg
	slow.Nodes = []string{p.Addr()}
	a, b, late := newEngine(t, cfg), newEngine(t, slow), newEngine(t, cfg)
	h := newHolders(t, c, "late")
	var mu sync.Mutex // h.leases, from the acquiring goroutines
	noPolling := engine.WithRetry(func() backoff.BackOff { return backoff.NewConstantBackOff(time.Minute) })
	acquire := func(name string, e *engine.Engine) <-chan struct{} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			l, err := e.Acquire(t.Context(), "late", noPolling)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				return
			}
			h.rec.Held("late", name, l.Value(), time.Now(), l.Until(), 0)
			mu.Lock()
			h.leases[name] = l
			mu.Unlock()
		}()
		return done
	}

	la, err := a.Acquire(t.Context(), "late")
	if err != nil {
		t.Fatal(err)
	}
	ha := h.rec.Held("late", "a", la.Value(), time.Now(), la.Until(), 0)
	bEvents, stopB := b.Subscribe(64)
	defer stopB()
	lateEvents, stopLate := late.Subscribe(64)
	defer stopLate()
	bDone := acquire("b", b)
	waitQuietly(t, "b", bEvents) // b's place in the queue before late's
	lateDone := acquire("late", late)
	waitQuietly(t, "late", lateEvents)

	p.SetDelay(150 * time.Millisecond)
	if err := la.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	h.rec.Ended(ha, time.Now(), la.Until())
	<-bDone
	<-lateDone // at b's key's expiry, about 2s on
	mu.Lock()
	defer mu.Unlock()
	h.check()
	p.SetDelay(0)
}
