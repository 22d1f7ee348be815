package lease

import (
	"cmp"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/redlease/redlease/node"
)

// startRound starts an acquire round, woken for cause (0: not woken, the
// backoff's); rounds a release, an expiry or a recheck woke are not
// charged against Attempts.
func (a *leaseActor) startRound(cause WakeCause) {
	a.count(cause)
	a.start = a.now()
	a.startVote(acquiring, a.acquireCmd, nil, a.start)
}

// count counts an acquire round that cause woke.
func (a *leaseActor) count(cause WakeCause) {
	a.attempts++
	if cause == 0 || cause == WakeFallback {
		a.charged++
	}
	if cause != 0 && a.cfg.Line != nil {
		a.cfg.Line.Woke(cause)
	}
	a.lookAgain = false
}

// startVote is the one way a counted round starts (acquire, fence,
// extend): the actor moves to phase p and sends cmd to the nodes in to
// (all when nil), counting the nodes not asked as refused, until the node
// timeout. The round's validity counts from a.start, which the caller
// sets (a fence round keeps its acquire round's); now is when it starts:
// one reading of the clock for the requests and the timeout.
func (a *leaseActor) startVote(p phase, cmd func(node.Request) node.Command, to []int, now time.Time) {
	a.to(p)
	n := len(a.cfg.Nodes)
	a.tally = tally{n: n}
	if to != nil {
		a.tally.refused = n - len(to)
	}
	a.sendAt(cmd, to, now)
	a.setAlarm(now.Add(a.cfg.NodeTimeout))
}

// record records v, a vote of the round out, unless the round was decided
// (dropVotes) or v is of an earlier one, or the node's vote is in already
// (its grant: countGrant); it reports whether it did.
func (a *leaseActor) record(v *node.Vote) bool {
	if v.Round != a.round || a.votes == nil || a.votes[v.Node].Outcome != 0 {
		return false
	}
	a.votes[v.Node] = *v
	if a.debug {
		a.cfg.Logger.Debug("redlease: vote", "resource", a.cfg.Resource, "node", v.Node,
			"round", v.Round, "outcome", v.Outcome, "rtt", v.RTT, "err", v.Err)
	}
	return true
}

// inRound handles what can happen while an acquire or fence round is out:
// its votes decide it, unless the alarm (the node timeout) comes first; a
// Wake may count a grant or leave a memo for the round's failure; the
// caller may give up.
func (a *leaseActor) inRound(msg any) {
	switch m := msg.(type) {
	case *node.Vote:
		a.tally.add(m.Outcome)
		a.decide()
	case *wake:
		a.roundFailed(errRoundTimeout)
	case *Wake:
		switch {
		case a.phase == acquiring && a.grantable(m) && a.votes[m.Node].Outcome == 0:
			a.countGrant(m.Node) // another node's grant, as the round goes
		case m.Cause == WakeRecheck, m.Next != "" && m.Next == a.digest():
			// A recheck, or named next (granted or not) by a node that
			// may have refused the round first: should the round fail,
			// look again at once, rather than wait for releases that a
			// node which cannot announce will never tell.
			a.lookAgain = true
		}
	case *Cancel:
		a.abortRound(m.Cause)
		a.answerFailure() // at once: see Cancel
	case *Close:
		a.abortRound(m.Abort)
	default:
		a.answerNotHeld(msg)
	}
}

// backingOff handles what can happen between acquire rounds: the alarm
// starts the next; so does a Wake, after nodes failed (a round that timed
// out under load, say): a release or the watchers' return is worth a look
// now rather than at the end of the backoff. Each node announces a
// release once, so this cannot spin.
func (a *leaseActor) backingOff(msg any) {
	switch m := msg.(type) {
	case *wake:
		a.startRound(0)
	case *Wake:
		a.clearAlarm()
		a.startRound(m.Cause)
	default:
		a.quitBetweenRounds(msg) // Cancel, Close
	}
}

// decide moves an acquire or fence round on once its tally settles it.
func (a *leaseActor) decide() {
	switch {
	case a.tally.won() && a.tooSlow(a.elapsed(a.start)):
		a.roundFailed(errTooSlow)
	case a.tally.won() && a.phase == acquiring && a.cfg.FenceKey != "":
		a.startFence()
	case a.tally.won():
		a.hold(a.start.Add(a.cfg.TTL-Drift(a.cfg.TTL, a.cfg.DriftFactor)), a.start.Add(a.cfg.TTL/ExtendDivisor))
	case a.tally.lost() && a.phase == fencing:
		a.roundFailed(errFenceRefused)
	case a.tally.lost():
		a.roundFailed(nil)
	}
}

