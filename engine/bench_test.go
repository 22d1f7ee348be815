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
func BenchmarkAcquireRelease(b *testing.B) {
	for _, workers := range []int{1, 16, 128, 512} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			c := startNodes(b, 5)
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
