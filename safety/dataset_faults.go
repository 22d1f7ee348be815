package safety

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redlease/redlease/engine"
	"github.com/redlease/redlease/internal/redisproc"
)

// The fault kinds of a node whose dataset loses lock keys while the
// process, or the connection to it, lives on (issue 27): flush, repromote,
// failback, reload, proxy switch, clock step. Each leaves the cluster as
// usable as it found it: every node a primary behind its proxy, the spare
// a primary that is no one's replica.

// flushes are the in-place ways of emptying a node's dataset.
var flushes = [][]string{{"FLUSHALL"}, {"FLUSHDB"}, {"FLUSHALL", "ASYNC"}, {"SWAPDB", "0", "1"}}

// flushDB1 empties db 1: after SWAPDB 0 1 it holds db 0's old keys, which
// the next swap would bring back.
const flushDB1 = "redis.call('SELECT', 1) return redis.call('FLUSHDB')"

// flush empties node k in place (FaultFlush) by a random one of flushes;
// half the time a new engine joins at once, meeting the node empty.
func (r *run) flush(ctx context.Context, rng *rand.Rand, k int) error {
	n := r.cluster.Nodes[k]
	cmd := flushes[rng.IntN(len(flushes))]
	if _, err := n.Do(ctx, cmd...); err != nil {
		return err
	}
	if cmd[0] == "SWAPDB" {
		if _, err := n.Do(ctx, "EVAL", flushDB1, "0"); err != nil {
			return err
		}
	}
	if rng.IntN(2) == 0 {
		return r.join(ctx)
	}
	return nil
}

// promoteNode makes n a primary again (REPLICAOF NO ONE). A fresh context:
// a node left a replica, even at the run's end, is no use to anyone.
func promoteNode(n *redisproc.Node) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := n.Do(ctx, "REPLICAOF", "NO", "ONE")
	return err
}

// cutSpare has the spare replicate node n and then cuts it off (promotes
// it): it keeps n's data, marker included, as of now.
func (r *run) cutSpare(ctx context.Context, n *redisproc.Node) (*redisproc.Node, error) {
	s := r.spare.Nodes[0]
	err := s.ReplicaOf(ctx, n)
	if perr := promoteNode(s); err == nil {
		err = perr
	}
	return s, err
}

// repromote (FaultRepromote): the spare copies node k's data and is cut
// off; leases come and go on k; k is made a replica of the spare (a full
// resync: it takes the spare's older data, with its own marker of then)
// and is promoted again.
func (r *run) repromote(ctx context.Context, k int, hold time.Duration) error {
	n := r.cluster.Nodes[k]
	s, err := r.cutSpare(ctx, n)
	if err != nil {
		return err
	}
	sleep(ctx, hold)   // leases come and go on k alone
	r.nodesDown.Add(1) // a replica refuses acquires
	defer r.nodesDown.Add(-1)
	err = n.ReplicaOf(ctx, s)
	if perr := promoteNode(n); err == nil {
		err = perr
	}
	return err
}

// failback (FaultFailback): the spare copies node k's data and is cut
// off; node k's address moves to it (a failover: k keeps running on its
// own) while leases come and go, then back to k (a failback to a stale
// primary: k lacks what was granted meanwhile, and holds its own valid
// marker).
func (r *run) failback(ctx context.Context, k int, hold time.Duration) error {
	n := r.cluster.Nodes[k]
	s, err := r.cutSpare(ctx, n)
	if err != nil {
		return err
	}
	r.nodesDown.Add(1)
	defer r.nodesDown.Add(-1)
	r.proxies[k].Failover(s.Addr())
	sleep(ctx, hold) // leases come and go on the spare
	r.proxies[k].Failover(n.Addr())
	return nil
}

// reload (FaultReload): SAVE on node k; leases come and go; DEBUG RELOAD
// NOSAVE rolls the node back to the snapshot in place: same process, same
// run id, the later lock keys gone.
func (r *run) reload(ctx context.Context, k int, hold time.Duration) error {
	n := r.cluster.Nodes[k]
	if err := n.Save(ctx); err != nil {
		return err
	}
	sleep(ctx, hold/2)
	_, err := n.Do(ctx, "DEBUG", "RELOAD", "NOSAVE")
	return err
}

