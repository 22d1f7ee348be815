package safety

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/redlease/redlease/engine"
	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/node"
)

// Fault kinds of the grants and fencing (issue 27, 6, 7 and 9).
const (
	// FaultFenceExpiry: a fenced resource's counter expires (is deleted)
	// on every node between holders, as an idle one does after
	// node.FenceIdle: the next token starts again at the nodes' clocks and
	// must still be larger than the last.
	FaultFenceExpiry = "fence expiry"
	// FaultQuarantinedLeave: waiters give up (their Acquire's context
	// ends: they leave the queues of waiters) while a node evicts keys and
	// then sits out its quarantine: a leave that finds the key free names
	// the next waiter there, and must not grant it the key.
	FaultQuarantinedLeave = "leave on a quarantined node"
	// FaultKilledAfterRelease: a process releases a contended resource
	// and dies at once (its connections cut, nothing more sent): no key
	// may outlive it, such as a grant to the place its release kept for
	// its next caller (Report.Blocked).
	FaultKilledAfterRelease = "killed after release"
)

// grantFault injects one fault of the kinds above on node k.
func (r *run) grantFault(ctx context.Context, rng *rand.Rand, kind string, k int) error {
	switch kind {
	case FaultFenceExpiry:
		return r.fenceExpiry(ctx, rng)
	case FaultQuarantinedLeave:
		return r.quarantinedLeave(ctx, rng, k)
	case FaultKilledAfterRelease:
		return r.killedAfterRelease(ctx, rng)
	}
	return fmt.Errorf("safety: %q is no grant fault", kind)
}

// fenceExpiry deletes a fenced resource's counter on every node: as if it
// had expired, idle, a moment before the next holder's acquire. The
// even resources are the fenced ones (see hold).
func (r *run) fenceExpiry(ctx context.Context, rng *rand.Rand) error {
	if r.cfg.Resources < 1 {
		return errors.New("no resource")
	}
	res := 2 * rng.IntN((r.cfg.Resources+1)/2)
	key := node.FenceKey(lockKey(fmt.Sprintf("res-%d", res)))
	deleted := false
	var errs []error
	for i := range r.addrs {
		n, err := r.serverOf(ctx, i, key)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		got, err := n.Do(ctx, "DEL", key)
		errs = append(errs, err)
		deleted = deleted || got == int64(1)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if !deleted {
		return fmt.Errorf("no counter %s on any node yet", key)
	}
	return nil
}

// quarantinedLeave replays issue 27's schedule 6 on a resource of its
// own, with engines of its own (leases of five TTLs, time enough for the
// schedule): L holds on a bare quorum that includes node k; W, then Y,
// wait; node k evicts keys (another tenant's cache entries push out the
// workers' lock keys), L's as far as anyone can tell, and sits out its
// quarantine; Y gives up, and its leave on node k names W next there. W
// must not hold beside L: the recorder sees both.
func (r *run) quarantinedLeave(ctx context.Context, rng *rand.Rand, k int) error {
	nodes := len(r.cluster.Nodes)
	// Made once: an engine that meets a node that evicted keys before
	// sits it out at first contact.
	for len(r.leavers) < 3 {
		e, err := r.faultEngine(fmt.Sprintf("leave%d", len(r.leavers)), r.addrs, 5*r.cfg.TTL, faultPrefix)
		if err != nil {
			return err
		}
		r.leavers = append(r.leavers, e)
	}
	es := r.leavers
	// Not while they sit a node out since the last time: W would wait
	// for the node, not for L.
	if err := r.sitOut(ctx, es...); err != nil {
		return err
	}
	resource := fmt.Sprintf("leave-%d", rng.Uint64())
	key := faultKey(resource)
	// L on a bare quorum with node k: foreign keys on the others meanwhile.
	var foreign []int
	for _, j := range rng.Perm(nodes) {
		if j != k && len(foreign) < nodes-(nodes/2+1) {
			foreign = append(foreign, j)
		}
	}
	var foreigners []*redisproc.Node
	for _, j := range foreign {
		n, err := r.serverOf(ctx, j, key)
		if err != nil {
			return err
		}
		foreigners = append(foreigners, n)
	}
	for _, n := range foreigners {
		if err := n.Set(ctx, key, "foreign", 0); err != nil {
			return err
		}
	}
	l, err := es[0].TryAcquire(ctx, resource)
	for _, n := range foreigners {
		_, _ = n.Do(ctx, "DEL", key)
	}
	if err != nil {
		return err
	}
	hl := r.rec.Held(resource, "leave0/L", l.Value(), time.Now(), l.Until(), l.Token())
	defer func() {
		r.rec.Ended(hl, time.Now(), l.Until())
		_ = l.Release(context.Background())
	}()

	// waiting: e's caller waits, listening for the release (its first
	// wait on the resource rechecks once the watchers listen).
	waiting := func(e *engine.Engine, rechecks uint64) bool {
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if s := e.Stats(); s.Waiters[resource] == 1 && s.Wakeups.Recheck > rechecks {
				time.Sleep(20 * time.Millisecond) // the recheck round's refusal
				return true
			}
		}
		return false
	}
	rechecks := es[1].Stats().Wakeups.Recheck
	wctx, stopW := context.WithCancel(ctx)
	wDone := make(chan struct{})
	go func() {
		defer close(wDone)
		if lw, err := es[1].Acquire(wctx, resource, noPolling); err == nil {
			h := r.rec.Held(resource, "leave1/W", lw.Value(), time.Now(), lw.Until(), lw.Token())
			r.rec.Ended(h, time.Now(), lw.Until())
			_ = lw.Release(context.Background())
		}
	}()
	defer func() { stopW(); <-wDone }()
	if !waiting(es[1], rechecks) {
		return errors.New("W is not waiting")
	}
	time.Sleep(10 * time.Millisecond) // W's place in the queues before Y's
	rechecks = es[2].Stats().Wakeups.Recheck
	yctx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	go func() { _, _ = es[2].Acquire(yctx, resource, noPolling) }() // held, it would be L's overlap too: not recorded
	if !waiting(es[2], rechecks) {
		return errors.New("Y is not waiting")
	}

	r.nodesDown.Add(1) // it refuses acquires
	defer r.nodesDown.Add(-1)
	// Every engine, the idle ones at the default interval, probes the node
	// after its last eviction before the next fault, as in evict.
	defer sleep(ctx, engine.DefaultHealthInterval+workHealth)
	if err := r.evictSome(ctx, r.cluster.Nodes[k]); err != nil {
		return err
	}
	_, _ = r.cluster.Nodes[k].Do(ctx, "DEL", key) // evicted, as far as anyone can tell
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		now := time.Now()
		if es[1].Stats().Nodes[k].QuarantinedUntil.After(now) && es[2].Stats().Nodes[k].QuarantinedUntil.After(now) {
			break
		}
		if now.After(deadline) {
			return errors.New("node not quarantined by W's and Y's engines")
		}
	}
	giveUp()
	select { // W, named, goes: it must not win while L holds
	case <-wDone:
	case <-time.After(500 * time.Millisecond):
	}
	return nil
}

