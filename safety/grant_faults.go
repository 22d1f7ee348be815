package safety

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redlease/redlease/engine"
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
	key := lockKey(fmt.Sprintf("res-%d", res)) + ":fence"
	deleted := false
	var errs []error
	for _, n := range r.cluster.Nodes {
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

// quarantinedLeave has node k evict keys (as FaultEviction) while an
// engine of its own runs callers whose Acquire gives up after a random
// part of a TTL, through the eviction and the quarantine that follows it.
func (r *run) quarantinedLeave(ctx context.Context, rng *rand.Rand, k int) error {
	e, err := r.newEngine("leaver", workHealth)
	if err != nil {
		return err
	}
	defer r.closeEngine(e)
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range 4 {
		wrng := rand.New(rand.NewPCG(rng.Uint64(), uint64(w)))
		wg.Go(func() {
			for i := 0; lctx.Err() == nil; i++ {
				actx, cancel := context.WithTimeout(lctx, time.Duration(wrng.Int64N(int64(r.cfg.TTL))))
				_ = r.hold(actx, e, fmt.Sprintf("leaver/w%d", w), wrng)
				cancel()
			}
		})
	}
	r.nodesDown.Add(1) // it refuses acquires
	err = r.evict(ctx, r.cluster.Nodes[k], time.Duration(100+rng.IntN(200))*time.Millisecond)
	r.nodesDown.Add(-1)
	stop()
	wg.Wait()
	return err
}

// killedAfterRelease runs a process's last lease: an engine of its own,
// through proxies of its own, takes an unfenced resource (one that the
// workers contend for, so that its release keeps a place for its next
// caller) with a TTL of ten, releases it, and dies at once: its proxies
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
		p, err := NewProxy(a)
		if err != nil {
			return err
		}
		proxies[i], addrs[i] = p, p.Addr()
	}
	// Its lease, held for a moment, has ten TTLs: a key left behind shows.
	ttl := 10 * r.cfg.TTL
	e, err := engine.New(engine.Config{Nodes: addrs, TTL: ttl, RestartQuarantine: r.cfg.RestartQuarantine,
		UnsafeShortQuarantine: true, UnsafeEviction: r.cfg.UnsafeEviction, HealthInterval: workHealth,
		RetryAttempts: 8, Logger: r.log.logger("dying")})
	if err != nil {
		return err
	}
	defer func() { _ = e.Close() }()
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
		p.Close() // the process dies: its connections close, nothing more is sent
	}
	if err != nil {
		return err
	}
	// Past every worker's lease that was held at the release, a key with
	// more than a worker's TTL to live is the dead process's.
	if !sleep(ctx, 2*r.cfg.TTL) {
		return ctx.Err()
	}
	for i, n := range r.cluster.Nodes {
		if pttl, err := n.PTTL(ctx, lockKey(resource)); err == nil && pttl > r.cfg.TTL+r.cfg.TTL/2 {
			r.blocked.Add(1)
			if r.cfg.Logf != nil {
				r.cfg.Logf("safety: %q blocked on node %d for %v more by a process that died after its release",
					resource, i, pttl)
			}
			break
		}
	}
	return nil
}