// proxySwitch (FaultProxySwitch): node k's address is given a KeepProxy
// in front (the engines reconnect through it); then the process behind it
// changes under the engines' kept connections: node k restarted from a
// snapshot taken a moment before, or the spare, cut off from k a moment
// before (a lagging replica; it then takes k's place, and k's process,
// emptied, becomes the spare). After a while the address goes straight to
// the node again (a reconnect).
func (r *run) proxySwitch(ctx context.Context, rng *rand.Rand, k int, hold time.Duration) error {
	n := r.cluster.Nodes[k]
	keep, err := NewKeepProxy(n.Addr())
	if err != nil {
		return err
	}
	direct := n // the process the address goes straight to at the end
	defer func() {
		r.proxies[k].Failover(direct.Addr())
		keep.Close()
	}()
	r.proxies[k].Failover(keep.Addr())
	sleep(ctx, hold) // the engines reconnect through keep

	if rng.IntN(2) == 0 {
		s, err := r.cutSpare(ctx, n)
		if err != nil {
			return err
		}
		sleep(ctx, hold/2) // leases come and go on k alone
		r.nodesDown.Add(1)
		defer r.nodesDown.Add(-1)
		err = keep.Switch(s.Addr())
		// Whatever happened, s is the node from now: k's process is the
		// next spare, empty, on the host's clock.
		direct = s
		r.cluster.Nodes[k], r.spare.Nodes[0] = s, n
		r.restarted[k] = time.Now()
		sleep(ctx, hold) // the engines meet s through their old connections
		r.proxies[k].Failover(s.Addr())
		if n.ClockAhead() != 0 {
			err = errors.Join(err, n.SetClockAhead(0))
		}
		return errors.Join(err, n.Restart())
	}

	if err := n.Save(ctx); err != nil {
		return err
	}
	sleep(ctx, hold/2) // leases come and go after the snapshot
	r.nodesDown.Add(1)
	defer r.nodesDown.Add(-1)
	if err := r.restart(k, n.RestartFromSnapshot); err != nil {
		return err
	}
	if err := keep.Switch(n.Addr()); err != nil {
		return err
	}
	sleep(ctx, hold) // the engines meet the new process through their old connections
	return nil
}

// clockStep (FaultClockStep): node k restarts empty, on its own clock,
// which then steps ahead by the quarantine and 3s (NTP after boot): INFO's
// uptime_in_seconds says the process has run longer than the quarantine.
// The node's clock stays ahead, as FaultClockJump's does. The node is
// quarantined (it has no lock key) when its clock steps, so no key can
// expire early by it; were one there, the step is recorded as a clock
// jump, to read the overlaps it explains apart.
func (r *run) clockStep(ctx context.Context, k int) error {
	n := r.cluster.Nodes[k]
	ahead := n.ClockAhead()
	r.nodesDown.Add(1)
	err := r.restart(k, func() error { return n.RestartClockAhead(ahead) })
	r.nodesDown.Add(-1)
	if err != nil {
		return err
	}
	keys, err := lockKeys(ctx, n)
	if err != nil {
		return err
	}
	ahead += r.cfg.quarantine() + 3*time.Second
	from := time.Now()
	err = n.SetClockAhead(ahead)
	if len(keys) > 0 {
		r.jumps = append(r.jumps, ClockJump{Node: k, From: from, To: time.Now(), Ahead: ahead, Keys: keys})
	}
	return err
}

// FaultLongerLeases: another deployment's longer leases on the same nodes
// (issue 43): an engine whose TTL is four of the workers' holds a
// worker's resource on exactly three nodes (two are dead), one of which
// restarts empty as the dead two come back empty: bareMajority's
// schedule, under a lease longer than the workers' MaxTTL. The workers'
// engines must sit the three out for the longest TTL recorded on the
// nodes, not their own.
const FaultLongerLeases = "longer leases beside"

// longerLeases injects FaultLongerLeases from node k.
func (r *run) longerLeases(ctx context.Context, rng *rand.Rand, k int, hold time.Duration) error {
	// Four: long enough for the restarts and a worker's acquire after
	// its own quarantine; and its record lengthens every worker's
	// quarantine for twice as long after.
	ttl := 4 * r.cfg.TTL
	long, err := r.startEngine("long", engine.Config{Nodes: r.addrs, TTL: ttl, HealthInterval: workHealth})
	if err != nil {
		return err
	}
	defer r.closeEngine(long)
	three := r.next(FaultLongerLeases, k, 3)
	a, b, c := three[0], three[1], three[2]
	// An odd resource: its holders write nothing (see hold). The workers
	// contend for it: A waits its turn in their line (woken by their
	// releases), and tries again until it gets it, within four of its
	// TTLs (on a loaded machine, the last fault's quarantines may not be
	// over).
	resource := fmt.Sprintf("res-%d", 1+2*rng.IntN(max(1, r.cfg.Resources/2)))
	actx, cancel := context.WithTimeout(ctx, 4*ttl)
	defer cancel()
	var l *engine.Lease
	for {
		if l, err = long.Acquire(actx, resource); err == nil {
			break
		}
		if !sleep(actx, 10*time.Millisecond) {
			return fmt.Errorf("the long lease: %w", err)
		}
	}
	h := r.rec.Held(resource, "long/A", l.Value(), time.Now(), l.Until(), l.Token())
	defer func() {
		r.rec.Ended(h, time.Now(), l.Until())
		_ = l.Release(context.Background())
	}()
	// Two die: the lease lives on three, one of which then restarts
	// empty, and the two come back empty.
	r.nodesDown.Add(2)
	defer r.nodesDown.Add(-2)
	_, _ = r.cluster.Nodes[a].Kill(), r.cluster.Nodes[b].Kill()
	sleep(ctx, min(hold, ttl/4))
	_ = r.cluster.Nodes[c].Kill()
	var errs []error
	for _, i := range []int{c, a, b} {
		errs = append(errs, r.restart(i, r.cluster.Nodes[i].Restart))
	}
	sleep(ctx, time.Until(l.Until())) // the workers try meanwhile
	return errors.Join(errs...)
}
