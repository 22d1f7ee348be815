package safety

import (
	"context"
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
	if err := replicaOver(ctx, s, n, link); err != nil {
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

// replicaOver makes s a replica of n through link and waits until its
// link is up.
func replicaOver(ctx context.Context, s, n *redisproc.Node, link *Proxy) error {
	if _, err := n.Do(ctx, "CONFIG", "SET", "repl-diskless-sync-delay", "0"); err != nil {
		return err
	}
	_, port, _ := strings.Cut(link.Addr(), ":")
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
	return fmt.Errorf("safety: the spare did not sync with %s in 10s", n.Addr())
}
