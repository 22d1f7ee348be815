package safety

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redlease/redlease/engine"
	"github.com/redlease/redlease/internal/redisproc"
)

// Injection: a round of faults at a time (inject), and the injectors
// that need the run's own machinery (an engine, the spare, a lag).

// endWhenInjected ends the run (cancel) once Duration has passed and
// every chosen kind that has nodes to hit was injected MinEach times.
func (r *run) endWhenInjected(ctx context.Context, cancel context.CancelFunc) {
	if !sleep(ctx, r.cfg.Duration) {
		return
	}
	for {
		r.mu.Lock()
		done := true
		for _, k := range r.cfg.Kinds {
			if len(r.nodesFor(k)) > 0 && r.faults[k] < r.cfg.MinEach {
				done = false
			}
		}
		r.mu.Unlock()
		if done {
			cancel()
			return
		}
		if !sleep(ctx, 100*time.Millisecond) {
			return
		}
	}
}

// inject breaks nodes, one fault at a time: each round injects every
// chosen kind once, in random order (kill+restart, pause and slow link
// twice: the registry's perRound), with a short calm between faults. A fault that could not be
// injected (its own engine not connected in time, its lease refused by
// what the fault before it left) is tried once more at the end of the
// round: on a loaded machine a bounded run would otherwise miss kinds.
func (r *run) inject(ctx context.Context) {
	defer r.retireAll()
	rng := r.rand(0)
	var round []string
	for _, k := range r.cfg.Kinds {
		f, _ := kindNamed(k)
		for range max(f.perRound, 1) {
			round = append(round, k)
		}
	}
	if len(round) == 0 {
		return
	}
	for ctx.Err() == nil {
		rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		n := len(round)
		for i := 0; i < len(round); i++ {
			kind := round[i]
			if !sleep(ctx, time.Duration(100+rng.IntN(200))*time.Millisecond) {
				return
			}
			on := r.nodesFor(kind)
			if len(on) == 0 {
				continue
			}
			k := on[rng.IntN(len(on))]
			start := time.Now()
			err := r.fault(ctx, rng, kind, k)
			f := Injected{Kind: kind, Node: k, Start: start, End: time.Now()}
			if kind == FaultNewEngine {
				f.Node = -1 // hits no node
			}
			r.timeline = append(r.timeline, f)
			if err != nil {
				if r.cfg.Logf != nil && ctx.Err() == nil {
					r.cfg.Logf("safety: %s fault not injected: %v", kind, err)
				}
				if i < n {
					round = append(round, kind) // once more, at the end
				}
				continue
			}
			r.mu.Lock()
			r.faults[kind]++
			r.mu.Unlock()
		}
		round = round[:n]
	}
}

// fault injects one fault of kind on node k (and the next ones, for
// faults that hit several), by its injector in the registry, or says why
// it could not.
func (r *run) fault(ctx context.Context, rng *rand.Rand, kind string, k int) error {
	f, ok := kindNamed(kind)
	if !ok {
		return fmt.Errorf("safety: no fault kind %q", kind)
	}
	hold := time.Duration(150+rng.IntN(450)) * time.Millisecond
	return f.inject(r, ctx, rng, k, hold)
}

// acl takes pub/sub, transactions and CONFIG from node k's default user
// for hold (FaultACL). Half the time, once the engines' probes have met
// the denial, the node also reloads in place (as reload does): with
// CONFIG denied the engines cannot read whether DEBUG runs, and must
// count the node's losses in every batch as if it did.
func (r *run) acl(ctx context.Context, rng *rand.Rand, k int, hold time.Duration) (err error) {
	n := r.cluster.Nodes[k]
	if _, err := n.Do(ctx, "ACL", "SETUSER", "default", "-@pubsub", "-@transaction", "-config"); err != nil {
		return err
	}
	defer func() {
		_, restored := n.Do(context.WithoutCancel(ctx), "ACL", "SETUSER", "default", "+@all")
		err = errors.Join(err, restored)
	}()
	if rng.IntN(2) == 0 {
		sleep(ctx, hold)
		return nil
	}
	sleep(ctx, engine.DefaultHealthInterval+workHealth) // every engine probed it
	return r.reload(ctx, k, hold)
}

// sentinelFailover fails master set k over to its replica, which misses
// the writes of hold before (FaultSentinelFailover). The working engines
// keep acquiring and releasing throughout, and so does a laggard: an
// engine that probes its nodes only every laggardHealth, so that it keeps
// acquiring on the former master until Sentinel demotes it, while the
// others have met the new one. The old master becomes the replica.
func (r *run) sentinelFailover(ctx context.Context, k int, hold time.Duration) error {
	set := r.sets[k]
	stop, err := r.lag(ctx)
	if err != nil {
		return err
	}
	defer stop()
	r.nodesDown.Add(1) // quarantined once the engines meet the new master
	defer r.nodesDown.Add(-1)
	next, err := set.FailoverLosingWrites(ctx, func(*redisproc.Node) error {
		sleep(ctx, hold) // leases come and go on the master alone
		return nil
	})
	if next != nil {
		r.cluster.Nodes[k] = next
	}
	r.restarted[k] = time.Now()
	return err
}