// hold makes the lease held since a.start, valid until until, with its
// first automatic extension at extendAt: a won round (start + TTL −
// drift, and a third of the TTL), or a check round's word (resume).
func (a *leaseActor) hold(until, extendAt time.Time) {
	a.clearAlarm()
	a.to(held)
	// Acquiring is over: free what only it used, for as long as the lease
	// is held.
	a.backOff, a.failedVotes, a.heard = nil, nil, nil
	a.state.token = a.token
	a.state.hold(a.start, until, EndMargin(a.cfg.TTL), a.atDeadline(nil))
	a.armDeadline()
	r := Result{Attempts: a.attempts}
	if a.cfg.WinningVotes {
		r.Votes = slices.Clone(a.votes)
	}
	if a.since != "" {
		a.leaveQueues()
	}
	a.dropVotes()
	// Acquired goes out before the caller has the lease: a subscription
	// it starts then sees only what comes after.
	a.emit(Acquired, nil)
	a.reply(r)
	a.planExtend(extendAt)
	if a.info {
		a.cfg.Logger.Info("redlease: acquired", "resource", a.cfg.Resource, "attempts", a.attempts,
			"until", a.state.Until())
	}
}

// roundFailed cleans up after an acquire round that did not win and
// retries or gives up. cause is nil when the nodes simply refused. When
// only nodes in restart quarantine kept the round from a quorum, the next
// round waits until enough of them are back: an earlier one cannot win.
func (a *leaseActor) roundFailed(cause error) {
	a.clearAlarm()
	a.failedVotes = append(a.failedVotes[:0], a.votes...)
	holder, free := heldBy(a.failedVotes)
	// A refused round (cause nil) holds fewer keys than a quorum: nobody
	// waits for them, and announcing them would wake waiters for nothing.
	// One that timed out, or won too late, may hold a quorum.
	a.cleanUp(cause != nil)
	if cause == nil && a.cfg.Line != nil && a.cfg.NewBackOff != nil {
		a.queue() // contended: the rounds from now on queue
		switch {
		case holder != "":
			a.wait(holder, free)
			return
		case split(a.failedVotes):
			// Waiters woken together split the nodes: each draws a new
			// delay over six rounds, uncharged, rather than back off
			// exponentially, which would starve whoever lost most.
			a.to(waiting)
			a.waitingFor = ""
			now := a.now()
			d := 6 * now.Sub(a.start)
			a.waitFor(waitSplit, now.Add(time.Duration(rand.Int64N(int64(d)+1))))
			return
		}
	}
	back := quarantineEnd(a.failedVotes)
	if !back.IsZero() && cause == nil {
		cause = errQuarantine
	}
	if a.charged >= a.cfg.Attempts || a.cfg.NewBackOff == nil {
		a.giveUp(cause)
		return
	}
	d := a.nextBackOff()
	if d == backoff.Stop {
		a.giveUp(cause)
		return
	}
	if !back.IsZero() {
		if !a.cfg.Deadline.IsZero() && !back.Before(a.cfg.Deadline) {
			a.giveUp(errQuarantinePastDeadline)
			return
		}
		// The backoff's randomized wait on top, so that the waiters for
		// one node do not all come back at the same instant.
		d += max(back.Sub(a.now()), 0)
	}
	a.to(backingOff)
	a.setAlarm(a.now().Add(d))
}

// nextBackOff is the retry schedule's next wait, the schedule made at
// the first.
func (a *leaseActor) nextBackOff() time.Duration {
	if a.backOff == nil {
		a.backOff = a.cfg.NewBackOff()
	}
	return a.backOff.NextBackOff()
}

// queue has the rounds from now on carry Since: refused, they put the
// lease in the nodes' queues of waiters.
func (a *leaseActor) queue() {
	if a.since == "" && !a.cfg.Since.IsZero() {
		a.since = strconv.FormatInt(a.cfg.Since.UnixMicro(), 10)
	}
}

