package lease

import "time"

// minDrift is added to the proportional drift allowance: it covers the
// granularity of Redis' expiry and of timers.
const minDrift = 2 * time.Millisecond

// Drift is the clock-drift allowance for a lease of ttl: ttl·factor + 2ms,
// as the Redlock specification suggests.
func Drift(ttl time.Duration, factor float64) time.Duration {
	return time.Duration(float64(ttl)*factor) + minDrift
}

// Validity is how long a lease of ttl stays valid after a round that took
// elapsed: ttl − elapsed − Drift. Zero or less means the round was too slow
// to count, even with a quorum of grants.
func Validity(ttl, elapsed time.Duration, factor float64) time.Duration {
	return ttl - elapsed - Drift(ttl, factor)
}