// lag has a laggard work until stop: an engine that probes its nodes
// only every laggardHealth (and asks a cluster for its view as seldom),
// so that it keeps acquiring on a former master until it is demoted,
// while the others have met the new one.
func (r *run) lag(ctx context.Context) (stop func(), err error) {
	if r.laggard == nil {
		health := laggardHealth
		if slices.Contains(r.cfg.Topology, SentinelDefault) {
			health = laggardHealthDefault
		}
		e, err := r.startEngine("laggard", engine.Config{Nodes: r.addrs, TTL: r.cfg.TTL, HealthInterval: health})
		if err != nil {
			return nil, err
		}
		r.laggard = e
	}
	lctx, cancel := context.WithCancel(ctx)
	var lag sync.WaitGroup
	rng := r.rand(laggardStream + uint64(len(r.timeline))) // the injector's alone
	lag.Go(func() {
		for lctx.Err() == nil {
			if err := r.hold(lctx, r.laggard, "laggard", rng); err != nil {
				sleep(lctx, 10*time.Millisecond)
			}
		}
	})
	return func() {
		cancel()
		lag.Wait()
	}, nil
}

// evict has node n evict keys for a while (FaultEviction). The working
// engines probe the node before it can evict anything (it has a memory
// limit and a policy that evicts, but far above its use), and every engine
// (the idle ones at the default interval) after it evicted the last: that
// a node set to evict and filled within one health interval grants in
// between is a known limit, not what this tries.
func (r *run) evict(ctx context.Context, n *redisproc.Node, hold time.Duration) error {
	config := func(args ...string) error {
		for i := 0; i < len(args); i += 2 {
			if _, err := n.Do(ctx, "CONFIG", "SET", args[i], args[i+1]); err != nil {
				return err
			}
		}
		return nil
	}
	info := func(section, field string) (int, error) {
		v, err := n.Info(ctx, section, field)
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(v)
	}
	// limit sets the memory limit a little above what the node uses now.
	limit := func() error {
		used, err := info("memory", "used_memory")
		if err != nil {
			return err
		}
		return config("maxmemory", strconv.Itoa(used+256<<10))
	}
	err := func() error {
		// First a limit far above the node's use: the engines see a node
		// that may evict (and refuse it) before it can evict anything, as
		// the node's own memory may grow by 256KiB within one probe.
		if err := config("maxmemory", strconv.Itoa(1<<30), "maxmemory-policy", "volatile-ttl"); err != nil {
			return err
		}
		if !sleep(ctx, 2*workHealth) {
			return ctx.Err()
		}
		if err := limit(); err != nil {
			return err
		}
		before, err := info("stats", "evicted_keys")
		if err != nil {
			return err
		}
		entry := strings.Repeat("x", 1000)
		cache := []string{"UNLINK"}
		ooms := 0
		for evicted := before; evicted < before+100 && len(cache) <= 5000; {
			key := "cache:" + strconv.Itoa(len(cache))
			_, err := n.Do(ctx, "SET", key, entry, "EX", "3600")
			if err != nil && strings.HasPrefix(err.Error(), "OOM") && ooms < 20 {
				// Memory the node cannot evict (the engines' buffers,
				// under load) outgrew the headroom, and nothing with a TTL
				// is left to evict: raise the limit and fill on.
				ooms++
				if err := limit(); err != nil {
					return err
				}
				continue
			}
			if err != nil {
				return err
			}
			if cache = append(cache, key); len(cache)%50 == 0 {
				if evicted, err = info("stats", "evicted_keys"); err != nil {
					return err
				}
			}
		}
		sleep(ctx, hold)
		_, err = n.Do(ctx, cache...)
		return err
	}()
	if back := config("maxmemory-policy", "noeviction", "maxmemory", "0"); err == nil {
		err = back
	}
	sleep(ctx, engine.DefaultHealthInterval+workHealth)
	return err
}

// failover replaces node k by the spare (FaultFailover). The spare has run
// since the previous failover (or the run's start), longer than a
// quarantine: only its having been a replica tells it from a process
// trusted at once.
func (r *run) failover(ctx context.Context, k int, hold time.Duration) error {
	n, s := r.cluster.Nodes[k], r.spare.Nodes[0]
	if err := replicaOver(ctx, s, n, n.Addr()); err != nil {
		return err
	}
	sleep(ctx, hold) // leases come and go, and reach the spare
	if _, err := s.Do(ctx, "REPLICAOF", "NO", "ONE"); err != nil {
		return err
	}
	sleep(ctx, hold/2) // leases come and go on the node alone
	r.nodesDown.Add(1)
	defer r.nodesDown.Add(-1)
	_ = n.Kill()
	r.proxies[k].Failover(s.Addr())
	r.cluster.Nodes[k], r.spare.Nodes[0] = s, n
	r.restarted[k] = time.Now()
	// The next spare: the node's process, empty, on the host's clock.
	if n.ClockAhead() != 0 {
		if err := n.SetClockAhead(0); err != nil {
			return err
		}
	}
	return n.Restart()
}

