package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cenkalti/backoff/v4"

	"github.com/redlease/redlease/actors"
	"github.com/redlease/redlease/node"
)

// leaseActor runs one lease at a time, the lease its body holds; a Pool
// gives it the next once it is done with one. A held lease between
// rounds needs no actor: it parks (maybePark), giving its actor back to
// the pool, and the next message for it (its alarm, a call) binds it
// another (body.bindLocked). An idle actor costs the pool ~1 KB; a
// parked lease keeps only its body.
type leaseActor struct {
	self    *actor.PID
	mailbox *actors.Mailbox
	pool    *Pool // takes the actor back when it is done with a lease
	// round numbers the commands sent to all nodes, across every lease the
	// actor runs, so that a late vote never matches a later lease's round;
	// first is the first round of the body it runs now: older votes are
	// another's, or stale.
	round, first uint64
	// votes are the current round's, by node; nil while a lease is held
	// between rounds (dropVotes), and taken again by the next round.
	// votesBox holds them in the pool, made once with them: putting a
	// slice there would allocate its header every time.
	votes    []node.Vote
	votesBox *[]node.Vote
	tally    tally // of the current round
	owed     int   // votes not yet received: the body stays bound meanwhile

	bound // zero while idle
	*body // the lease it runs; nil while idle
}

// bound is the part of a lease's state that only an actor running it
// needs: while it acquires, and while a round or a release is out. A
// parked lease has none of it (it is held, between rounds), so it lives
// in the actor, and is zeroed when the actor lets go of the body.
type bound struct {
	attempts int             // acquire rounds
	charged  int             // of them, those that count against Config.Attempts
	heard    []heard         // releases announced while acquiring
	noGrant  uint64          // nodes (nodeBit) where its cleanups may delete: their grants do not count
	backOff  backoff.BackOff // Config.NewBackOff's, once a round failed
	// The last release heard (its holder, and when), and the time from
	// the one before it: about one hold and hand-off, lately.
	lastHolder  string
	lastRelease int64 // mono
	releaseGap  time.Duration
	waitingFor  string // waiting: the holder in the way ("": any)
	cause       error  // why acquiring failed
	failedVotes []node.Vote
	release     chan<- ReleaseResult  // releasing: the Release to answer
	waiters     []chan<- ExtendResult // manual Extend calls on the round in flight
	deferred    []*Extend             // Extend calls for another TTL, after the round in flight
	alarmWas    int64                 // mono: when the alarm being handled was due
}

// body is a lease as it outlives the actors that run it: its state, and
// the timer that wakes it. Bodies are reused, as actors are (Pool).
// A parked lease (a held lease between rounds) keeps its body alone, so
// it must stay small: see TestBodyFitsItsSizeClass.
type body struct {
	pool *Pool
	// mu guards the binding (actor, live) and the timer's fields.
	mu    sync.Mutex
	actor *leaseActor // the actor running the lease; nil: parked (or done)
	live  bool        // a lease is on the body: from Pool.Start to done
	// timer is the body's one timer, made once: it wakes the lease at the
	// alarm and ends the lease deadlineOf holds (nil: none is held) at
	// its end. See timer.go.
	timer      Timer
	armedAt    int64 // mono: when the timer fires; 0: not armed (mu)
	alarmDue   int64 // mono: the alarm still to send; 0: none (mu)
	deadlineOf atomic.Pointer[State]

	perLease // the current lease's; zero (state nil) between leases
}

// perLease is a lease actor's state for one lease.
//
// The one-byte fields sit together (a held lease keeps the struct, and
// each alone would cost a padded word).
type perLease struct {
	cfg   Config
	state *State

	phase phase
	// Log every vote (debug), and the start and end of the lease (info):
	// checked once, as a call with arguments allocates even when dropped.
	debug, info bool
	// lookAgain: a recheck, or being named next, came while the round
	// was out: should it fail, the next round starts at once (wait).
	lookAgain   bool
	reason      waitReason // waiting: what for, and what the alarm means
	replied     bool       // the Result went out
	extendsOver bool       // MaxHold passed: the lease is meant to expire

	start     time.Time // start of the current acquire or extend round
	ownDigest string    // the value as announcements name it, made once
	since     string    // Config.Since as rounds carry it, once queued
	token     uint64    // fencing token of the won round

	// alarmAt is when the alarm is due (zero: not set); what it means
	// follows from the phase: the end of the round in flight (acquiring,
	// fencing, extending), the next round (backingOff), the next automatic
	// extension (held), the end of the wait for owed votes (failing,
	// releasing, ended). In mono (timer.go): 0 is not set.
	alarmAt int64
}

