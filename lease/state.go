package lease

import (
	"sync"
	"sync/atomic"
	"time"
)

// State is what a lease actor shares with the holder's *Lease. The actor is
// its only writer; its methods are safe for concurrent use.
type State struct {
	done    chan struct{} // closed by the actor when the lease ends
	stopped chan struct{} // closed by the actor when it stopped
	events  chan Event    // sent to and closed by the actor only
	err     error         // written once, before done closes
	start   time.Time     // start of the winning round, written before the Result is sent
	until   atomic.Int64  // validity deadline, in nanoseconds after start

	mu    sync.Mutex
	onEnd []func() // run once, when the lease ends
	ended bool
}

func newState(events int) *State {
	return &State{done: make(chan struct{}), stopped: make(chan struct{}), events: make(chan Event, max(events, 2))}
}

// Done is closed when the lease ends, for any reason.
func (s *State) Done() <-chan struct{} { return s.done }

// Stopped is closed when the lease actor has stopped: no message sent to it
// will be answered after that.
func (s *State) Stopped() <-chan struct{} { return s.stopped }

// Events is the lease's event channel, closed after the terminal event.
func (s *State) Events() <-chan Event { return s.events }

// Err is nil while the lease is held, and why it ended after Done closed.
func (s *State) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// Until is the validity deadline, carrying a monotonic clock reading.
func (s *State) Until() time.Time { return s.start.Add(time.Duration(s.until.Load())) }

func (s *State) setUntil(t time.Time) { s.until.Store(int64(t.Sub(s.start))) }

// AfterEnd runs f once the lease has ended (at once if it has), on the
// actor's goroutine: f must not block.
func (s *State) AfterEnd(f func()) {
	s.mu.Lock()
	if !s.ended {
		s.onEnd = append(s.onEnd, f)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	f()
}

// finish records err, closes done and runs the AfterEnd functions.
func (s *State) finish(err error) {
	s.err = err
	close(s.done)
	s.mu.Lock()
	s.ended = true
	fs := s.onEnd
	s.onEnd = nil
	s.mu.Unlock()
	for _, f := range fs {
		f()
	}
}
