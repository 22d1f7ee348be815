package safety

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// Holding is one holder's claim on a resource, on the monotonic clock:
// from Acquired (when Acquire returned) to End (when it stopped acting as
// the holder, at Until at the latest).
type Holding struct {
	Resource string
	Holder   string
	Value    string // the lease's owner value, as the nodes store it
	Token    uint64
	Acquired time.Time
	End      time.Time
	// Wrote is when the holder's write reached the fenced store (zero: it
	// did not write), and Accepted whether the store took it.
	Wrote    time.Time
	Accepted bool
}

// Recorder collects holdings from many goroutines. Safe for concurrent
// use.
type Recorder struct {
	mu       sync.Mutex
	holdings []*Holding
}

// Held records that holder got resource at acquired, valid until until,
// with owner value and token. Call Ended when it stops.
func (r *Recorder) Held(resource, holder, value string, acquired, until time.Time, token uint64) *Holding {
	h := &Holding{Resource: resource, Holder: holder, Value: value, Token: token, Acquired: acquired, End: until}
	r.mu.Lock()
	r.holdings = append(r.holdings, h)
	r.mu.Unlock()
	return h
}

// Ended records that h stopped acting as the holder at at, or at until,
// the lease's validity deadline then (extensions move it), if earlier.
func (r *Recorder) Ended(h *Holding, at, until time.Time) {
	if until.Before(at) {
		at = until
	}
	r.mu.Lock()
	h.End = at
	r.mu.Unlock()
}

// Wrote records h's write to the fenced store, made at at, and whether
// the store accepted it.
func (r *Recorder) Wrote(h *Holding, at time.Time, accepted bool) {
	r.mu.Lock()
	h.Wrote, h.Accepted = at, accepted
	r.mu.Unlock()
}

// Overlap is two holdings of one resource whose intervals intersect: a
// safety violation, unless a broken timing assumption explains it.
type Overlap struct{ First, Second Holding }

// StaleWrites counts what became of the writes that stale holders (the
// first of two overlapping holdings) made after the newer holder had
// acquired.
type StaleWrites struct {
	// Rejected: refused by fencing, the newer holder having written with
	// a higher token. Fencing at work.
	Rejected int
	// Early: accepted because the newer holder had not written yet; the
	// store still saw the writes in token order.
	Early int
	// Failed: accepted although the newer holder had written before:
	// fencing failed. Must be 0.
	Failed int
}

// Stale classifies the stale holders' writes in overlaps.
func Stale(overlaps []Overlap) StaleWrites {
	var s StaleWrites
	for _, o := range overlaps {
		first, second := o.First, o.Second
		switch {
		case first.Wrote.IsZero() || !first.Wrote.After(second.Acquired):
			// No write, or one made before the newer holder existed.
		case !first.Accepted:
			s.Rejected++
		case second.Wrote.IsZero() || first.Wrote.Before(second.Wrote):
			s.Early++
		default:
			s.Failed++
		}
	}
	return s
}

// String spells the three counts out.
func (s StaleWrites) String() string {
	return fmt.Sprintf("%d rejected by fencing, %d accepted before the newer holder wrote, %d accepted after it (fencing failed)",
		s.Rejected, s.Early, s.Failed)
}

// String names both holders, when the first ended and when the second
// acquired (from the first's acquisition), and their tokens.
func (o Overlap) String() string {
	return fmt.Sprintf("%q: %s held until +%v, %s acquired at +%v (tokens %d, %d)",
		o.First.Resource, o.First.Holder, o.First.End.Sub(o.First.Acquired), o.Second.Holder,
		o.Second.Acquired.Sub(o.First.Acquired), o.First.Token, o.Second.Token)
}

// Regression is a holding whose fencing token is not larger than that of
// the holding acquired before it on the same resource.
type Regression struct{ Before, After Holding }

// aheadOfHost reports whether the earlier token was larger than the host's
// clock in microseconds when its holder acquired. Tokens are at most the
// largest node clock at their issue, plus one per acquisition, so only a
// node whose clock ran ahead of the host's can have issued it.
func (g Regression) aheadOfHost() bool {
	return g.Before.Token > uint64(g.Before.Acquired.Add(time.Millisecond).UnixMicro())
}

// Check returns the overlapping holdings, and the holdings whose token is
// not larger than that of the holding before them on the same resource.
func (r *Recorder) Check() (overlaps []Overlap, regressions []Regression) {
	r.mu.Lock()
	byResource := map[string][]Holding{}
	for _, h := range r.holdings {
		byResource[h.Resource] = append(byResource[h.Resource], *h)
	}
	r.mu.Unlock()
	for _, hs := range byResource {
		slices.SortFunc(hs, func(a, b Holding) int { return a.Acquired.Compare(b.Acquired) })
		latest := 0 // the holding that ends last so far
		for i := 1; i < len(hs); i++ {
			if hs[i].Acquired.Before(hs[latest].End) {
				overlaps = append(overlaps, Overlap{hs[latest], hs[i]})
			}
			if hs[i].Token != 0 && hs[i].Token <= hs[i-1].Token {
				regressions = append(regressions, Regression{hs[i-1], hs[i]})
			}
			if hs[i].End.After(hs[latest].End) {
				latest = i
			}
		}
	}
	return overlaps, regressions
}

// Count is the number of holdings recorded.
func (r *Recorder) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.holdings)
}

// Store is an in-memory store protected by fencing: it refuses a write
// whose token is lower than the highest it has accepted for the resource.
// Safe for concurrent use.
type Store struct {
	mu       sync.Mutex
	highest  map[string]uint64
	accepted int
	rejected int
}

// Write stores a value for resource under token, unless a newer holder
// already wrote: then it refuses and reports false.
func (s *Store) Write(resource string, token uint64) bool {
	ok, _ := s.write(resource, token)
	return ok
}

// write is Write that also tells when the store decided, read under its
// lock, so that the times of two writes are in the order they took effect.
func (s *Store) write(resource string, token uint64) (bool, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.highest == nil {
		s.highest = map[string]uint64{}
	}
	if token < s.highest[resource] {
		s.rejected++
		return false, time.Now()
	}
	s.highest[resource] = token
	s.accepted++
	return true, time.Now()
}

// Counts returns the writes accepted and refused as stale.
func (s *Store) Counts() (accepted, rejected int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted, s.rejected
}
