package engine

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAcquireRelease measures uncontended acquire+release cycles on 5
// real nodes: each goroutine loops over its own resources.
//
//	go test -run '^$' -bench AcquireRelease -cpu 1,2 ./engine/
//
// Where the ~110 allocations of a cycle go (16 workers, from
// -memprofile -memprofilerate 1, per cycle), and why each is there:
//   - 16 protoactor mailbox schedules (a method value each time a mailbox
//     goes from idle to busy) and ~15 for spawning and stopping the lease
//     actor (props, process, registry entry, two mailbox queues, context):
//     the price of one actor per lease, which serializes its state
//     without locks.
//   - 10 votes and 10 commands (5 acquires, 5 releases): one message per
//     node per round, the actor protocol. Pooling them is possible but
//     needs care, as a late vote can outlive its round.
//   - ~5 for the lease's State and its Done, Stopped and Events channels,
//     which the API hands to the holder.
//   - ~5 timers: the round's node timeout and the validity deadline (the
//     deadline is what makes loss never late).
//   - ~6 in Acquire: the reply channel, the Lease, the lock key, the owner
//     value, and context.AfterFunc so a cancelled ctx stops the retries.
//   - ~3 in Release: its reply channel and message.
//   - ~6 per batch in node and rueidis (context with deadline, the
//     command slice, TTL strings), shared by every command of the batch.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, bc := range []struct{ nodes, workers int }{{5, 1}, {5, 16}, {5, 128}, {5, 512}, {1, 1}, {1, 128}, {1, 512}} {
		nodes, workers := bc.nodes, bc.workers
		b.Run(fmt.Sprintf("nodes=%d/workers=%d", nodes, workers), func(b *testing.B) {
			c := startNodes(b, nodes)
			e, err := New(Config{Nodes: c.Addrs(), NodeTimeout: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			var next atomic.Int64
			b.SetParallelism(max(1, workers/runtime.GOMAXPROCS(0))) // workers goroutines in all
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				res := fmt.Sprintf("bench-%d", next.Add(1))
				ctx := b.Context()
				for pb.Next() {
					l, err := e.TryAcquire(ctx, res)
					if err != nil {
						b.Error(err)
						return
					}
					if err := l.Release(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "locks/s")
			var cmds, batches uint64
			for _, n := range e.nodes {
				cmds += n.Stats().Commands.Load()
				batches += n.Stats().Batches.Load()
			}
			b.ReportMetric(float64(batches)/float64(b.N), "roundtrips/cycle")
			b.ReportMetric(float64(cmds)/float64(max(batches, 1)), "cmds/batch")
		})
	}
}
