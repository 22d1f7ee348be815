package lease

import "time"

// Clock is the time the lease machinery reads and waits on: the system's,
// or a test's (Shared.Clock), so that tests of validity, grants and
// extension make time pass without sleeping.
type Clock interface {
	Now() time.Time
	// AfterFunc runs f on its own goroutine once d has passed, as
	// time.AfterFunc does.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is what Clock.AfterFunc returns; *time.Timer is one.
type Timer interface {
	Reset(d time.Duration) bool
	Stop() bool
}

// systemClock is the system's Clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// now is the time on the pool's clock.
func (a *leaseActor) now() time.Time { return a.pool.clock.Now() }