// heldBy reads a failed round's votes: when one other owner holds the key
// on a quorum, its digest and when enough of the keys in the way will have
// expired for a quorum to be free (zero if a key in the way has no TTL);
// "" when none does (a split vote, or nodes that failed).
func heldBy(votes []node.Vote) (holder string, free time.Time) {
	n, q := len(votes), Quorum(len(votes))
	var untils [16]time.Time // 16 nodes at most without allocating
	taken := untils[:0]
	counts := 0
	for _, v := range votes {
		if v.Outcome != node.Taken || v.Holder == "" {
			continue
		}
		taken = append(taken, v.Until)
		if v.Holder == holder {
			continue // counted
		}
		c := 0 // another holder: does it hold more?
		for _, w := range votes {
			if w.Outcome == node.Taken && w.Holder == v.Holder {
				c++
			}
		}
		if c > counts {
			holder, counts = v.Holder, c
		}
	}
	if counts < q {
		return "", time.Time{}
	}
	// Free once all but n-q of the keys in the way are gone; a key
	// without a TTL (zero) never goes.
	slices.SortFunc(taken, func(x, y time.Time) int {
		switch {
		case x.IsZero() || y.IsZero():
			return cmp.Compare(btoi(x.IsZero()), btoi(y.IsZero()))
		}
		return x.Compare(y)
	})
	return holder, taken[len(taken)-(n-q)-1]
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// split reports whether a failed round's nodes all answered Granted or
// Taken (or had not answered yet): contenders split them, and none of
// them failed.
func split(votes []node.Vote) bool {
	for _, v := range votes {
		if v.Outcome == node.Timeout || v.Outcome == node.Failed {
			return false
		}
	}
	return true
}

// quitBetweenRounds gives up acquiring between rounds (backingOff,
// waiting) on the caller's Cancel or the engine's Close, and answers any
// call (the lease is not held).
func (a *leaseActor) quitBetweenRounds(msg any) {
	switch m := msg.(type) {
	case *Cancel:
		a.clearAlarm()
		a.giveUp(m.Cause)
		a.answerFailure() // at once: see Cancel
	case *Close:
		a.clearAlarm()
		a.giveUp(m.Abort)
	default:
		a.answerNotHeld(msg)
	}
}

// abortRound gives up acquiring during a round, because of cause (a
// context or the engine): its keys are cleaned up at once.
func (a *leaseActor) abortRound(cause error) {
	a.clearAlarm()
	a.failedVotes = append(a.failedVotes[:0], a.votes...)
	a.cleanUp(true)
	a.giveUp(cause)
}

func (a *leaseActor) giveUp(cause error) {
	if cause == nil {
		cause = refused(a.failedVotes, false)
	}
	if a.since != "" {
		a.send(a.leaveCmd, nil) // out of the queues it may be in
	}
	a.to(failing)
	a.cause = cause
	a.startLinger()
}

// tooSlow: a round that took elapsed leaves no validity beyond the end
// margin, so a lease it won would end at once.
func (a *leaseActor) tooSlow(elapsed time.Duration) bool {
	return validity(a.cfg.TTL, elapsed, a.cfg.DriftFactor) <= EndMargin(a.cfg.TTL)
}

// quarantineEnd: when only nodes in restart quarantine stand between a
// failed round's votes and a quorum (the grants, the votes still out and
// the quarantined nodes would make one), the time enough of those nodes
// are back for it; zero otherwise.
func quarantineEnd(votes []node.Vote) time.Time {
	var backs []time.Time
	refused := 0 // for any reason but quarantine
	for _, v := range votes {
		switch {
		case v.Outcome == node.Failed && !v.Until.IsZero():
			backs = append(backs, v.Until)
		case v.Outcome != 0 && v.Outcome != node.Granted:
			refused++
		}
	}
	n := len(votes)
	need := Quorum(n) - (n - refused - len(backs)) // quarantined nodes the quorum needs
	if need <= 0 || need > len(backs) {
		return time.Time{}
	}
	slices.SortFunc(backs, time.Time.Compare)
	return backs[need-1]
}

var (
	// errRefused matches the refusal of a round that no single cause
	// ended (refused says what its nodes answered).
	errRefused    = errors.New("redlease: no quorum")
	errQuarantine = errors.New("redlease: the quorum needs nodes that sit out a restart quarantine")
	// errQuarantinePastDeadline: waiting for them would outlast the caller.
	errQuarantinePastDeadline = errors.New("redlease: the quorum needs nodes whose restart quarantine ends after the context's deadline")
	errRoundTimeout           = errors.New("redlease: no quorum within the node timeout")
	errTooSlow                = errors.New("redlease: quorum reached after the validity ran out")
	errNoExtension            = errors.New("redlease: no extension before the validity deadline")
	errFenceRefused           = errors.New("redlease: the fencing token reached no quorum of the granting nodes")
	errExpiresSoon            = errors.New("redlease: the keys of the quorum expire too soon to resume the lease")
)

// jitter returns d scaled by a random factor in [0.5, 1.5).
func jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int64N(int64(d)+1))
}
