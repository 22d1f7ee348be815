package actors

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestDispatcherRunsEverythingAndStops(t *testing.T) {
	d := NewDispatcher()
	var ran atomic.Int64
	var wg sync.WaitGroup
	const n = 20000 // more than the queue holds: some fall back to goroutines
	wg.Add(n)
	for range n {
		d.Schedule(func() { ran.Add(1); wg.Done() })
	}
	wg.Wait()
	d.Stop()
	d.Stop() // idempotent
	done := make(chan struct{})
	d.Schedule(func() { close(done) }) // after Stop: on a goroutine of its own
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a run scheduled after Stop never ran")
	}
	if ran.Load() != n {
		t.Fatalf("%d of %d runs", ran.Load(), n)
	}
}
