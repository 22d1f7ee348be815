package engine

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAcquireRelease measures uncontended acquire+release cycles on 5
// real nodes, and on 1: each goroutine loops over its own resources.
//
//	go test -run '^$' -bench AcquireRelease -benchmem ./engine/
//
// Where the 21 allocations of a cycle go (5 nodes, 128 workers, from
// -memprofile -memprofilerate 1), and why each is there:
//   - 5 in Acquire: the lock key, the owner value (random, so new each
//     time), the Lease the caller keeps, and the reply channel (a buffered
//     channel is two: its header and its buffer).
//   - 2 for context.AfterFunc, so that a cancelled ctx stops the retries.
//   - 5 for the lease's State and its Done, Stopped and Events channels
//     (Events buffered: two), which the API hands to the holder.
//   - 1 for the message that hands the lease to a pooled lease actor (it
//     carries the lease's Config).
//   - 2 commands, one per round (acquire, release), each shared by the
//     five node actors.
//   - 3 in Release: its reply channel (two) and its message.
//   - ~3 per batch in node and rueidis (the deadline context, the command
//     slice), shared by every command of the batch.
//
// Votes (recycled), actor spawns (pooled), timers (an alarm and a deadline
// timer per actor, made once) and mailbox schedules (actors.NewMailbox) allocate nothing.
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
				cmds += n.Stats().Commands
				batches += n.Stats().Batches
			}
			b.ReportMetric(float64(batches)/float64(b.N), "roundtrips/cycle")
			b.ReportMetric(float64(cmds)/float64(max(batches, 1)), "cmds/batch")
		})
	}
}
