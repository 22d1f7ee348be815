package lease

import "time"

// Clock is the time the lease machinery reads and waits on: the system's,
// or a test's (Shared.Clock), so that tests of validity, grants and
// extension make time pass without sleeping.
type Clock interface {
	Now() time.Time
	// Since is the time passed since t, as time.Since: from the
	// monotonic clock alone, which is half the reads of Now (clock reads
	// cost ~100ns on some virtual machines, and a cycle takes several).
	Since(t time.Time) time.Duration
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

func (systemClock) Since(t time.Time) time.Duration { return time.Since(t) }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// now is the time on the pool's clock.
func (a *leaseActor) now() time.Time { return a.pool.clock.Now() }

// elapsed is the time passed since t on the pool's clock.
func (a *leaseActor) elapsed(t time.Time) time.Duration { return a.pool.clock.Since(t) }