// restart runs a restart of node k and notes when it ended.
func (r *run) restart(k int, restart func() error) error {
	err := restart()
	r.restarted[k] = time.Now()
	return err
}

// idleAcquire restarts node k empty and at once has the engine that idled
// longest acquire, hold and release a random resource. A fresh engine
// takes its place in the pool.
func (r *run) idleAcquire(ctx context.Context, rng *rand.Rand, k int) error {
	if len(r.idle) == 0 {
		return errors.New("no idle engine left") // addIdle failed
	}
	idle := r.idle[0]
	r.idle = r.idle[1:]
	defer func() {
		r.closeEngine(idle.e)
		if ctx.Err() == nil {
			if err := r.addIdle(); err != nil && r.cfg.Logf != nil {
				r.cfg.Logf("safety: creating an idle engine: %v", err)
			}
		}
	}()
	// Idle for longer than the quarantine.
	if !sleep(ctx, time.Until(idle.since.Add(r.cfg.quarantine()+time.Millisecond))) {
		return ctx.Err()
	}
	n := r.cluster.Nodes[k]
	r.nodesDown.Add(1)
	_ = n.Kill()
	err := r.restart(k, n.Restart)
	r.nodesDown.Add(-1)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, 2*r.cfg.TTL)
	defer cancel()
	_ = r.hold(actx, idle.e, fmt.Sprintf("%s@%v", idle.name, time.Since(idle.since).Round(time.Millisecond)), rng)
	return nil
}

// join creates an engine whose workers contend until the run ends or the
// engine retires, the oldest joined engine retiring beyond maxJoined.
func (r *run) join(ctx context.Context) error {
	e, err := r.newEngine(fmt.Sprintf("new%d", r.joins+1), workHealth)
	if err != nil {
		return err
	}
	jctx, cancel := context.WithCancel(ctx)
	j := &joinedEngine{e: e, cancel: cancel}
	r.joins++
	for w := range max(1, r.cfg.Workers/2) {
		name := fmt.Sprintf("new%d/w%d", r.joins, w)
		rng := r.rand(joinStreams + uint64(r.joins*r.cfg.Workers+w))
		j.work.Go(func() { r.worker(jctx, e, name, rng) })
	}
	r.joined = append(r.joined, j)
	if len(r.joined) > maxJoined {
		r.retire(r.joined[0])
		r.joined = r.joined[1:]
	}
	return nil
}

// retire stops a joined engine's workers and then closes it, without
// holding up the injector.
func (r *run) retire(j *joinedEngine) {
	j.cancel()
	r.wg.Go(func() {
		j.work.Wait()
		r.closeEngine(j.e)
	})
}

func (r *run) retireAll() {
	for _, j := range r.joined {
		r.retire(j)
	}
	r.joined = nil
}

// clockJump steps node k's wall clock ahead by 2 to 4 TTLs while it serves
// leases, so keys on it expire early. A node still on the host's clock is
// first restarted with its clock ahead (empty, like any restart); the step
// waits until every engine has stopped quarantining the node.
func (r *run) clockJump(ctx context.Context, rng *rand.Rand, k int) error {
	n := r.cluster.Nodes[k]
	jump := time.Duration(2+rng.IntN(3)) * r.cfg.TTL
	if n.ClockAhead() == 0 {
		r.nodesDown.Add(1)
		err := r.restart(k, func() error { return n.RestartClockAhead(jump) })
		r.nodesDown.Add(-1)
		if err != nil {
			return err
		}
	}
	serving := r.restarted[k].Add(r.cfg.quarantine() + time.Duration(100+rng.IntN(200))*time.Millisecond)
	if !sleep(ctx, time.Until(serving)) {
		return ctx.Err()
	}
	// No key is granted between the read of the keys and the step: the
	// node's writes wait (CLIENT PAUSE WRITE) until the clock stepped, so
	// Keys is every key the step may expire early. (Without the pause, a
	// holder granted in that window, some milliseconds, was an overlap no
	// jump explained: 5 in a 30 min run on 3 nodes.)
	if _, err := n.Do(ctx, "CLIENT", "PAUSE", "5000", "WRITE"); err != nil {
		return err
	}
	defer n.Do(context.WithoutCancel(ctx), "CLIENT", "UNPAUSE")
	keys, err := lockKeys(ctx, n)
	if err != nil {
		return err
	}
	ahead := n.ClockAhead() + jump
	from := time.Now()
	err = n.SetClockAhead(ahead)
	// Recorded even on error: the clock moved before TIME was read.
	r.jumps = append(r.jumps, ClockJump{Node: k, From: from, To: time.Now(), Ahead: ahead, Keys: keys})
	return err
}
