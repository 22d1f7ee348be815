package main

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestFailShard runs the failover workload small: before the failover
// both sides are served; in the quarantine the failed shard's resources
// are not, or hardly (its new master may lack keys written to the old
// one), while the other shards' are; after it, both are again. The quarantine lasts at
// least the lock TTL, which the engine's RestartQuarantine defaults to
// (less the moments between the replica's promotion and CLUSTER
// FAILOVER's return).
func TestFailShard(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := failShard(ctx, 3, 8, 60, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r.print(os.Stderr)
	if r.failed == 0 || r.failed == r.resources {
		t.Fatalf("%d of %d resources on the failed shard: want some, not all", r.failed, r.resources)
	}
	for side, name := range []string{"the other shards'", "the failed shard's"} {
		if r.before[side] == 0 || r.after[side] == 0 {
			t.Errorf("%s resources: %.0f cycles/s before, %.0f after; want both above 0", name, r.before[side], r.after[side])
		}
	}
	// A few at the quarantine's edges (the last probe's try is 50ms
	// apart, and slow on a loaded machine); without a quarantine, the
	// rate before.
	if r.during[1] > r.before[1]/20 {
		t.Errorf("the failed shard's resources made %.0f cycles/s in its quarantine, more than 5%% of %.0f before", r.during[1], r.before[1])
	}
	if r.during[0] == 0 {
		t.Error("the other shards' resources made no cycles in the failed shard's quarantine")
	}
	if r.quarantine < lockTTL-2*time.Second {
		t.Errorf("the failed shard served again %v after the failover, want about the lock TTL (%v) or more", r.quarantine, lockTTL)
	}
}
