//go:build !linux

package main

import "time"

// sleeper is time.Sleep here: Go's timers round a sleep below a
// millisecond up to about 1ms in an idle process, so small added RTTs come
// out larger than asked (the bench prints what it measured).
type sleeper struct{}

func (s *sleeper) init() {}

// until sleeps until due and returns the cutoff of this round: the chunks
// due by then go out now.
func (s *sleeper) until(due time.Time, _ time.Duration) time.Time {
	time.Sleep(time.Until(due))
	return time.Now()
}