func (a *leaseActor) Receive(ctx actor.Context) {
	defer actors.Recover(func(reason any) { a.crash(ctx, reason) })
	msg := ctx.Message()
	switch m := msg.(type) {
	case *actor.Started:
		return
	case *actor.Stopped:
		a.stopped()
		return
	case *body: // bound to a lease: its begin, or a call, follows
		a.body, a.first = m, a.round+1
		return
	case *begin:
		a.begin()
	default:
		if !a.current(msg) {
			answerStale(msg)
			a.maybePark(ctx) // a stale call may have bound a parked lease
			return
		}
		a.onDeadline() // the deadline timer may have ended the lease
		a.handle(msg)
	}
	if !a.maybeDone(ctx) {
		a.maybePark(ctx)
	}
}

// begin starts a lease: the actor is idle (a new one, or one the pool
// gave back).
func (a *leaseActor) begin() {
	cfg, st := a.cfg, a.state // Pool.Start's
	a.perLease = perLease{cfg: cfg, state: st,
		debug: cfg.Logger.Enabled(context.Background(), slog.LevelDebug),
		info:  cfg.Logger.Enabled(context.Background(), slog.LevelInfo)}
	if a.cfg.Resumed != nil {
		a.resume()
		return
	}
	if a.cfg.QueueAtOnce || a.cfg.Queued {
		a.queue()
	}
	if a.cfg.WaitFirst {
		if a.since != "" && !a.cfg.Queued {
			// Take its place among the waiters at once, so that the
			// release it waits for can name it, in its turn.
			a.send(a.queueCmd, nil)
		}
		a.to(waiting)
		a.waitFor(waitHearing, a.now().Add(a.cfg.NodeTimeout/YieldDivisor))
		return
	}
	a.startRound(0)
}

// current reports whether msg is about the lease the actor runs now, and
// not a late reply, timer or call about an earlier one.
func (a *leaseActor) current(msg any) bool {
	if a.body == nil || a.state == nil {
		return false
	}
	switch m := msg.(type) {
	case *node.Vote:
		return m.Round >= a.first
	case *Release:
		return m.State == a.state
	case *Extend:
		return m.State == a.state
	case *Detach:
		return m.State == a.state
	case *Cancel:
		return m.State == a.state
	case *Close:
		return m.State == a.state
	case *Wake:
		return m.State == a.state
	}
	return true // wake checks the alarm, expire the state
}

// answerStale answers a call about a lease that has ended (the actor has
// moved on, or is idle) with that lease's Err; anything else about it is
// dropped.
func answerStale(msg any) {
	switch m := msg.(type) {
	case *node.Vote:
		m.Free()
	case *Release:
		m.Reply <- ReleaseResult{Err: m.State.Err()}
	case *Extend:
		m.Reply <- ExtendResult{Err: m.State.Err()}
	case *Detach:
		m.Reply <- DetachResult{Err: m.State.Err()}
	}
}

// handle runs msg in the lease's phase. First, in every phase: a vote of
// the round out is recorded (record), an alarm that is not due is dropped,
// and a Wake's release is noted (noteRelease). Then each phase has one
// handler, which names every message it acts on and drops the rest.
func (a *leaseActor) handle(msg any) {
	switch m := msg.(type) {
	case *node.Vote:
		a.owed--
		defer m.Free() // record copies it
		if !a.record(m) {
			return
		}
	case *wake:
		if !a.alarmFired() {
			return
		}
	case *Wake:
		a.noteRelease(m)
	}
	switch a.phase {
	case acquiring, fencing:
		a.inRound(msg)
	case backingOff:
		a.backingOff(msg)
	case waiting:
		a.waiting(msg)
	case held:
		a.held(msg)
	case extending:
		a.extending(msg)
	case failing, releasing, ended:
		a.ending(msg)
	}
}

// alarmFired reports whether the alarm is due, and takes it: a wake of an
// earlier setting (the timer fired as it was reset), or of a lease the
// actor ran before, finds it not due, or not set.
func (a *leaseActor) alarmFired() bool {
	if a.alarmAt == 0 || mono(a.now()) < a.alarmAt {
		return false
	}
	a.alarmWas, a.alarmAt = a.alarmAt, 0
	return true
}

// answerNotHeld answers a call about a lease that is not held: Release and
// Extend get its Err.
func (a *leaseActor) answerNotHeld(msg any) {
	switch m := msg.(type) {
	case *Release:
		m.Reply <- ReleaseResult{Err: a.state.Err()}
	case *Extend:
		m.Reply <- ExtendResult{Err: a.state.Err()}
	case *Detach:
		m.Reply <- DetachResult{Err: a.state.Err()}
	}
}

