package lease

import "fmt"

// newTTL makes m.TTL the lease's TTL from the round m starts on, unless
// it is the TTL already (see Extend.TTL); false: refused, and m answered.
//
// The TTL changes when the round starts, not when it is won: the round
// may set it on any node it reaches, whatever its outcome. A shorter TTL
// may so shorten the keys, from the round's start, before the deadline
// the lease had: startExtend brings the deadline forward then, as for
// every round, and the end margin follows the TTL.
func (a *leaseActor) newTTL(m *Extend) bool {
	d := m.TTL
	if d == 0 || d == a.cfg.TTL {
		return true
	}
	now := a.now()
	maxHold := a.cfg.MaxHold + a.cfg.TTL - d // keeps the hold's end: start + MaxHold + TTL
	if !now.Before(a.state.start.Add(maxHold)) {
		room := a.holdEnds().Add(a.cfg.TTL).Sub(now)
		m.Reply <- ExtendResult{Err: fmt.Errorf("%w (%v asked, %v of the hold left)", ErrBeyondMaxHold, d, room)}
		return false
	}
	a.cfg.TTL, a.cfg.MaxHold = d, maxHold // startExtend moves the deadline
	return true
}

// joinExtend adds m to the extension round in flight, or, when m asks
// for another TTL than the round's, has it wait for the round to be
// decided and start its own then (extendDeferred).
func (a *leaseActor) joinExtend(m *Extend) {
	if m.TTL == 0 || m.TTL == a.cfg.TTL {
		a.waiters = append(a.waiters, m.Reply)
		return
	}
	a.deferred = append(a.deferred, m)
}

// extendDeferred handles the Extend calls that waited for the round just
// decided as if they came now: the first starts a round, and the others
// join it or wait for it in turn.
func (a *leaseActor) extendDeferred() {
	deferred := a.deferred
	a.deferred = nil
	for _, m := range deferred {
		if a.phase == held {
			a.onExtend(m)
		} else {
			a.joinExtend(m)
		}
	}
}
