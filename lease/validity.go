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

// The lease's end is armed a margin before its validity deadline, so that
// Done closes before Until although the deadline timer fires late under
// load: with 10,000 leases whose deadlines fall within a second on two
// busy cores, the timer's goroutine ran up to 15ms late at p99. The margin
// is a fiftieth of the TTL (60ms at 3s, four times that p99, so the p99.9
// tail fits too), with a floor for short TTLs, where 2ms still covers an
// idle machine's timer latency, and a cap, since lateness grows with load,
// not with the TTL: beyond 100ms a longer margin would only shorten the
// lease.
const (
	endMarginFraction = 50 // of the TTL
	minEndMargin      = 2 * time.Millisecond
	maxEndMargin      = 100 * time.Millisecond
)

// EndMargin is how long before its validity deadline a lease of ttl ends
// (Done closes): ttl/50, at least 2ms and at most 100ms.
func EndMargin(ttl time.Duration) time.Duration {
	return min(max(ttl/endMarginFraction, minEndMargin), maxEndMargin)
}

// validity is how long a lease of ttl stays valid after a round that took
// elapsed: ttl − elapsed − Drift. A round whose validity does not exceed
// EndMargin was too slow to count, even with a quorum of grants: the lease
// would end as soon as it was held.
func validity(ttl, elapsed time.Duration, factor float64) time.Duration {
	return ttl - elapsed - Drift(ttl, factor)
}
