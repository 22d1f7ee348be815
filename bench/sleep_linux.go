package main

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// sleeper sleeps with nanosleep on a thread of its own, with no timer
// slack: Go's timers round a sleep below a millisecond up to about 1.1ms
// in a process whose threads are all idle (the netpoller waits in whole
// milliseconds), which would turn a 100µs half round trip into 1.1ms.
// What the machine still adds on waking (some tens of µs on a VM) is
// learnt, and sleeps end that much early.
type sleeper struct {
	early time.Duration // the low end of the recent overshoots
}

// init pins the calling goroutine to its thread and takes that thread's
// timer slack (50µs by default) down to 1ns.
func (s *sleeper) init() {
	runtime.LockOSThread()
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
}

// until sleeps until about due, at most maxEarly early, and returns the
// cutoff of this round: the chunks due by then go out now.
func (s *sleeper) until(due time.Time, maxEarly time.Duration) time.Time {
	if wait := time.Until(due) - s.early; wait > 0 {
		start := time.Now()
		for left := wait; left > 0; left = wait - time.Since(start) {
			ts := unix.NsecToTimespec(int64(left))
			if unix.Nanosleep(&ts, nil) == nil {
				break
			} // EINTR: a signal; sleep what is left
		}
		// Drop at once to a short overshoot, rise slowly to long ones (a
		// loaded machine's): few chunks go out before they are due.
		if over := time.Since(start) - wait; over < s.early {
			s.early -= (s.early - over) / 2
		} else {
			s.early += (over - s.early) / 32
		}
	}
	s.early = min(max(s.early, 0), maxEarly)
	return time.Now().Add(s.early)
}