// stopped: the actor stops (a crash, or the pool closing). A lease it was
// still running is done with.
func (a *leaseActor) stopped() {
	if a.body != nil && a.state != nil {
		a.stopTimers()
		a.done(nil)
	}
	if a.pool != nil {
		a.pool.actors.Done()
	}
}

// maybeDone answers, and is done with the lease, once it ended or failed
// and the actor owes nothing: the actor goes back to the pool, or stops.
// It reports whether it was done.
func (a *leaseActor) maybeDone(ctx actor.Context) bool {
	if a.owed > 0 || (a.phase != failing && a.phase != releasing && a.phase != ended) {
		return false
	}
	a.answerFailure()
	if a.phase == releasing {
		a.answerRelease(true)
	}
	a.stopTimers()
	a.done(ctx)
	return true
}

// maybePark parks a held lease that has nothing to do until its alarm:
// the body unbinds, and the actor goes back to the pool (or stops). A
// message posted meanwhile keeps it bound. Nothing of the actor is
// touched once it is in the pool: another lease may take it at once.
func (a *leaseActor) maybePark(ctx actor.Context) {
	if a.body == nil || a.phase != held || a.owed > 0 || a.pool == nil {
		return
	}
	b := a.body
	b.mu.Lock()
	if a.mailbox.UserMessageCount() > 0 {
		b.mu.Unlock()
		return
	}
	b.actor = nil
	b.mu.Unlock()
	a.dropVotes()
	a.bound, a.body = bound{}, nil
	if self := a.self; !a.pool.put(a) {
		ctx.Stop(self)
	}
}

// done closes the lease's Stopped, tells the owner, and leaves the actor
// idle: back in the pool (its body too), or stopped; with a nil ctx (the
// actor is stopping) the actor is left as it is.
func (a *leaseActor) done(ctx actor.Context) {
	b, st, owner := a.body, a.state, a.cfg.Owner
	// Back in the pool first, as the reply and Line.Done below may start
	// the next lease at once: it then takes this actor, whose binding and
	// begin wait in the mailbox until this message is handled. The body
	// goes back last, once it is reset.
	self, reuse := a.self, ctx != nil && a.pool != nil && a.pool.put(a)
	// A stop while acquiring (the actor crashed, or was stopped) still
	// answers: the caller waits for nothing else.
	a.reply(Result{Err: errStoppedUnanswered, Attempts: a.attempts})
	if a.cfg.Line != nil {
		a.cfg.Line.Done(false) // a crash or a stop may have skipped it
	}
	b.mu.Lock()
	b.live, b.actor = false, nil // calls about the lease are answered stale from now on
	b.mu.Unlock()
	a.to(idle)
	a.perLease = perLease{}
	a.bound, a.body = bound{}, nil
	if a.pool != nil {
		a.pool.putBody(b)
	}
	st.stop()
	if owner != nil {
		owner.Done(st)
	}
	if ctx != nil && !reuse {
		ctx.Stop(self)
	}
}

// answerFailure tells the acquirer, once, why acquiring failed.
func (a *leaseActor) answerFailure() {
	if a.phase == failing {
		a.reply(Result{Err: a.cause, Attempts: a.attempts, Votes: a.failedVotes})
	}
}

// errStoppedUnanswered answers an acquire whose actor stopped before it
// decided.
var errStoppedUnanswered = errors.New("redlease: lease actor stopped without an answer")

func (a *leaseActor) reply(r Result) {
	if !a.replied && a.cfg.Reply != nil {
		a.replied = true
		if r.Err != nil && a.cfg.Line != nil {
			// Out of the line before the caller has its answer: its next
			// call (a TryAcquire at once) comes after, in the resource
			// actor's inbox, and must not find it there.
			a.cfg.Line.Done(false)
		}
		a.cfg.Reply <- r
		a.cfg.Reply = nil // the caller has it: a held lease keeps no channel for it
	}
}

// crash ends whatever the actor was doing with an error instead of letting
// protoactor restart it with empty state.
func (a *leaseActor) crash(ctx actor.Context, reason any) {
	if a.body == nil || a.state == nil { // idle: no lease to end
		ctx.Stop(a.self)
		return
	}
	err := fmt.Errorf("redlease: lease actor panicked: %v", reason)
	a.cfg.Logger.Error("redlease: lease actor panicked", "resource", a.cfg.Resource, "panic", reason)
	switch a.phase {
	case held, extending:
		a.closeHeld(lost(err))
	case acquiring, fencing, backingOff, waiting, failing:
		a.reply(Result{Err: err, Attempts: a.attempts})
		if a.phase != failing {
			a.releaseAll()
		}
	}
	if a.release != nil {
		a.release <- ReleaseResult{Err: err}
		a.release = nil
	}
	a.stopTimers()
	ctx.Stop(a.self)
}