// sitOut waits until none of es sits a node out (a quarantine since a
// fault, or since it first met the nodes), at most five TTLs a node.
func (r *run) sitOut(ctx context.Context, es ...*engine.Engine) error {
	for _, e := range es {
		for _, n := range e.Stats().Nodes {
			if d := time.Until(n.QuarantinedUntil); d > 0 && !sleep(ctx, min(d, 5*r.cfg.TTL)) {
				return ctx.Err()
			}
		}
	}
	return nil
}

// noPolling is a waiter's retry schedule that leaves it to announcements.
var noPolling = engine.WithRetry(func() backoff.BackOff { return backoff.NewConstantBackOff(time.Minute) })

// evictSome has node n evict a few keys (the shortest-lived first: the
// workers' lock keys), then stop evicting and drop the cache that pushed
// them out.
func (r *run) evictSome(ctx context.Context, n *redisproc.Node) error {
	config := func(args ...string) error {
		for i := 0; i < len(args); i += 2 {
			if _, err := n.Do(ctx, "CONFIG", "SET", args[i], args[i+1]); err != nil {
				return err
			}
		}
		return nil
	}
	used, err := n.Info(ctx, "memory", "used_memory")
	if err != nil {
		return err
	}
	limit, err := strconv.Atoi(used)
	if err != nil {
		return err
	}
	before, err := n.Info(ctx, "stats", "evicted_keys")
	if err != nil {
		return err
	}
	// Room for the workers' keys meanwhile: only the cache fills it.
	if err := config("maxmemory", strconv.Itoa(limit+256<<10), "maxmemory-policy", "volatile-ttl"); err != nil {
		return err
	}
	// The working engines probe the node (it may evict: they refuse
	// acquires there) before it evicts anything, as in evict.
	if !sleep(ctx, 2*workHealth) {
		return errors.Join(ctx.Err(), config("maxmemory-policy", "noeviction", "maxmemory", "0"))
	}
	entry := strings.Repeat("x", 1000)
	cache := []string{"UNLINK"}
	evicted := false
	for len(cache) <= 5000 && !evicted && ctx.Err() == nil {
		key := "cache:" + strconv.Itoa(len(cache))
		if _, err := n.Do(ctx, "SET", key, entry, "EX", "3600"); err == nil { // OOM: nothing to evict yet
			cache = append(cache, key)
		}
		v, _ := n.Info(ctx, "stats", "evicted_keys")
		evicted = v != before
	}
	err = config("maxmemory-policy", "noeviction", "maxmemory", "0")
	if len(cache) > 1 {
		_, _ = n.Do(ctx, cache...)
	}
	if err == nil && !evicted {
		err = errors.New("nothing evicted")
	}
	return err
}

