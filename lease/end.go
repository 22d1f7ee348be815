package lease

import (
	"errors"
	"slices"
	"time"

	"github.com/redlease/redlease/internal/errtext"
	"github.com/redlease/redlease/node"
)

// answerRelease answers a pending Release once a quorum of nodes deleted
// the lease's own key, once so many found it not there (another owner's
// key, or none) that no quorum can, or once all have answered (all): a
// dead node does not hold up the holder, and a holder whose lease had lost
// its keys is told so. Once all answered, the release is Held if so few
// nodes said that they no longer hold the key (deleted it, or had none)
// that the rest, which did not answer, may be a quorum still holding it.
func (a *leaseActor) answerRelease(all bool) {
	deleted, notMine := 0, 0
	for _, v := range a.votes {
		switch v.Outcome {
		case node.Granted:
			deleted++
		case node.Taken, node.Absent:
			notMine++
		}
	}
	n := len(a.votes)
	lost := n-notMine < Quorum(n)
	switch {
	case deleted >= Quorum(n):
		a.release <- ReleaseResult{Deleted: deleted}
	case lost, all:
		held := !lost && n-deleted-notMine >= Quorum(n)
		a.release <- ReleaseResult{Deleted: deleted, Lost: lost, Held: held, Votes: slices.Clone(a.votes)}
	default:
		return
	}
	a.release = nil
	a.to(ended)
}

// atDeadline is the error a held lease ends with if its deadline passes
// now: a lease meant to go on is lost (failure says why); otherwise it
// simply expired.
func (a *leaseActor) atDeadline(failure error) error {
	if !a.cfg.AutoExtend || a.extendsOver {
		return ErrExpired
	}
	if failure == nil {
		return errLostUnextended // set at every acquire and extension: made once
	}
	return lost(failure)
}

// errLostUnextended ends an auto-extended lease whose deadline passed with
// no extension failing first.
var errLostUnextended = lost(errNoExtension)

// lost is ErrLeaseLost for cause. Its text is made when asked for, not
// with it: every failed extension round makes one (the error its lease
// would end with), and with a majority of nodes down that is every lease,
// several times over, while their holders are being told.
func lost(cause error) error { return lostError{cause} }

type lostError struct{ cause error }

func (e lostError) Error() string {
	return errtext.Prefix + errtext.Bare(ErrLeaseLost) + ": " + errtext.Bare(e.cause)
}

func (e lostError) Unwrap() []error { return []error{ErrLeaseLost, e.cause} }

// onDeadline finishes a lease that its deadline timer ended.
func (a *leaseActor) onDeadline() {
	if !a.holding() || !a.state.Ended() {
		return
	}
	// No release: the lease ends EndMargin before Until, and its keys must
	// keep others out until then. They expire on their own by the TTL.
	a.wrapUp(ended, a.state.err)
}

// onRelease ends a held lease by Release, which it answers once a quorum
// confirmed (answerRelease).
func (a *leaseActor) onRelease(m *Release) {
	err := a.finish(ErrReleased) // before the release may grant the next holder the key
	if a.cfg.Line != nil {
		// releaseAll, queueing the next caller: the line sends it.
		a.cfg.Line.HandOff(a.prepare(a.handOffCmd).(*node.HandOff), errors.Is(err, ErrReleased))
	} else {
		a.releaseAll()
	}
	a.wrapUp(releasing, err)
	a.release = m.Reply
}

// prepare counts a round whose command to every node it returns, for a
// Line to send (Line.HandOff).
func (a *leaseActor) prepare(cmd func(node.Request) node.Command) node.Command {
	a.owed += len(a.cfg.Nodes)
	return a.newRound(cmd, a.now())
}

// onDetach ends a held lease by Detach, leaving its keys on the nodes:
// nothing is sent.
func (a *leaseActor) onDetach(m *Detach) {
	if err := a.finish(ErrDetached); !errors.Is(err, ErrDetached) { // its deadline timer was first
		a.wrapUp(ended, err)
		m.Reply <- DetachResult{Err: err}
		return
	}
	a.wrapUp(ended, ErrDetached)
	m.Reply <- DetachResult{TTL: a.cfg.TTL}
}

// closeHeld ends a held lease because the engine closes.
func (a *leaseActor) closeHeld(err error) {
	err = a.finish(err) // before its release: see finish
	a.releaseAll()
	a.wrapUp(ended, err)
}

// ending handles what can happen once a lease failed or ended, while the
// votes it is owed come in: a release round's votes may answer Release;
// the alarm (the linger bound) stops the wait; a Cancel gets the failure
// at once (see Cancel); calls get the lease's Err.
func (a *leaseActor) ending(msg any) {
	switch msg.(type) {
	case *node.Vote:
		if a.phase == releasing {
			a.answerRelease(false)
		}
	case *wake:
		a.owed = 0 // waited long enough for the votes owed
	case *Cancel:
		a.answerFailure()
	default:
		a.answerNotHeld(msg)
	}
}

// finish ends the lease's state (Done closed, Err set) with err, unless
// its deadline timer was first, and returns the error it ended with. A
// release goes to the nodes only after it: the release may grant the key
// to the next holder, who must never see this lease still held.
func (a *leaseActor) finish(err error) error {
	if !a.state.finish(err) {
		err = a.state.err
	}
	return err
}

// wrapUp follows the end of the lease, moving to next (ended or
// releasing): the terminal event, the closed event channel, answers to
// pending Extend calls.
func (a *leaseActor) wrapUp(next phase, err error) {
	a.to(next)
	a.stopTimers()
	kind := terminalKind(err)
	a.emit(kind, err) // and closes the event channel
	if a.cfg.Owner != nil {
		a.cfg.Owner.Ended(a.elapsed(a.state.start), err) // the winning round's
	}
	if a.cfg.Line != nil {
		a.cfg.Line.Done(kind == Released)
	}
	for _, w := range a.waiters {
		w <- ExtendResult{Err: err}
	}
	a.waiters = nil
	for _, m := range a.deferred {
		m.Reply <- ExtendResult{Err: err}
	}
	a.deferred = nil
	if kind == Lost {
		a.cfg.Logger.Warn("redlease: lease lost", "resource", a.cfg.Resource, "err", err)
	} else if a.info {
		a.cfg.Logger.Info("redlease: lease ended", "resource", a.cfg.Resource, "err", err)
	}
	a.startLinger()
}

func terminalKind(err error) EventKind {
	switch {
	case errors.Is(err, ErrReleased):
		return Released
	case errors.Is(err, ErrExpired):
		return Expired
	case errors.Is(err, ErrDetached):
		return Detached
	}
	return Lost
}

// A lease actor that ended waits for the votes it is still owed at most
// lingerTimeouts node timeouts plus lingerSlack: a node actor answers
// every command by its node timeout, so one timeout would do; the second
// and the slack cover a vote that was queued behind a busy mailbox.
const (
	lingerTimeouts = 2
	lingerSlack    = 100 * time.Millisecond
)

// startLinger bounds the wait for owed votes, should a node actor not
// answer (it always does, by the node timeout; this is the safety net).
func (a *leaseActor) startLinger() {
	if a.owed > 0 {
		a.setAlarm(a.now().Add(lingerTimeouts*a.cfg.NodeTimeout + lingerSlack))
	}
}

// explain is the error of a failed extension round, naming each node.
func (a *leaseActor) explain(cause error) error {
	return &ExtendError{Nodes: Outcomes(a.votes, a.cfg.Addrs, cause), Cause: cause}
}
