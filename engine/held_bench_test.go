package engine

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkHeldLeases holds many auto-extended leases on 5 real nodes and
// reports the heap per held lease, how late extensions start against their
// plan (TTL/3 after the previous round's start), and, after pausing 3 of
// the 5 nodes, how long after its validity deadline each holder learned of
// the loss. One iteration is the whole scenario:
//
//	go test -run '^$' -bench HeldLeases -benchtime 1x ./engine/
//	go test -run '^$' -bench HeldLeases -benchtime 1x ./engine/ -args -leases=1000
func BenchmarkHeldLeases(b *testing.B) {
	for range b.N {
		benchHeld(b, *heldLeases, 3*time.Second, 8*time.Second)
	}
}

func benchHeld(b *testing.B, n int, ttl, hold time.Duration) {
	c := startNodes(b, 5)
	e, err := New(Config{Nodes: c.Addrs(), NodeTimeout: 500 * time.Millisecond, EventBuffer: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	events, cancel := e.Subscribe(4 * n)
	defer cancel()

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	leases := make([]*Lease, n)
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Go(func() {
			for i := w; i < n; i += 64 {
				l, err := e.Acquire(b.Context(), fmt.Sprintf("held-%d", i), WithTTL(ttl), WithAutoExtend(time.Hour))
				if err != nil {
					b.Error(err)
					return
				}
				leases[i] = l
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		return
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "heap-B/lease")

	// Extension lateness: consecutive Untils of a lease are consecutive
	// round starts plus the same TTL − drift, so their gap minus TTL/3 is
	// how late the round started. The stream is read while the leases are
	// held, so its buffer never overflows.
	var late []time.Duration
	stop := make(chan struct{})
	read := make(chan struct{})
	go func() {
		defer close(read)
		last := make(map[string]time.Time, n)
		for {
			select {
			case ev := <-events:
				if prev, ok := last[ev.Resource]; ok && ev.Kind == Extended {
					late = append(late, ev.Until.Sub(prev)-ttl/3)
				}
				last[ev.Resource] = ev.Until
			case <-stop:
				return
			}
		}
	}()
	time.Sleep(hold)
	close(stop)
	<-read
	for _, l := range leases {
		if l.Err() != nil {
			b.Fatalf("lease %s ended while held: %v", l.Resource(), l.Err())
		}
	}
	slices.Sort(late)
	if len(late) == 0 {
		b.Fatal("no extensions")
	}
	b.ReportMetric(float64(len(late))/hold.Seconds(), "extensions/s")
	b.ReportMetric(us(late[len(late)/2]), "extend-late-p50-µs")
	b.ReportMetric(us(late[len(late)*99/100]), "extend-late-p99-µs")

	// Loss: pause a majority; every holder must learn at its deadline.
	lags := make([]time.Duration, n)
	var ended sync.WaitGroup
	for i, l := range leases {
		ended.Add(1)
		l.state.AfterEnd(func() {
			lags[i] = time.Since(l.Until())
			ended.Done()
		})
	}
	for _, i := range []int{0, 1, 2} {
		if err := c.Nodes[i].Pause(); err != nil {
			b.Fatal(err)
		}
	}
	ended.Wait()
	for _, i := range []int{0, 1, 2} {
		_ = c.Nodes[i].Resume()
	}
	slices.Sort(lags)
	b.ReportMetric(us(lags[0]), "lost-lag-min-µs")
	b.ReportMetric(us(lags[len(lags)/2]), "lost-lag-p50-µs")
	b.ReportMetric(us(lags[len(lags)*99/100]), "lost-lag-p99-µs")
	for _, l := range leases {
		if !errorsIsLost(l) {
			b.Fatalf("lease %s ended with %v, want ErrLeaseLost", l.Resource(), l.Err())
		}
	}
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
