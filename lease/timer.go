package lease

import "time"

// A lease actor has one timer, for its alarm and for the deadline of the
// lease it holds. A round, a release and a hold each set it, and a short
// cycle of acquire and release would reset a timer several times: each
// reset takes the runtime's timer lock, which profiles showed at a tenth
// of the client's CPU per cycle. So the timer is armed lazily: a setting
// later than the one armed leaves the timer as it is, and a firing that
// finds nothing due re-arms it for what is still to come (fire). Whatever
// is due, the timer is armed no later than it.

// clock0 is the origin of mono.
var clock0 = time.Now()

// mono is t as monotonic nanoseconds since clock0: an int64 where a
// time.Time would take 24 bytes of every actor. Never 0 for a time after
// clock0.
func mono(t time.Time) int64 { return int64(t.Sub(clock0)) }

// setAlarm wakes the actor (a *wake) at t, in place of any earlier setting.
func (a *leaseActor) setAlarm(t time.Time) {
	a.alarmAt = mono(t)
	a.body.mu.Lock()
	a.alarmDue = a.alarmAt
	a.armLocked(a.alarmDue)
	a.body.mu.Unlock()
}

// setAlarmExact is setAlarm for a long wait, the next extension, which
// comes after a round whose end the timer is still armed for: it re-arms
// the timer for what is due first rather than let it fire for nothing,
// which would cost more than the reset, once per extension.
func (a *leaseActor) setAlarmExact(t time.Time) {
	a.alarmAt = mono(t)
	a.body.mu.Lock()
	a.alarmDue = a.alarmAt
	a.armedAt = 0
	a.rearmLocked()
	a.body.mu.Unlock()
}

// clearAlarm drops the alarm; the timer may still fire, to find nothing.
func (a *leaseActor) clearAlarm() {
	if a.alarmAt == 0 {
		return
	}
	a.alarmAt = 0
	a.body.mu.Lock()
	a.alarmDue = 0
	a.body.mu.Unlock()
}

// armDeadline has the timer end the held lease EndMargin before its
// validity deadline, so that a late timer still closes Done before Until.
// The timer ends the lease itself, on its own goroutine, so Done closes on
// time even when this actor's mailbox is backed up; it then tells the
// actor, which emits the terminal event and cleans up. An extension moves
// the deadline later, which needs no new arming: the firing at the old one
// finds the lease not yet due (expireIfDue checks) and re-arms.
func (a *leaseActor) armDeadline() {
	a.deadlineOf.Store(a.state)
	a.body.mu.Lock()
	a.armLocked(mono(a.state.ends()))
	a.body.mu.Unlock()
}

// stopTimers drops the alarm and the deadline.
func (a *leaseActor) stopTimers() {
	a.clearAlarm()
	a.deadlineOf.Store(nil)
}

// armLocked makes the timer fire at at (mono) or before it.
func (b *body) armLocked(at int64) {
	if b.armedAt != 0 && b.armedAt <= at {
		return
	}
	b.armedAt = at
	d := time.Duration(at - mono(b.pool.clock.Now()))
	if b.timer == nil {
		// The closure keeps only b, which is reused, timer and all.
		b.timer = b.pool.clock.AfterFunc(d, b.fire)
		return
	}
	b.timer.Reset(d)
}

// rearmLocked arms the timer for the first of the alarm and the deadline
// of a lease not yet ended, if any.
func (b *body) rearmLocked() {
	next := b.alarmDue
	if st := b.deadlineOf.Load(); st != nil && !st.Ended() {
		if d := mono(st.ends()); next == 0 || d < next {
			next = d
		}
	}
	if next != 0 {
		b.armLocked(next)
	}
}

// fire runs on the timer's goroutine: it ends the held lease if its
// deadline passed, sends the alarm if due, and re-arms for what is left.
// A parked lease is bound an actor for them (post).
func (b *body) fire() {
	now := b.pool.clock.Now()
	if st := b.deadlineOf.Load(); st != nil && st.expireIfDue(now) {
		b.post(expired)
	}
	n := mono(now)
	b.mu.Lock()
	b.armedAt = 0
	alarm := b.alarmDue != 0 && b.alarmDue <= n
	if alarm {
		b.alarmDue = 0
	}
	b.rearmLocked()
	b.mu.Unlock()
	if alarm {
		b.post(wakeUp)
	}
}
