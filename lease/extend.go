package lease

import (
	"time"

	"github.com/redlease/redlease/node"
)

// The auto-extension schedule. The engine re-exports both; the README
// quotes them.
const (
	// ExtendDivisor: an auto-extended lease starts an extension round
	// TTL/ExtendDivisor (a third of the TTL) after the start of the round
	// that acquired or last extended it, leaving two thirds of the TTL for
	// that round and its retries.
	ExtendDivisor = 3
	// RetryDivisor: after a failed extension round, the next starts about
	// TTL/RetryDivisor later (randomized by ±50%), while the validity
	// lasts: several tries fit in the two thirds of the TTL left.
	RetryDivisor = 15
)

// planExtend schedules the next automatic extension at at, unless the
// lease is not auto-extended or MaxHold has passed by then: the lease then
// runs to its deadline and expires.
func (a *leaseActor) planExtend(at time.Time) {
	if !a.cfg.AutoExtend {
		return
	}
	if !at.Before(a.holdEnds()) {
		a.holdOver()
		return
	}
	a.setAlarmExact(at)
}

// holdEnds is when MaxHold has passed: no extension round starts after it.
func (a *leaseActor) holdEnds() time.Time { return a.state.start.Add(a.cfg.MaxHold) } // from the winning round

// holdOver stops extending: the lease runs to its deadline and expires
// there (ErrExpired, not lost: it ends as bounded, not by a failure).
func (a *leaseActor) holdOver() {
	a.extendsOver = true
	a.state.setAtDeadline(ErrExpired)
	a.clearAlarm()
}

// held handles what can happen while a lease is held between rounds: the
// alarm starts the planned extension; a late vote of the extension round
// it just won may ask for a heal (extended keeps that round's votes); the
// holder may Extend, Release, Detach, or the engine Close. (The deadline is
// checked before any message: see onDeadline.)
func (a *leaseActor) held(msg any) {
	switch m := msg.(type) {
	case *node.Vote:
		if m.Outcome == node.Absent {
			a.heal(m.Node)
		}
	case *wake:
		a.startExtend()
		if a.cfg.Owner != nil {
			a.cfg.Owner.ExtendLate(time.Duration(mono(a.start) - a.alarmWas))
		}
	case *Extend:
		a.onExtend(m)
	case *Release:
		a.onRelease(m)
	case *Detach:
		a.onDetach(m)
	case *Close:
		a.closeHeld(m.Err)
	}
}

// extending handles what can happen while an extension round is out: its
// votes decide it, unless the alarm (the node timeout) comes first; an
// Extend joins it; Release, Detach and Close end the lease as when held.
func (a *leaseActor) extending(msg any) {
	switch m := msg.(type) {
	case *node.Vote:
		a.tally.add(m.Outcome)
		a.extendVote()
	case *wake:
		a.extendFailed(errRoundTimeout)
	case *Extend:
		a.joinExtend(m)
	case *Release:
		a.onRelease(m)
	case *Detach:
		a.onDetach(m)
	case *Close:
		a.closeHeld(m.Err)
	}
}

// startExtend starts an extension round. The round sets the keys it
// reaches to the TTL from its start, whatever its outcome, so the lease's
// deadline comes forward at once to where the round, won, would put it,
// when that is sooner: keys that had longer (a resumed lease's, whose
// TTL was not the lease's; before a shorter ExtendTTL) must not leave a
// failed round's lease valid past what the keys it shortened live.
func (a *leaseActor) startExtend() {
	a.start = a.now()
	if a.state.retime(a.start.Add(a.cfg.TTL-Drift(a.cfg.TTL, a.cfg.DriftFactor)), EndMargin(a.cfg.TTL)) {
		a.armDeadline()
	}
	a.startVote(extending, a.extendCmd, nil, a.start)
}

// onExtend runs a manual extension of a held lease. Past MaxHold no
// round starts: Extend fails with ErrMaxHold and the lease runs to its
// deadline.
func (a *leaseActor) onExtend(m *Extend) {
	if !a.now().Before(a.holdEnds()) {
		a.holdOver()
		m.Reply <- ExtendResult{Err: ErrMaxHold}
		return
	}
	if !a.newTTL(m) {
		return
	}
	a.waiters = append(a.waiters, m.Reply)
	a.startExtend() // in place of the planned one
}

// extendVote decides an extend round once its votes allow: extended with a
// quorum in time; lost when a quorum answers that the key is not the
// lease's (another owner's, or gone); failed when a quorum is out of reach.
func (a *leaseActor) extendVote() {
	now := a.now()
	switch {
	case a.tally.won():
		if now.Before(a.state.Until()) && !a.tooSlow(now.Sub(a.start)) {
			a.extended()
		} else {
			a.extendFailed(errTooSlow)
		}
	case a.tally.taken >= Quorum(a.tally.n):
		a.clearAlarm()
		err := a.finish(lost(a.explain(refused(a.votes, true))))
		a.releaseAll() // our key may linger on a minority
		a.wrapUp(ended, err)
	case a.tally.lost():
		a.extendFailed(refused(a.votes, true))
	}
}

// extended holds the lease on from the round's start and heals the nodes
// that answered that they hold no key. The round's votes stay until the
// lease parks, once all are in: a node that answers Absent later is
// healed then (held).
func (a *leaseActor) extended() {
	a.clearAlarm()
	a.to(held)
	if !a.state.extendTo(a.start.Add(a.cfg.TTL-Drift(a.cfg.TTL, a.cfg.DriftFactor)), a.atDeadline(nil)) {
		a.onDeadline() // the deadline passed while the votes were counted
		return
	}
	a.armDeadline()
	for i, v := range a.votes {
		if v.Outcome == node.Absent {
			a.heal(i)
		}
	}
	a.answerWaiters(nil)
	a.emit(Extended, nil)
	a.planExtend(a.start.Add(a.cfg.TTL / ExtendDivisor))
	a.extendDeferred()
}

// heal sets the lease's key on node i, where no key is, after an
// extension round that a quorum of nodes holding the key won (see Healing
// in the package doc), for what is left of the TTL since the round
// started: a healed key expires with the keys the round extended. The
// heal counts for nothing in this round, and nobody waits for its answer:
// the next round extends the key like any other.
func (a *leaseActor) heal(i int) {
	now := a.now()
	ttl := a.cfg.TTL - now.Sub(a.start)
	if ttl < time.Millisecond || a.state.Ended() { // the script takes whole milliseconds
		return
	}
	a.pool.system.Root.Send(a.cfg.Nodes[i], &node.Heal{Request: a.request(0, now), TTL: ttl})
}

// extendFailed reports the failed round and, for an auto-extended lease,
// tries again soon (randomized, so contending rounds do not align) while
// the validity lasts.
func (a *leaseActor) extendFailed(cause error) {
	a.clearAlarm()
	a.to(held)
	err := a.explain(cause)
	a.dropVotes()
	a.state.setAtDeadline(a.atDeadline(err))
	a.answerWaiters(err)
	a.emit(ExtendFailed, err)
	if at := a.now().Add(jitter(a.cfg.TTL / RetryDivisor)); at.Before(a.state.ends()) {
		a.planExtend(at)
	}
	a.extendDeferred()
}

func (a *leaseActor) answerWaiters(err error) {
	for _, w := range a.waiters {
		w <- ExtendResult{Err: err}
	}
	a.waiters = nil
}
