package lease

import (
	"sync"
	"sync/atomic"
	"time"
)

// State is what a lease actor shares with the holder's *Lease. The actor
// writes it, except that its deadline timer may end the lease from the
// timer's own goroutine (expireIfDue), under mu; its methods are safe for
// concurrent use.
type State struct {
	// done is closed once, under mu, by whoever ends the lease: the actor
	// or its deadline timer; stopped by the actor when it is done with the
	// lease. Each is made by the first call that asks for it (Done,
	// Stopped; under mu), not with the State: a held lease would keep it,
	// and most holders never ask.
	done, stopped chan struct{}
	// The event channel is made by the first Events call; until then the
	// events are kept in early, as the channel would keep them: a lease
	// whose holder never reads them costs a small slice, not a channel
	// (most of a lease's heap, at the default buffer). Both under mu.
	// early starts in firstTwo: Acquired and the end, most often, cost
	// no allocation of their own.
	events   chan Event
	early    []earlyEvent
	firstTwo [2]earlyEvent
	eventCap int
	resource string
	err      error        // written once, before done closes
	start    time.Time    // start of the winning round, written before the Result is sent
	token    uint64       // fencing token, written before the Result is sent
	until    atomic.Int64 // validity deadline, in nanoseconds after start
	margin   atomic.Int64 // the lease ends this long before until (a Duration; retime changes it)

	mu         sync.Mutex
	onEnd      []func()    // run once, when the lease ends
	ended      atomic.Bool // set once, under mu, after err
	isStopped  bool        // the actor is done with the lease
	atDeadline error       // what the lease ends with if its deadline passes
}

// earlyEvent is an Event before the channel was made, less what every
// event of the lease shares (Resource, Token), with its Until as the time
// after start (as until keeps it): 32 B rather than 48, for each event a
// held lease keeps as it extends.
type earlyEvent struct {
	kind  EventKind
	until time.Duration
	err   error
}

func newState(resource string, events int) *State {
	return &State{resource: resource, eventCap: max(events, 2)}
}

// Done is closed when the lease ends, for any reason, exactly once: by the
// lease actor, or by its deadline timer's goroutine when the deadline ends
// the lease (so that a busy mailbox cannot delay it).
func (s *State) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		if s.ended.Load() {
			return closedCh
		}
		s.done = make(chan struct{})
	}
	return s.done
}

// closedCh is Done or Stopped when asked for only after the fact.
var closedCh = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Stopped is closed when the lease actor is done with the lease: it ended
// or failed, and the votes it was owed are in. The actor then runs another
// lease or stops; a call about this one is answered with its Err, or not
// at all.
func (s *State) Stopped() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped == nil {
		if s.isStopped {
			return closedCh
		}
		s.stopped = make(chan struct{})
	}
	return s.stopped
}

// stop closes Stopped: the actor is done with the lease.
func (s *State) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.isStopped = true
	if s.stopped != nil {
		close(s.stopped)
	}
}

// Events is the lease's event channel, closed after the terminal event.
// The first call makes it, with the events so far in it.
func (s *State) Events() <-chan Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.events == nil {
		s.events = make(chan Event, s.eventCap)
		for _, e := range s.early {
			s.events <- Event{Kind: e.kind, Resource: s.resource, Token: s.token, Until: s.start.Add(e.until), Err: e.err}
		}
		if n := len(s.early); n > 0 && s.early[n-1].kind.Terminal() {
			close(s.events)
		}
		s.early = nil
	}
	return s.events
}

// deliver puts ev on the event channel (or where it waits for the
// channel) without blocking: the last place is kept for the terminal
// event, after which the channel closes. False: ev was dropped, for want
// of room.
func (s *State) deliver(ev Event) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	terminal := ev.Kind.Terminal()
	if ch := s.events; ch != nil {
		if !terminal && len(ch) >= cap(ch)-1 {
			return false
		}
		ch <- ev
		if terminal {
			close(ch)
		}
		return true
	}
	if !terminal && len(s.early) >= s.eventCap-1 {
		return false
	}
	if s.early == nil {
		s.early = s.firstTwo[:0]
	}
	s.early = append(s.early, earlyEvent{ev.Kind, ev.Until.Sub(s.start), ev.Err})
	return true
}

// Err is nil while the lease is held, and why it ended after Done closed.
func (s *State) Err() error {
	if s.ended.Load() {
		return s.err
	}
	return nil
}

// Token is the lease's fencing token; 0 without fencing.
func (s *State) Token() uint64 { return s.token }

// Until is the validity deadline, carrying a monotonic clock reading.
func (s *State) Until() time.Time { return s.start.Add(time.Duration(s.until.Load())) }

// ends is when the lease ends unless extended: margin before Until.
func (s *State) ends() time.Time { return s.Until().Add(-time.Duration(s.margin.Load())) }

// hold starts the validity clock: the lease is valid until t unless
// extended, ends margin before that, and ends with atDeadline then.
func (s *State) hold(start, t time.Time, margin time.Duration, atDeadline error) {
	s.start = start
	s.until.Store(int64(t.Sub(start)))
	s.margin.Store(int64(margin))
	s.atDeadline = atDeadline
}

// extendTo moves the deadline to t and sets what passing it means, unless
// the lease already ended (its deadline timer may have fired meanwhile).
func (s *State) extendTo(t time.Time, atDeadline error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended.Load() {
		return false
	}
	s.until.Store(int64(t.Sub(s.start)))
	s.atDeadline = atDeadline
	return true
}

// retime sets the end margin of a lease whose TTL changed, and brings its
// deadline forward to t if t is earlier, unless the lease already ended.
func (s *State) retime(t time.Time, margin time.Duration) (changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended.Load() {
		return false
	}
	changed = s.margin.Swap(int64(margin)) != int64(margin)
	if u := int64(t.Sub(s.start)); u < s.until.Load() {
		s.until.Store(u)
		changed = true
	}
	return changed
}

// setAtDeadline changes what the lease ends with at its deadline.
func (s *State) setAtDeadline(err error) {
	s.mu.Lock()
	s.atDeadline = err
	s.mu.Unlock()
}

// expireIfDue ends the lease with its deadline error if its end (margin
// before the deadline) has come. It runs on the deadline timer's
// goroutine, so that Done closes on time however busy the actor's mailbox
// is, and for Ref.ExpireIfDue.
func (s *State) expireIfDue(now time.Time) bool {
	s.mu.Lock()
	if s.ended.Load() || now.Before(s.ends()) {
		s.mu.Unlock()
		return false
	}
	return s.endLocked(s.atDeadline)
}

// finish ends the lease with err; false if it had already ended.
func (s *State) finish(err error) bool {
	s.mu.Lock()
	if s.ended.Load() {
		s.mu.Unlock()
		return false
	}
	return s.endLocked(err)
}

// endLocked records err, closes done, unlocks and runs the AfterEnd
// functions.
func (s *State) endLocked(err error) bool {
	s.err = err
	s.ended.Store(true)
	if s.done != nil {
		close(s.done)
	}
	fs := s.onEnd
	s.onEnd = nil
	s.mu.Unlock()
	for _, f := range fs {
		f()
	}
	return true
}

// Ended reports whether the lease ended (perhaps by its deadline timer,
// before the actor heard of it): Done is closed, or would be.
func (s *State) Ended() bool { return s.ended.Load() }

// AfterEnd runs f once the lease has ended (at once if it has). f runs on
// whichever goroutine ends the lease and must not block.
func (s *State) AfterEnd(f func()) {
	s.mu.Lock()
	if !s.ended.Load() {
		s.onEnd = append(s.onEnd, f)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	f()
}
