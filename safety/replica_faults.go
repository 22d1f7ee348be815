package safety

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redlease/redlease/internal/redisproc"
)

// FaultWritableReplica: a botched failback. The spare replicates node k
// over a slow link (a Proxy delaying each chunk), so it lags; k is made
// writable as a replica (replica-read-only no) and a replica of the
// spare, which serves it a full resync of its lagging data under k's own
// replication id: run id, replication id, losses and marker unchanged,
// the lock keys granted in the last moments gone, and writes accepted.
// Then k is promoted again. Only the role read in the batch itself (a
// node that is not role:master grants nothing, see package node) keeps
// the engines from granting there before their next probe.
const FaultWritableReplica = "writable replica"

// replicaLag is how late the spare's replication link delivers each
// chunk in FaultWritableReplica: longer than a round, so that the keys
// of the leases acquired last are missing from the spare's data.
const replicaLag = 150 * time.Millisecond

// writableReplica injects FaultWritableReplica on node k.
func (r *run) writableReplica(ctx context.Context, k int, hold time.Duration) error {
	n, s := r.cluster.Nodes[k], r.spare.Nodes[0]
	link, err := NewProxy(n.Addr())
	if err != nil {
		return err
	}
	defer link.Close()
	if err := replicaOver(ctx, s, n, link.Addr()); err != nil {
		return err
	}
	defer func() { _ = promoteNode(s) }()
	link.SetDelay(replicaLag)
	sleep(ctx, hold/2) // leases come and go; the spare lags behind them

	if _, err := n.Do(ctx, "CONFIG", "SET", "replica-read-only", "no"); err != nil {
		return err
	}
	defer func() { _, _ = n.Do(context.Background(), "CONFIG", "SET", "replica-read-only", "yes") }()
	r.nodesDown.Add(1) // a replica refuses acquires
	defer r.nodesDown.Add(-1)
	err = n.ReplicaOf(ctx, s)
	if err == nil {
		sleep(ctx, hold/2) // a writable replica with the spare's older data
	}
	if perr := promoteNode(n); err == nil {
		err = perr
	}
	return err
}

// replicaOver makes s a replica of n, reached at addr (n's own, or a
// proxy's in front of it), and waits until its link is up.
func replicaOver(ctx context.Context, s, n *redisproc.Node, addr string) error {
	if _, err := n.Do(ctx, "CONFIG", "SET", "repl-diskless-sync-delay", "0"); err != nil {
		return err
	}
	_, port, _ := strings.Cut(addr, ":")
	if _, err := s.Do(ctx, "REPLICAOF", "127.0.0.1", port); err != nil {
		return err
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if up, _ := s.Info(ctx, "replication", "master_link_status"); up == "up" {
			return nil
		}
		if !sleep(ctx, 10*time.Millisecond) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("safety: %s did not sync with %s in 10s", s.Addr(), n.Addr())
}

// FaultOneAddress: a failover behind one address. The spare replicates
// node k, then FAILOVER swaps them: the spare is the master, k its
// replica. k's address (its Proxy) sends new connections to the spare
// and keeps the old ones where they went, as a DNS name, a lazily
// reconnecting proxy or a managed endpoint does, so the engines' kept
// connections meet a replica. They must dial again and use the new
// master once its quarantine has passed (its replication id is new): the
// injector waits for a lease granted there (a worker's lock key with a
// value the new master did not hold at the switch: the ones it replicated
// are not a use), for up to the quarantine and oneAddressGrace, and
// counts a failover the engines never came back from in Report.Stranded. (Keeping the connection to the demoted master,
// running engines saw a replica at every probe: 11 of 14 runs never used
// the new master within 93 s.) The spare then stays as node k; k's
// process, cut off and emptied, is the next spare.
const FaultOneAddress = "failover behind one address"

// oneAddressGrace is how long past the quarantine the engines may take
// to use the new master of FaultOneAddress: a probe or two to find the
// replica and dial again, and a round.
const oneAddressGrace = 3 * time.Second

// oneAddress injects FaultOneAddress on node k.
func (r *run) oneAddress(ctx context.Context, k int, hold time.Duration) error {
	n, s := r.cluster.Nodes[k], r.spare.Nodes[0]
	if err := replicaOver(ctx, s, n, n.Addr()); err != nil {
		return err
	}
	sleep(ctx, hold) // leases come and go, and reach the spare
	r.nodesDown.Add(1)
	defer r.nodesDown.Add(-1)
	if _, err := n.Do(ctx, "FAILOVER"); err != nil {
		return err
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if role, _ := s.Info(ctx, "replication", "role"); role == "master" {
			break
		}
		if time.Now().After(deadline) {
			_, _ = n.Do(ctx, "FAILOVER", "ABORT")
			_ = promoteNode(s)
			return errors.New("safety: FAILOVER did not promote the spare in 10s")
		}
		if !sleep(ctx, 10*time.Millisecond) {
			return ctx.Err()
		}
	}
	switched := time.Now()
	before := lockValues(ctx, s) // replicated from k: not a new use
	r.proxies[k].Retarget(s.Addr())
	r.cluster.Nodes[k], r.spare.Nodes[0] = s, n
	used := usedAgain(ctx, s, before, switched.Add(r.cfg.quarantine()+oneAddressGrace))
	// Cut what still goes to the former master, which is the spare now.
	r.proxies[k].Failover(s.Addr())
	err := promoteNode(n)
	if _, ferr := n.Do(ctx, "FLUSHALL"); err == nil {
		err = ferr
	}
	if !used && ctx.Err() == nil {
		r.stranded.Add(1)
		if r.cfg.Logf != nil {
			r.cfg.Logf("safety: no engine used node %d's new master within %v of a failover behind its address", k, time.Since(switched).Round(time.Millisecond))
		}
	}
	return err
}

// usedAgain waits until s holds a worker's lock key with a value it did
// not hold before (a lease granted there since), or until deadline.
func usedAgain(ctx context.Context, s *redisproc.Node, before map[string]string, deadline time.Time) bool {
	for time.Now().Before(deadline) {
		for key, v := range lockValues(ctx, s) {
			if before[key] != v {
				return true
			}
		}
		if !sleep(ctx, 20*time.Millisecond) {
			return false
		}
	}
	return false
}

// lockValues is the workers' lock keys on s and their values.
func lockValues(ctx context.Context, s *redisproc.Node) map[string]string {
	out := map[string]string{}
	keys, err := s.Do(ctx, "KEYS", lockKey("*"))
	if err != nil {
		return out
	}
	ks, _ := keys.([]any)
	for _, k := range ks {
		key, _ := k.(string)
		if v, ok, err := s.Get(ctx, key); ok && err == nil {
			out[key] = v
		}
	}
	return out
}