// faultEngine is an engine of a fault's own over addrs, whose leases have
// ttl, longer than the workers': time enough for the fault's schedule.
// prefix is its KeyPrefix: the workers' (DefaultKeyPrefix) for a fault
// that takes their resources, faultPrefix for one that takes its own.
func (r *run) faultEngine(name string, addrs []string, ttl time.Duration, prefix string) (*engine.Engine, error) {
	return r.startEngine(name, engine.Config{Nodes: addrs, TTL: ttl, KeyPrefix: prefix, UnsafeShortQuarantine: true, HealthInterval: workHealth})
}

// killedAfterRelease runs a process's last lease: an engine of its own,
// through proxies of its own, takes an unfenced resource (one that the
// workers contend for, so that its release keeps a place for its next
// caller) with a TTL of four, releases it, and dies at once: its proxies
// cut every connection (its watchers' too) before Close can send
// anything. A lock key that lives longer than any worker's lease (a TTL)
// on any node then can only be a grant to that process, which nobody will
// release: Report.Blocked counts it.
func (r *run) killedAfterRelease(ctx context.Context, rng *rand.Rand) error {
	proxies := make([]*Proxy, len(r.addrs))
	addrs := make([]string, len(r.addrs))
	defer func() {
		for _, p := range proxies {
			if p != nil {
				p.Close()
			}
		}
	}()
	for i, a := range r.addrs {
		if r.kindOf(i) != Standalone { // reached by its sentinels or its nodes: its link outlives the process
			addrs[i] = a
			continue
		}
		p, err := NewProxy(a)
		if err != nil {
			return err
		}
		proxies[i], addrs[i] = p, p.Addr()
	}
	// Its lease, held for a moment, has four TTLs: a key left behind
	// shows (a worker's lives one and a half at most). Not more: on the
	// workers' prefix, its TTL record lengthens their quarantines for
	// twice as long after.
	ttl := 4 * r.cfg.TTL
	e, err := r.faultEngine("dying", addrs, ttl, engine.DefaultKeyPrefix)
	if err != nil {
		return err
	}
	defer r.closeEngine(e)
	resource := fmt.Sprintf("res-%d", 1+2*rng.IntN(max(1, r.cfg.Resources/2)))
	actx, cancel := context.WithTimeout(ctx, 2*ttl)
	defer cancel()
	l, err := e.Acquire(actx, resource, workerRetry)
	if err != nil {
		return err
	}
	h := r.rec.Held(resource, "dying", l.Value(), time.Now(), l.Until(), l.Token())
	r.rec.Ended(h, time.Now(), l.Until())
	err = l.Release(ctx)
	for _, p := range proxies {
		if p != nil {
			p.Close() // the process dies: its connections close, nothing more is sent
		}
	}
	if err != nil {
		return err
	}
	// Past every worker's lease that was held at the release, a key with
	// more than a worker's TTL to live is the dead process's: on a
	// minority (its release had not reached it), it blocks nobody; on a
	// quorum, the resource.
	if !sleep(ctx, 2*r.cfg.TTL) {
		return ctx.Err()
	}
	left := map[string]int{}
	for i := range r.addrs {
		n, err := r.serverOf(ctx, i, lockKey(resource))
		if err != nil {
			return err
		}
		v, ok, err := n.Get(ctx, lockKey(resource))
		if pttl, err2 := n.PTTL(ctx, lockKey(resource)); err == nil && err2 == nil && ok && pttl > r.cfg.TTL+r.cfg.TTL/2 {
			left[v]++
		}
	}
	for _, nodes := range left {
		if nodes >= len(r.cluster.Nodes)/2+1 {
			r.blocked.Add(1)
			if r.cfg.Logf != nil {
				r.cfg.Logf("safety: %q blocked on %d nodes by a process that died after its release", resource, nodes)
			}
		}
	}
	return nil
}
