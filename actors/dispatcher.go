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
	runs    chan runner
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
	d := &Dispatcher{runs: make(chan runner, queueSize), workers: workersPerCPU * runtime.GOMAXPROCS(0)}
	for range d.workers {
		d.wg.Go(func() {
			for r := range d.runs {
				if r == nil {
					return // Stop's signal
				}
				r.run()
			}
		})
	}
	return d
}

// runner is what a worker runs: a mailbox's run (a func) or an Inbox,
// which needs no func value of its own that way.
type runner interface{ run() }

type runFunc func()

func (f runFunc) run() { f() }

// Schedule runs f on a worker, or on a new goroutine when none is free.
func (d *Dispatcher) Schedule(f func()) { d.schedule(runFunc(f)) }

func (d *Dispatcher) schedule(r runner) {
	if d.stopped.Load() {
		go r.run()
		return
	}
	select {
	case d.runs <- r:
	default:
		go r.run()
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
