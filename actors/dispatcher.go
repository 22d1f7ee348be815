package actors

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Dispatcher runs actor mailboxes on a fixed set of long-lived goroutines.
// protoactor's default starts a new goroutine for every mailbox run, and
// each new goroutine grows its stack again on redlease's call paths: that
// stack copying cost a quarter of the CPU of an acquire+release cycle.
// Receive never blocks in redlease's actors, so a few workers suffice; when
// all are busy and the queue is full, a run falls back to a goroutine of
// its own rather than wait.
type Dispatcher struct {
	runs    chan func()
	workers int
	wg      sync.WaitGroup
	once    sync.Once
	stopped atomic.Bool
}

// The dispatcher's sizes. Receive never blocks, so a worker per CPU would
// keep the CPUs busy; a few more cover a mailbox run preempted mid-way.
// The queue absorbs a burst of runs (thousands of leases answered by one
// batch) without falling back to goroutines of their own.
const (
	workersPerCPU = 4
	queueSize     = 4096
)

// NewDispatcher starts the workers: workersPerCPU per CPU.
func NewDispatcher() *Dispatcher {
	d := &Dispatcher{runs: make(chan func(), queueSize), workers: workersPerCPU * runtime.GOMAXPROCS(0)}
	for range d.workers {
		d.wg.Go(func() {
			for run := range d.runs {
				if run == nil {
					return // Stop's signal
				}
				run()
			}
		})
	}
	return d
}

// Schedule runs fn on a worker, or on a new goroutine when none is free.
func (d *Dispatcher) Schedule(fn func()) {
	if d.stopped.Load() {
		go fn()
		return
	}
	select {
	case d.runs <- fn:
	default:
		go fn()
	}
}

// Throughput is how many messages a mailbox run handles before yielding.
func (d *Dispatcher) Throughput() int { return 300 }

// Stop ends the workers once the queued runs are done; runs scheduled
// after Stop get goroutines of their own.
func (d *Dispatcher) Stop() {
	d.once.Do(func() {
		d.stopped.Store(true)
		for range d.workers {
			d.runs <- nil
		}
	})
	d.wg.Wait()
}
