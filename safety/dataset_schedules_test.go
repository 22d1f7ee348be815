package safety

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlease/redlease/engine"
	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/internal/testwait"
	"github.com/redlease/redlease/node"
)

// Schedules of issue 27: a node whose dataset lost lock keys without a
// restart the engine could see (a flush, a resync, a reload, a process
// swapped under a kept connection, a clock step after a restart). Each
// ends with a contender that must be refused while a holder holds.
//
//	go test -race -count=1 -run 'Schedule(Flush|Repromoted|Failback|Reload|KeptConnection|ClockStep)' -v ./safety/

// waitRunLonger waits until every node's process has run for longer than
// d by INFO's uptime_in_seconds, less its truncation: an engine that goes
// by uptime would call it older than a quarantine of d.
func waitRunLonger(t *testing.T, d time.Duration, nodes ...*redisproc.Node) {
	t.Helper()
	want := int(d/time.Second) + 3
	for _, n := range nodes {
		testwait.Eventually(t, d+10*time.Second, fmt.Sprintf("setup: %s up for %ds", n.Addr(), want), func() bool {
			up, err := n.ServerInfo(t.Context(), "uptime_in_seconds")
			if err != nil {
				t.Fatal(err)
			}
			s, _ := strconv.Atoi(up)
			return s >= want
		})
	}
}

// 1. "A flush on a node that has run longer than the quarantine." E2
// holds R on nodes 1 and 2 (node 3 held a foreign key then). Node 1,
// which has run for longer than the quarantine, loses its dataset in
// place: FLUSHALL, FLUSHDB, FLUSHALL ASYNC or SWAPDB 0 1 (db 1 is empty).
// Same process, no marker. A new engine (a service starting, or
// restarting) that meets node 1 now must not trust it: it would take R
// through nodes 1 and 3 beside E2. InspectNodes must not report node 1 as
// serving either.
func TestScheduleFlushOnALongRunningNode(t *testing.T) {
	flushes := [][]string{{"FLUSHALL"}, {"FLUSHDB"}, {"FLUSHALL", "ASYNC"}, {"SWAPDB", "0", "1"}}
	for _, flush := range flushes {
		t.Run(strings.Join(flush, " "), func(t *testing.T) {
			t.Parallel() // each waits for its nodes to age
			c := redisproc.Start(t, 3)
			seedEpoch(t, c)
			ctx := t.Context()
			resource := "flush-" + strings.ToLower(strings.Join(flush, "-"))
			cfg := engine.Config{Nodes: c.Addrs(), TTL: 3 * time.Second, HealthInterval: time.Hour}
			waitRunLonger(t, cfg.TTL, c.Nodes[0])
			e2 := newEngine(t, cfg)
			h := newHolders(t, c, resource)
			h.takeOnTwo("E2", e2)

			if _, err := c.Nodes[0].Do(ctx, flush...); err != nil {
				t.Fatal(err)
			}
			h.mustOwn(0, "")
			// What an operator is told of it: not serving.
			if reports, err := engine.InspectNodes(ctx, cfg); err != nil {
				t.Fatal(err)
			} else if reports[0].Serves(time.Now()) {
				t.Errorf("InspectNodes reports the flushed node 1 as serving: %+v", reports[0])
			}
			h.lastTry("new engine", func() (*engine.Lease, error) {
				return newEngine(t, cfg).TryAcquire(ctx, resource)
			})
		})
	}
}

