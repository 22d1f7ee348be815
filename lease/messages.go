package lease

import (
	"errors"
	"time"

	"github.com/redlease/redlease/actors"
	"github.com/redlease/redlease/node"
)

// Sentinel errors a lease ends with, and ErrMaxHold. The engine
// re-exports them.
var (
	ErrReleased  = errors.New("redlease: lease released")
	ErrExpired   = errors.New("redlease: lease expired")
	ErrLeaseLost = errors.New("redlease: lease lost")
	// ErrDetached ends a lease its holder let go without releasing it
	// (Detach): its keys stay on the nodes, for another holder to take up.
	ErrDetached = errors.New("redlease: lease detached: its keys stay on the nodes for another holder to take up")
	// ErrMaxHold answers an Extend after MaxHold: the lease is not
	// extended, but still held until its deadline, where it expires.
	ErrMaxHold = errors.New("redlease: maximum hold reached: the lease is no longer extended and expires at its deadline")
	// ErrBeyondMaxHold answers an Extend whose new TTL would hold the
	// lease past the end of its hold (see Extend.TTL): it is not
	// extended, but a shorter TTL, or its own, may still be.
	ErrBeyondMaxHold = errors.New("redlease: the new TTL would hold the lease beyond its maximum hold")
)

// Result answers the acquirer, once. On success Err is nil and the State
// holds the validity deadline.
type Result struct {
	Err      error // nil: held; otherwise why not: refused, too slow, a context error, a close
	Attempts int   // rounds tried
	// Votes is, by node, the last acquire round's on failure, and the
	// winning round's on success with Config.WinningVotes; a zero Outcome
	// means no answer (yet: a round is won at quorum).
	Votes []node.Vote
}

// ReleaseResult answers a Release: as soon as a quorum of nodes deleted
// the lease's key (Deleted), or so many found it not there (another's,
// Taken, or none, Absent) that no quorum can (Lost), or once all nodes
// answered.
type ReleaseResult struct {
	Err     error // set when the lease had already ended: its Err
	Deleted int   // nodes that deleted the lease's own key
	Lost    bool  // the key was not the lease's on so many nodes that no quorum could delete it
	// Held: not Lost, and the nodes that did not answer are a quorum, which
	// may still hold the key until it expires (the release goes on to them
	// in the background meanwhile). Neither Lost nor Held: no quorum can
	// hold the key any more.
	Held  bool
	Votes []node.Vote // by node, when fewer than a quorum deleted; a zero Outcome means no answer
}

// DetachResult answers a Detach.
type DetachResult struct {
	Err error         // nil: detached; otherwise the lease had ended: its Err
	TTL time.Duration // the lease's TTL, as its last extension set it
}

// ExtendResult answers an Extend.
type ExtendResult struct {
	Err error // nil: extended; the lease's Err if it had ended or got lost
}

// The calls below name the lease they are about by its State: the actor
// runs one lease after another, and a call about one it is done with is
// answered with that lease's Err, or dropped.

// Release asks the actor to release the held lease on every node and end it
// with ErrReleased. Reply (buffered 1) receives the node outcomes.
type Release struct {
	actors.Late
	State *State
	Reply chan<- ReleaseResult
}

// Detach asks the actor to end the held lease with ErrDetached, without
// releasing it: its keys stay on the nodes until they expire or another
// holder, who took the lease up, releases them. No extension follows; an
// extension round out goes on, and only lengthens the keys. Reply
// (buffered 1) receives the answer.
type Detach struct {
	actors.Late
	State *State
	Reply chan<- DetachResult
}

// Extend asks the actor for an extension round now (or to join the one in
// flight). Reply (buffered 1) receives the outcome.
//
// TTL, if set, becomes the lease's TTL from the round it starts on,
// whatever its outcome: that round's and later rounds'
// PEXPIRE, validity and end margin, and the next automatic extension's
// time. An Extend with a TTL other than the round's in flight waits for
// that round to be decided, then starts its own. MaxHold moves by the
// TTL's change, so that the hold's end (the winning round's start plus
// MaxHold plus TTL: the latest a lease may be valid) stays where it was;
// a TTL that would hold the lease beyond it is refused
// (ErrBeyondMaxHold).
type Extend struct {
	actors.Late
	State *State
	TTL   time.Duration // 0: the lease's
	Reply chan<- ExtendResult
}

// Cancel tells an actor still acquiring that its caller's context ended.
// The actor answers at once, without waiting for the votes it is owed:
// the cleanup releases are already with the node actors, which send them
// and answer each exactly once; the actor stays (and Close waits for it)
// to collect them, but a stalled node must not hold the caller for up to
// the node timeout.
type Cancel struct {
	actors.Late
	State *State
	Cause error
}

// Wake tells an actor waiting for its resource (Config.Line) that a node
// announced a release (each node announces each one), or that the
// announcements are heard now (see waiting).
type Wake struct {
	actors.Late
	State  *State
	Cause  WakeCause
	Holder string // WakeRelease: the owner released, as node.Digest names it ("": unknown)
	Node   int    // WakeRelease: the node that announced it (-1: unknown)
	Next   string // WakeRelease: the waiter the node's queue puts next ("": none)
	// Standby (WakeRelease): the waiter after Next, who stands in for it
	// should it not come ("": none).
	Standby string
	// Granted (WakeRelease): the release set the key on Node to Next's
	// value, as Next's acquire would have (see node.Config.Channel).
	Granted bool
}

// Close tells the actor that the engine closes: release the held lease
// and end it with Err, or give up acquiring with Abort. They differ: a
// lease that was never held was not released.
type Close struct {
	actors.Late
	State *State
	Err   error // a held lease ends with it
	Abort error // an acquisition in progress fails with it
}

// begin has the actor bound to a body acquire the lease Pool.Start put
// in it (its Config and State): the message carries nothing, so that
// starting a lease allocates no copy of its Config.
type begin struct{}

// beginning is the one begin message.
var beginning = &begin{}

// Timer messages, from the actor to itself; one may arrive after the
// actor moved on to another lease, or stopped.
type (
	wake   struct{ actors.Late } // the alarm (see setAlarm)
	expire struct{ actors.Late } // the deadline timer ended the lease
)

// Every alarm's and every deadline's message: they carry nothing.
var (
	wakeUp  = &wake{}
	expired = &expire{}
)
