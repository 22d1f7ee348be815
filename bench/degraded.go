package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The degraded workload is the uncontended one with one node dead: it
// shows what a dead minority costs each client next to the healthy
// uncontended numbers at the same worker counts.
//
// The node dies after the client under test connected to all nodes and
// before the warm-up: redsync's go-redis clients are pinged when they are
// made, which a dead node would fail, and a node that dies under running
// clients is the case that matters. The warm-up then absorbs the moment
// each client finds out (redlease marks the node down after two batches
// without an answer), so the measured part sees the steady degraded state.
const (
	deadNode = 0 // index of the node killed: the first
	// reviveTimeout bounds re-seeding the restarted node, which runs even
	// when the suite was interrupted.
	reviveTimeout = 10 * time.Second
)

// defaultDegradedWorkers: the two ends of the uncontended sweep, to keep
// the suite short.
var defaultDegradedWorkers = []int{1, 128}

var errNeedCluster = errors.New("the degraded workload kills a node, so it needs the nodes the bench started itself (not -nodes)")

// killNode kills node deadNode with SIGKILL and leaves it out of the admin
// connection's FLUSHALL and INFO (the server CPU of a degraded run is that
// of the live nodes). The caller must call reviveNode afterwards, also
// when killNode fails.
func (b *bench) killNode() error {
	if b.cluster == nil {
		return errNeedCluster
	}
	b.admin.setDead(deadNode, true)
	if err := b.cluster.Nodes[deadNode].Kill(); err != nil {
		return fmt.Errorf("killing node %s: %w", b.addrs[deadNode], err)
	}
	return nil
}

// reviveNode restarts node deadNode on its port, empty (a new process,
// a new run_id), and re-seeds every node as flushAll does before a run,
// epoch key included: without it, a fresh engine would keep the new
// process out of quorums for a TTL.
func (b *bench) reviveNode(ctx context.Context) error {
	if b.cluster == nil {
		return nil
	}
	if err := b.cluster.Nodes[deadNode].Restart(); err != nil {
		return fmt.Errorf("restarting node %s: %w", b.addrs[deadNode], err)
	}
	b.admin.setDead(deadNode, false)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reviveTimeout)
	defer cancel()
	if err := b.admin.flushAll(ctx); err != nil {
		return fmt.Errorf("re-seeding after the restart: %w", err)
	}
	return nil
}

// engineHealth describes, for redlease, the nodes its engine sees down
// (failing their commands fast rather than waiting NodeTimeout on them) or
// quarantined at the end of a run, by their index in the node list; ""
// for the other clients.
func engineHealth(lk locker) string {
	rl, ok := lk.(*redleaseLocker)
	if !ok {
		return ""
	}
	var down, quarantined []string
	now := time.Now()
	for i, n := range rl.e.Stats().Nodes {
		if n.Down {
			down = append(down, strconv.Itoa(i))
		}
		if n.QuarantinedUntil.After(now) {
			quarantined = append(quarantined, strconv.Itoa(i))
		}
	}
	if len(down) == 0 && len(quarantined) == 0 {
		return "engine: all nodes up"
	}
	var parts []string
	if len(down) > 0 {
		parts = append(parts, "node "+strings.Join(down, ",")+" down")
	}
	if len(quarantined) > 0 {
		parts = append(parts, "node "+strings.Join(quarantined, ",")+" quarantined")
	}
	return "engine: " + strings.Join(parts, ", ")
}
