package safety

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/redlease/redlease/engine"
)

// FaultSwappedTwin: on a Stock node, a twin deployment (the workers'
// KeyPrefix, in database 1: staging beside production) marks its
// database and takes a lease there; then SWAPDB 0 1 hands the workers'
// engines the twin's data, marker included, while their holders' keys
// go to database 1. With DEBUG off, as Redis ships it, a batch does not
// read the server's losses (the swap counts as one), so only the marker
// tells the engines, before their next probe, that the data is not
// theirs: it names its database. With the database left out of the
// marker, the twins' markers were byte-identical and the engines granted
// on the twin's data until their next probe: 78 overlaps in 33 swaps in
// 30s on one Stock node (0 in 31 with it). The database is in the marker
// in five places, all of which that revert takes out: Info.Lineage,
// epochHolds (plain.go), epoch.lua, and batch.lua's parse and build.
const FaultSwappedTwin = "swapped twin"

// Stock: a standalone redis-server as Redis ships it, DEBUG off
// (enable-debug-command no), reached through a proxy. Only
// FaultSwappedTwin hits it: the kinds that hit Standalone nodes may need
// DEBUG (reload), and on a node with DEBUG the batches read every loss
// themselves.
const Stock = "stock"

// swappedTwin (FaultSwappedTwin) on node k.
func (r *run) swappedTwin(ctx context.Context, k int, hold time.Duration) error {
	n := r.cluster.Nodes[k]
	twin, err := r.startEngine("twin", engine.Config{Nodes: []string{r.addrs[k]}, TTL: r.cfg.TTL,
		Client: rueidis.ClientOption{SelectDB: 1}, HealthInterval: workHealth})
	if err != nil {
		return err
	}
	defer r.closeEngine(twin)
	// A node met without a marker (the twin's first time), or with the
	// workers' (swapped away before), sits out a quarantine before the
	// twin marks it: try until the twin's lease is granted.
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var l *engine.Lease
	for l == nil {
		if l, err = twin.TryAcquire(tctx, fmt.Sprintf("res-%d", r.cfg.Resources)); err != nil && !errors.Is(err, engine.ErrNotAcquired) {
			return fmt.Errorf("the twin's lease: %w", err)
		}
		if l == nil && !sleep(tctx, 20*time.Millisecond) {
			return fmt.Errorf("the twin's lease: not granted in 10s: %w", err)
		}
	}
	if _, err := n.Do(ctx, "SWAPDB", "0", "1"); err != nil {
		return err
	}
	sleep(ctx, hold) // the workers meet the twin's data
	return nil
}