// 1'. "A running engine whose marker write is pending ignores a flush."
// E1 meets nodes that were never marked and have run for longer than the
// quarantine; it has nothing to send them yet, so the marker it means to
// write stays pending. E2 (which marks the nodes with its acquire) holds R
// on nodes 1 and 2. Node 1 is flushed. E1, which has not sent node 1 a
// batch since, takes R: the marker goes in front of its acquire, and node
// 1 (empty) and node 3 grant beside E2. A flush must count whoever was to
// write the marker.
func TestScheduleFlushWhileMarkerPending(t *testing.T) {
	c := redisproc.Start(t, 3) // never marked
	const resource = "flush-pending-marker"
	ctx := t.Context()
	cfg := engine.Config{Nodes: c.Addrs(), TTL: 2 * time.Second, HealthInterval: time.Hour}
	waitRunLonger(t, cfg.TTL, c.Nodes...)
	e1 := newEngine(t, cfg)
	e2 := newEngine(t, cfg)
	// Whatever quarantine the engines see in unmarked nodes, it is over
	// before the holder acquires.
	waitQuarantines(t, e1, e2)
	h := newHolders(t, c, resource)
	h.takeOnTwo("E2", e2)

	if _, err := c.Nodes[0].Do(ctx, "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	h.mustOwn(0, "")
	h.lastTry("E1", func() (*engine.Lease, error) { return e1.TryAcquire(ctx, resource) })
}

// 1”. The same without a planted key: E holds R on nodes 1 and 2
// because node 3, restarted empty, was still sitting out its quarantine
// when E acquired, near its end. Node 1, which has run for longer than the
// quarantine, is flushed. A new engine that meets the nodes then trusts
// node 1 at once and node 3 soon after (its quarantine counted from the
// process start, by INFO's uptime), and would take R through them before
// E's lease has expired.
func TestScheduleFlushAfterARestartQuarantine(t *testing.T) {
	c := redisproc.Start(t, 3)
	seedEpoch(t, c)
	const resource = "flush-after-quarantine"
	ctx := t.Context()
	// A TTL (and quarantine) long enough that INFO's whole seconds do not
	// hide the schedule; E probes often, to see node 3's restart at once.
	cfg := engine.Config{Nodes: c.Addrs(), TTL: 4 * time.Second, HealthInterval: time.Hour}
	waitRunLonger(t, cfg.TTL, c.Nodes[0])
	probing, _ := probingContender(t, cfg, false)
	e := newEngine(t, probing)
	h := newHolders(t, c, resource)

	if err := c.Nodes[2].Restart(); err != nil {
		t.Fatal(err)
	}
	var until time.Time
	testwait.Eventually(t, 5*time.Second, "setup: E quarantines the restarted node 3", func() bool {
		until = e.Stats().Nodes[2].QuarantinedUntil
		return until.After(time.Now())
	})
	// E takes R this long before node 3's quarantine ends, on nodes 1
	// and 2: node 3 still refuses.
	const beforeTheEnd = 150 * time.Millisecond
	time.Sleep(time.Until(until.Add(-beforeTheEnd)))
	l, err := e.TryAcquire(ctx, resource)
	if err != nil {
		t.Fatalf("setup: E: %v", err)
	}
	h.held("E", l)
	h.mustOwn(0, l.Value())
	h.mustOwn(1, l.Value())
	h.mustOwn(2, "")

	if _, err := c.Nodes[0].Do(ctx, "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithDeadline(ctx, l.Until())
	defer cancel()
	h.lastTry("new engine", func() (*engine.Lease, error) { return newEngine(t, cfg).Acquire(actx, resource) })
}

// replicate makes replica a replica of primary, caught up.
func replicate(t *testing.T, replica, primary *redisproc.Node) {
	t.Helper()
	if err := replica.ReplicaOf(t.Context(), primary); err != nil {
		t.Fatalf("setup: %v", err)
	}
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// promote makes n a primary again (REPLICAOF NO ONE).
func promote(t *testing.T, n *redisproc.Node) {
	t.Helper()
	if _, err := n.Do(t.Context(), "REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
}

// 2. "A marker that comes back through replication." Node 1 (P) is
// replicated by a spare R, which copies P's marker; R is cut off
// (promoted) before E1 takes R on nodes 1 and 2. P is then made a replica
// of R, which replaces its dataset by R's (a full resync: no E1 key, P's
// own marker), and promoted again. A contender, new or running through it
// all (probing often), must not trust P's marker: it names P, but P's data
// came from elsewhere.
func TestScheduleRepromotedPrimary(t *testing.T) {
	for _, running := range []bool{false, true} {
		t.Run(map[bool]string{false: "new engine", true: "running engine"}[running], func(t *testing.T) {
			ctx := t.Context()
			all := redisproc.Start(t, 4)
			p, spare := all.Nodes[0], all.Nodes[3]
			c := &redisproc.Cluster{Nodes: slices.Clone(all.Nodes[:3])} // a copy: Nodes[0] may be replaced
			const resource = "repromoted"
			cfg := engine.Config{Nodes: c.Addrs(), TTL: 5 * time.Second, HealthInterval: time.Hour}
			// P's first replica draws it a new replication id: mark after.
			replicate(t, spare, p)
			if err := engine.MarkNew(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			replicate(t, spare, p) // caught up: the spare has P's marker
			promote(t, spare)

			e1 := newEngine(t, cfg)
			probing, contender := probingContender(t, cfg, running)
			h := newHolders(t, c, resource)
			h.takeOnTwo("E1", e1)

			replicate(t, p, spare) // P's dataset is the spare's: without E1's key
			h.mustOwn(0, "")
			promote(t, p)
			if running {
				waitProbes(t, p, 2)
			}
			h.lastTry("contender", func() (*engine.Lease, error) {
				if contender == nil {
					contender = newEngine(t, probing)
				}
				return contender.TryAcquire(ctx, resource)
			})
		})
	}
}

// 2'. "A failback to a stale former primary behind one address." Node 1
// is an address (a proxy) in front of primary A, replicated by B. B is
// promoted and the address moved to it (a failover); A keeps running on
// its own, with its own marker. E1 takes R on B and node 2. The address
// moves back to A (a failback), whose data lacks E1's key. A contender
// that ran through it all (probing often) sees a process it met before
// and its valid marker, and must still not trust it: the node behind the
// address changed lineage under it.
//
// A new engine cannot be told A from a node that never lost a key (its
// marker, run id and replication id are all its own), so only a running
// engine is asked here.
func TestScheduleFailbackToAStalePrimary(t *testing.T) {
	ctx := t.Context()
	all := redisproc.Start(t, 4)
	a, b := all.Nodes[0], all.Nodes[3]
	p, err := NewProxy(a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	const resource = "failback"
	cfg := engine.Config{Nodes: []string{p.Addr(), all.Nodes[1].Addr(), all.Nodes[2].Addr()}, TTL: 5 * time.Second, HealthInterval: time.Hour}
	if err := engine.MarkNew(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	_, contender := probingContender(t, cfg, true)
	replicate(t, b, a)
	promote(t, b)
	p.Failover(b.Addr())
	waitProbes(t, b, 2) // the contender met B

	e1 := newEngine(t, cfg)
	waitQuarantines(t, e1, contender) // B may sit out a quarantine (a promoted replica)
	h := newHolders(t, &redisproc.Cluster{Nodes: []*redisproc.Node{b, all.Nodes[1], all.Nodes[2]}}, resource)
	h.takeOnTwo("E1", e1)

	p.Failover(a.Addr())
	waitProbes(t, a, 2)
	h.c.Nodes[0] = a // the node behind the address, for the report
	h.mustOwn(0, "")
	h.lastTry("contender", func() (*engine.Lease, error) { return contender.TryAcquire(ctx, resource) })
}

// 2”. "A failback to a master set's master that was never demoted"
// (issue 43, item 9b). A Sentinel master set, master A and replica B,
// is the only node. The set fails over to B and back to A while A is
// still a master: with Sentinel's default periods a former master keeps
// taking writes for some 10s after a failover before the sentinels make
// it a replica, and a failback within that time (a failover undone by an
// operator, or a second one as B fails) promotes an A that never lost
// its data, nor got what B took. Here A's ACL denies SLAVEOF and
// REPLICAOF but their NO ONE form (first-arg rules), which holds that
// window open instead of racing it: Sentinel's demotion of A is a MULTI
// that the denied SLAVEOF aborts whole, its promotion's SLAVEOF NO ONE
// goes through. A keeps its run id, its replication id and its marker,
// and the holder's key as it was before the failover, not its extension
// on B. An engine idle through it all (probes an hour apart; the
// promotion's CLIENT KILL drops its connection, so it probes first)
// meets the A it met before: only the set's count of failovers
// (Sentinel's config-epoch, 0, then 2) tells it that A's data lacks
// what B granted. Once the holder's key expires on A, the idle engine
// must still be refused while the extended lease holds: a quarantine
// that names the switch.
func TestScheduleFailbackToANeverDemotedMaster(t *testing.T) {
	ctx := t.Context()
	s := redisproc.StartSentinel(t, 1, 3)
	a, b := s.Servers[0], s.Servers[1]
	if _, err := a.Do(ctx, "ACL", "SETUSER", "default", "-slaveof", "-replicaof", "+slaveof|no", "+replicaof|no"); err != nil {
		t.Fatal(err)
	}
	runID, err := a.RunID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	replID, err := a.Info(ctx, "replication", "master_replid")
	if err != nil {
		t.Fatal(err)
	}
	const resource = "failback-never-demoted"
	cfg := engine.Config{Nodes: []string{node.Target{MasterSet: s.Name, Sentinels: s.SentinelAddrs()}.String()},
		TTL: 6 * time.Second, NodeTimeout: time.Second, HealthInterval: time.Hour} // a node timeout for loaded machines
	if err := engine.MarkNew(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	log := newEngineLog(cfg.Nodes)
	idleCfg := cfg
	idleCfg.Logger = log.logger("idle")
	idle := newEngine(t, idleCfg) // met A, at config-epoch 0
	probing, _ := probingContender(t, cfg, false)
	probing.Logger = log.logger("holder")
	holder := newEngine(t, probing)
	h := newHolders(t, &redisproc.Cluster{Nodes: []*redisproc.Node{a}}, resource)
	// A short lease on A, extended for longer on B.
	l, err := holder.TryAcquire(ctx, resource, engine.WithTTL(2*time.Second))
	if err != nil {
		t.Fatalf("setup: holder: %v", err)
	}
	h.held("holder", l)
	h.mustOwn(0, l.Value())
	testwait.Eventually(t, time.Second, "setup: B has the holder's key", func() bool {
		v, _, err := b.Get(ctx, lockKey(resource))
		return err == nil && v == l.Value()
	})

	switchMaster(t, s, b)
	// The holder's next probe moves it to B (and quarantines B, which
	// refuses acquires, not extensions).
	testwait.Eventually(t, 5*time.Second, "setup: the holder meets B", func() bool {
		return logged(log, "holder", "failed over to "+b.Addr())
	})
	before := l.Until()
	if err := l.Extend(ctx, engine.ExtendTTL(cfg.TTL)); err != nil {
		t.Fatalf("setup: the holder's extension on B: %v", err)
	}
	if !l.Until().After(before) {
		t.Fatalf("setup: the extension on B left the lease until %v", l.Until())
	}
	if d, err := b.PTTL(ctx, lockKey(resource)); err != nil || d < 2*time.Second {
		t.Fatalf("setup: the holder's key lives %v on B (%v): not extended there", d, err)
	}
	switchMaster(t, s, a)
	if id, err := a.RunID(ctx); err != nil || id != runID {
		t.Fatalf("setup: A's run id is %q (%v), was %q: restarted", id, err, runID)
	}
	if id, err := a.Info(ctx, "replication", "master_replid"); err != nil || id != replID {
		t.Fatalf("setup: A's replication id is %q (%v), was %q: demoted", id, err, replID)
	}
	// A's key, never extended, expires before the lease.
	testwait.Eventually(t, cfg.TTL, "setup: the holder's key expires on A", func() bool {
		_, ok, err := a.Get(ctx, lockKey(resource))
		return err == nil && !ok
	})
	if left := time.Until(l.Until()); left < time.Second {
		t.Fatalf("setup: the failovers took so long that the lease has %v left: the test proves little", left)
	}
	h.lastTry("idle engine", func() (*engine.Lease, error) {
		l, err := idle.TryAcquire(ctx, resource)
		if ae := (*engine.AcquireError)(nil); err != nil && (!errors.As(err, &ae) || !errors.Is(ae.Nodes[0].Err, engine.ErrQuarantined)) {
			t.Errorf("the idle engine was refused, but not for a quarantine: %v", err)
		}
		return l, err
	})
	if why := "switched masters since the last probe"; !logged(log, "idle", why) {
		t.Errorf("the idle engine never quarantined the node for a switch (%q); it logged: %v", why, log.between(time.Time{}, time.Now(), "", "idle"))
	}
}

// logged reports whether the engine named engine logged a line about its
// node that contains text.
func logged(log *engineLog, engine, text string) bool {
	return slices.ContainsFunc(log.between(time.Time{}, time.Now(), "", engine), func(l logLine) bool {
		return strings.Contains(l.Text, text)
	})
}

// switchMaster asks s's sentinels to fail over (SENTINEL FAILOVER, again
// while one runs or no replica is fit yet) and waits until a majority of
// them name want and want answers as a master. It does not wait for the
// former master to follow: it may refuse.
func switchMaster(t *testing.T, s *redisproc.SentinelSet, want *redisproc.Node) {
	t.Helper()
	ctx := t.Context()
	testwait.Eventually(t, 10*time.Second, "setup: SENTINEL FAILOVER accepted", func() bool {
		_, err := s.Sentinels[0].Do(ctx, "SENTINEL", "FAILOVER", s.Name)
		if err != nil && !strings.Contains(err.Error(), "INPROG") && !strings.Contains(err.Error(), "NOGOODSLAVE") {
			t.Fatal(err)
		}
		return err == nil
	})
	testwait.Eventually(t, 10*time.Second, "setup: the sentinels name "+want.Addr(), func() bool {
		m, err := s.Master(ctx)
		if err != nil || m != want {
			return false
		}
		r, err := want.Info(ctx, "replication", "role")
		return err == nil && r == "master"
	})
}

// 3. "An in-place rollback." Node 1 is snapshotted (SAVE: marker, no
// lease); E2 takes R on nodes 1 and 2; DEBUG RELOAD NOSAVE reloads node
// 1 from the snapshot: same process, same run id, same marker, E2's key
// gone. A contender, new or running through it (probing often, or not at
// all where CONFIG is denied: reloadInPlace), must not take R through
// nodes 1 and 3.
func TestScheduleReloadInPlace(t *testing.T) {
	withContenders(t, func(t *testing.T, c *redisproc.Cluster, running bool) {
		reloadInPlace(t, c, running, false)
	})
	t.Run("running engine, CONFIG denied", func(t *testing.T) {
		c := redisproc.Start(t, 3)
		seedEpoch(t, c)
		reloadInPlace(t, c, true, true)
	})
}

// reloadInPlace is TestScheduleReloadInPlace's schedule. configDenied:
// the nodes' ACL refuses CONFIG GET, so that an engine cannot read
// enable-debug-command and must take DEBUG as possible
// (node.Info.ConfigDenied); the contender meets the nodes so and probes no
// more, and its batch on node 1 must count the node's losses. Were DEBUG
// taken as disabled there, it would find the marker it requires and hold
// R beside E2 (the acl fault kind's bug class).
func reloadInPlace(t *testing.T, c *redisproc.Cluster, running, configDenied bool) {
	ctx := t.Context()
	if configDenied {
		for _, n := range c.Nodes {
			if _, err := n.Do(ctx, "ACL", "SETUSER", "default", "-config"); err != nil {
				t.Fatal(err)
			}
		}
	}
	const resource = "reload"
	cfg := engine.Config{Nodes: c.Addrs(), TTL: 5 * time.Second, HealthInterval: time.Hour}
	e2 := newEngine(t, cfg)
	probing, contender := probingContender(t, cfg, running && !configDenied)
	if configDenied {
		contender = newEngine(t, cfg)
	}
	h := newHolders(t, c, resource)
	if err := c.Nodes[0].Save(ctx); err != nil {
		t.Fatal(err)
	}
	h.takeOnTwo("E2", e2)

	if _, err := c.Nodes[0].Do(ctx, "DEBUG", "RELOAD", "NOSAVE"); err != nil {
		t.Fatal(err)
	}
	h.mustOwn(0, "")
	if running && !configDenied {
		waitProbes(t, c.Nodes[0], 2)
	}
	h.lastTry("contender", func() (*engine.Lease, error) {
		if contender == nil {
			contender = newEngine(t, probing)
		}
		return contender.TryAcquire(ctx, resource)
	})
}

// 4. "A connection that outlives its process." The contender reaches
// node 1 through a proxy that keeps client connections when the process
// behind it changes (KeepProxy), and probed node 1 through it. E2 takes R
// on nodes 1 and 2 (directly). Node 1's process is then replaced, and the
// proxy moves the contender's connection to the new one: a restart from
// a snapshot taken before E2's acquire (marker, no lease), or a replica
// that stopped replicating before it (the old marker, no lease). Before
// any probe, the contender acquires: its batch meets a process it never
// probed (NOSCRIPT, for one) and must not be granted.
func TestScheduleKeptConnectionNewProcess(t *testing.T) {
	for _, swap := range []string{"snapshot restart", "lagging replica"} {
		t.Run(swap, func(t *testing.T) {
			ctx := t.Context()
			all := redisproc.Start(t, 4)
			c := &redisproc.Cluster{Nodes: slices.Clone(all.Nodes[:3])} // a copy: Nodes[0] may be replaced
			x, spare := c.Nodes[0], all.Nodes[3]
			if swap == "lagging replica" {
				// x's first replica draws it a new replication id: mark after.
				replicate(t, spare, x)
			}
			seedEpoch(t, c)
			kp, err := NewKeepProxy(x.Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(kp.Close)
			const resource = "kept-connection"
			cfg := engine.Config{Nodes: c.Addrs(), TTL: 5 * time.Second, HealthInterval: time.Hour}
			via := cfg
			via.Nodes = append([]string{kp.Addr()}, cfg.Nodes[1:]...)
			contender := newEngine(t, via) // connected to x through the proxy, and probed it
			e2 := newEngine(t, cfg)
			h := newHolders(t, c, resource)

			switch swap {
			case "snapshot restart":
				if err := x.Save(ctx); err != nil {
					t.Fatal(err)
				}
			case "lagging replica":
				replicate(t, spare, x) // caught up: the spare has x's marker
				promote(t, spare)
			}
			h.takeOnTwo("E2", e2)

			switch swap {
			case "snapshot restart":
				if err := x.RestartFromSnapshot(); err != nil {
					t.Fatal(err)
				}
			case "lagging replica":
				x = spare
				h.c.Nodes[0] = x
			}
			if err := kp.Switch(x.Addr()); err != nil {
				t.Fatal(err)
			}
			h.mustOwn(0, "")
			h.lastTry("contender", func() (*engine.Lease, error) { return contender.TryAcquire(ctx, resource) })
		})
	}
}

// 5. "A clock step after a restart." E2 holds R on nodes 1 and 2. Node 1
// restarts empty, and its wall clock then steps an hour ahead (NTP
// after boot): INFO's uptime_in_seconds says it has run for an hour. A
// contender, new or running through it, must still keep node 1 out until
// E2's lease has expired: how long a process has run is not what its
// clock says.
func TestScheduleClockStepAfterRestart(t *testing.T) {
	withContenders(t, func(t *testing.T, c *redisproc.Cluster, running bool) {
		ctx := t.Context()
		const resource = "clock-step"
		cfg := engine.Config{Nodes: c.Addrs(), TTL: 5 * time.Second, HealthInterval: time.Hour}
		e2 := newEngine(t, cfg)
		contender := contenderFor(t, cfg, running)
		h := newHolders(t, c, resource)
		h.takeOnTwo("E2", e2)

		if err := c.Nodes[0].RestartClockAhead(0); err != nil { // empty, on a clock we can step
			t.Fatal(err)
		}
		if err := c.Nodes[0].SetClockAhead(time.Hour); err != nil {
			t.Fatal(err)
		}
		if up, err := c.Nodes[0].ServerInfo(ctx, "uptime_in_seconds"); err != nil || atoi(up) < 3600 {
			t.Fatalf("setup: uptime_in_seconds %q after the step (%v), want an hour", up, err)
		}
		h.mustOwn(0, "")
		// Acquire, not TryAcquire: a running contender's first round
		// finds its connection to node 1 gone, and probes it.
		actx, cancel := context.WithTimeout(ctx, time.Second) // well within E2's validity
		defer cancel()
		h.lastTry("contender", func() (*engine.Lease, error) { return contender().Acquire(actx, resource) })
	})
}

// 9. "A released lease taken up again from a rolled-back dataset." L
// holds R on every node; nodes 1 and 2 are snapshotted (SAVE: L's key);
// L is released and M takes R on every node; DEBUG RELOAD NOSAVE rolls
// nodes 1 and 2 back to the snapshot: L's key is there again, M's gone.
// A contender that still has L's value (a process that was to finish
// L's work) takes it up with Resume: its check must not count nodes 1
// and 2, whose datasets lost writes, or it would hold beside M. Running
// through it, the contender has not probed the nodes since (its probes
// are an hour apart): the check's own epoch test is all that stands.
func TestScheduleResumeAfterReload(t *testing.T) {
	withContenders(t, func(t *testing.T, c *redisproc.Cluster, running bool) {
		ctx := t.Context()
		const resource = "resumed"
		cfg := engine.Config{Nodes: c.Addrs(), TTL: 5 * time.Second, HealthInterval: time.Hour}
		e := newEngine(t, cfg)
		contender := contenderFor(t, cfg, running)
		h := newHolders(t, c, resource)
		l, err := e.TryAcquire(ctx, resource)
		if err != nil {
			t.Fatalf("setup: L: %v", err)
		}
		h.quiet(e) // every node's answer in: the snapshot has L
		for i := range 2 {
			if err := c.Nodes[i].Save(ctx); err != nil {
				t.Fatal(err)
			}
		}
		value := l.Value()
		if err := l.Release(ctx); err != nil {
			t.Fatalf("setup: L's release: %v", err)
		}
		m, err := e.TryAcquire(ctx, resource)
		if err != nil {
			t.Fatalf("setup: M: %v", err)
		}
		h.held("M", m)
		h.quiet(e) // L's release and M's acquire done everywhere: the reloads come after
		for i := range 2 {
			if _, err := c.Nodes[i].Do(ctx, "DEBUG", "RELOAD", "NOSAVE"); err != nil {
				t.Fatal(err)
			}
			h.mustOwn(i, value)
		}
		h.lastTry("contender", func() (*engine.Lease, error) {
			return contender().Resume(ctx, engine.Handle{Resource: resource, Value: value})
		})
	})
}

// 6. "A failover behind one address" (issue 43, liveness). A master and
// its replica behind one address that sends new connections to the
// current master (a DNS name, a lazily reconnecting proxy, a managed
// endpoint); the replica takes over (promoted, the master made its
// replica) and the address moves, keeping the connections it made. An
// engine that ran through it must meet the new master within one
// quarantine, not see a read-only replica at every probe for ever: a node
// found a replica is dialled again (node.Conn.redial). Before, 11 of 14
// runs never used the new master within up to 93s.
func TestScheduleFailoverBehindOneAddress(t *testing.T) {
	ctx := t.Context()
	c := redisproc.Start(t, 2)
	a, b := c.Nodes[0], c.Nodes[1]
	replicate(t, b, a) // a draws a new replication id: mark after
	p, err := NewProxy(a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	const quarantine = time.Second
	cfg := engine.Config{Nodes: []string{p.Addr()}, TTL: quarantine, RestartQuarantine: quarantine, HealthInterval: 100 * time.Millisecond}
	if err := engine.MarkNew(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, cfg)
	l, err := e.Acquire(ctx, "before")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	promote(t, b)
	replicate(t, a, b)
	p.Retarget(b.Addr())
	switched := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 10*quarantine) // a bound, not the measure
	defer cancel()
	l, err = e.Acquire(ctx, "after")
	if err != nil {
		t.Fatalf("%v after the failover, the engine still does not acquire: %v", time.Since(switched).Round(time.Millisecond), err)
	}
	t.Logf("acquired %v after the failover (quarantine %v)", time.Since(switched).Round(time.Millisecond), quarantine)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
