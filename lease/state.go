package lease

import (
	"sync/atomic"
	"time"
)

// State is what a lease actor shares with the holder's *Lease. The actor is
// its only writer; its methods are safe for concurrent use.
type State struct {
	done    chan struct{} // closed by the actor when the lease ends
	stopped chan struct{} // closed by the actor when it stopped
	err     error         // written once, before done closes
	start   time.Time     // start of the winning round, written before the Result is sent
	until   atomic.Int64  // validity deadline, in nanoseconds after start
}

func newState() *State {
	return &State{done: make(chan struct{}), stopped: make(chan struct{})}
}

// Done is closed when the lease ends, for any reason.
func (s *State) Done() <-chan struct{} { return s.done }

// Stopped is closed when the lease actor has stopped: no message sent to it
// will be answered after that.
func (s *State) Stopped() <-chan struct{} { return s.stopped }

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
