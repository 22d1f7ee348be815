package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cenkalti/backoff/v4"

	"github.com/redlease/redlease/actors"
	"github.com/redlease/redlease/internal/errtext"
	"github.com/redlease/redlease/node"
)

// Shared is what the leases of one engine (one Pool) have in common.
// Each lease's Config points to the pool's rather than carry a copy: a
// lease actor keeps its Config for as long as the lease is held.
type Shared struct {
	Nodes       []*actor.PID
	Addrs       []string // the nodes' addresses, in Nodes order, for errors
	DriftFactor float64
	EventBuffer int // capacity of a lease's event channel (≥ 2)
	Logger      *slog.Logger
	Owner       Owner // nil: nobody is told
}

// Config describes one lease.
type Config struct {
	*Shared     // set by Pool.Start: its pool's
	Resource    string
	Key         string
	Value       string // the owner's random value
	TTL         time.Duration
	NodeTimeout time.Duration // bounds each round
	Attempts    int           // acquire rounds at most (≥ 1)
	// NewBackOff makes the schedule of waits between acquire rounds, at
	// the first wait (most acquires need none); nil: one round.
	NewBackOff func() backoff.BackOff
	// Deadline is the caller's, if any: a round that only quarantined
	// nodes kept from a quorum gives up at once when their quarantine
	// outlasts it, rather than wait for nothing.
	Deadline time.Time
	// MaxHold bounds extension: no round (automatic or Extend) starts
	// later than MaxHold after the winning acquire round started; the
	// lease then expires at its deadline. 0: no extension at all.
	MaxHold  time.Duration
	FenceKey string        // non-empty: issue fencing tokens (see doc.go)
	Reply    chan<- Result // buffered 1; receives exactly one Result

	// Line, if set, lets the actor wait for its resource instead of
	// polling: after a round that found one other owner holding a quorum,
	// it waits for that owner's release (a *Wake) or its keys' expiry.
	// Rounds it was woken for do not count against Attempts.
	Line Line
	// Since is when the caller began to wait (with a Line): nodes queue a
	// refused waiter by it (node.Acquire.Since, in Unix microseconds:
	// callers a few hundred µs apart are in order), and release
	// announcements name the next waiter. Rounds carry it from the first
	// refusal on, or from the first round with QueueAtOnce (the resource
	// is known to be contended). A grant (Wake.Granted) counts from it:
	// no node could grant the lease before. Zero: none.
	Since       time.Time
	QueueAtOnce bool
	// WaitFirst: begin by waiting, for a *Wake or at most
	// NodeTimeout/YieldDivisor,
	// before the first round (queued on the nodes at once with
	// QueueAtOnce) (the engine's next local waiter, when others
	// wait on the nodes too: all wake to the same announcement).
	WaitFirst bool
	// Queued: the previous lease's release put this one in the nodes'
	// queues of waiters already (Line.HandOff): it need not queue itself.
	Queued bool
	// WinningVotes: the Result of a lease held carries its winning round's
	// votes too (a copy: for tracing, off by default).
	WinningVotes bool
	AutoExtend   bool // extend at a third of the TTL until MaxHold
}

// Line is a lease's place among the waiters for its resource, kept by the
// engine, which sends the actor a *Wake when a release is announced. Its
// methods run on the actor and must not block.
type Line interface {
	// Wait: the actor's last round found the resource held by one owner
	// on a quorum (holder, as node.Digest names it), whose keys expire
	// enough for a quorum at until (zero: unknown). The actor waits until
	// then unless woken first. Wait reports whether a *Wake can come:
	// when no node can announce releases, the actor also bounds its wait
	// by its backoff.
	Wait(holder string, until time.Time) (wakes bool)
	// Woke: the actor starts a round, woken for cause.
	Woke(cause WakeCause)
	// Len is the number of callers in the line, this one included.
	Len() int
	// Done: the lease needs its place no more: acquiring failed, or the
	// held lease ended (released: by a release, which is announced). It
	// may be called more than once.
	Done(released bool)
	// HandOff calls r.ReleaseQueueing, which sends the held lease's
	// release, with the caller after this one in the line for it to put
	// in the nodes' queues of waiters (node.Release.Successor): since is
	// when it began to wait, value its owner value ("": nobody waits),
	// ttl its lease's TTL, which a release that grants it the key sets.
	// That caller cannot leave the line meanwhile, so that if it leaves,
	// its leave reaches the nodes after the release that queued it.
	HandOff(r Releaser)
}

// Releaser sends a held lease's release (see Line.HandOff).
type Releaser interface {
	// ungranted: value is a place kept for a caller not come yet, which
	// the nodes name but never grant (node.Release.SuccessorUngranted).
	ReleaseQueueing(since time.Time, value string, ttl time.Duration, ungranted bool)
}

// WakeJitter bounds the random delay between hearing a release and the
// round it wakes: larger than the spread of the announcement's delivery to
// the waiters of several engines (tens of microseconds on a LAN), so that
// the order of their subscriptions does not decide who wins.
const WakeJitter = 500 * time.Microsecond

// YieldDivisor: a waiter that waits to hear a release (the next caller in
// its engine's line, after a local release) gives it a tenth of the node
// timeout (5ms by default: a few rounds under load) before it races; a
// release heard meanwhile moves it on.
const YieldDivisor = 10

// SilenceTimeouts: a waiter that releases did not name (neither next nor
// standing in for the next) looks again once no release was announced
// for this many node timeouts (half a second by default): holds shorter
// than that cost waiters no round; and should the two waiters named both
// be gone, the resource stays idle no longer.
const SilenceTimeouts = 10

// raceDelay is how long the head of a line of n waits before the round a
// release woke. Every engine's heads hear the release at once, in the
// order they subscribed, so each waits a random delay below WakeJitter:
// the least of n draws, so that of all the callers waiting in every
// engine, each is as likely as any other to hold the least draw, and to
// win (a line of two wins twice as often as a line of one).
func raceDelay(n int) time.Duration {
	d := WakeJitter
	for range min(max(n, 1), 64) {
		d = min(d, time.Duration(rand.Int64N(int64(WakeJitter))))
	}
	return d
}

// WakeCause says why a waiting lease actor started a round.
type WakeCause uint8

// The causes of wake-ups.
const (
	WakeRelease  WakeCause = iota + 1 // a release was announced
	WakeExpiry                        // the keys in the way expired
	WakeFallback                      // the backoff ran out first (no node could announce), or no announcement came
	WakeRecheck                       // the announcements are now heard: one more look for a release they missed
	WakeSplit                         // waiters that woke together split the nodes; each drew a new delay
)

var wakeNames = [...]string{WakeRelease: "release", WakeExpiry: "expiry", WakeFallback: "fallback", WakeRecheck: "recheck", WakeSplit: "split"}

func (c WakeCause) String() string {
	if c > 0 && int(c) < len(wakeNames) {
		return wakeNames[c]
	}
	return fmt.Sprintf("WakeCause(%d)", uint8(c))
}

// Owner is told what a lease actor does that concerns more than its
// lease: the engine implements it. Its methods run on the actor and must
// not block.
type Owner interface {
	// Publish gets every event of the lease, as its channel does.
	Publish(Event)
	// Dropped: a non-terminal event did not fit in the lease's channel.
	Dropped()
	// ExtendLate: an automatic extension round started late after its
	// plan (the alarm fired late, or the actor was busy).
	ExtendLate(late time.Duration)
	// Ended: a held lease ended with err, its Err, held after the start
	// of its winning round.
	Ended(held time.Duration, err error)
	// Done is called once the actor is done with the lease: it ended or
	// failed, and every vote it was owed is in (or the linger bound
	// passed). State.Stopped is closed just before.
	Done(*State)
}

// phase is where a lease is. What moves it on (votes of the current round,
// the alarm, calls):
//
//	acquiring  -- a quorum, in time -->            held, or fencing with a FenceKey
//	           -- refused, timeout, too slow -->   backingOff, or failing when out of attempts
//	fencing    -- a quorum of the granting nodes -> held
//	           -- refused, timeout, too slow -->   backingOff, or failing
//	           -- one other owner holds a quorum --> waiting (with a Line)
//	backingOff -- alarm, Wake -->                  acquiring
//	waiting    -- Wake, alarm (expiry, backoff) --> acquiring
//	acquiring, fencing, backingOff, waiting -- Cancel, Close --> failing
//	held       -- alarm (auto-extension), Extend --> extending
//	extending  -- a quorum, in time -->            held (Extended)
//	           -- refused, timeout, too slow -->   held (ExtendFailed)
//	           -- a quorum holds another key -->   ended (Lost)
//	held, extending -- deadline, Close -->         ended
//	held, extending -- Release -->                 releasing
//	releasing  -- a quorum confirmed, or all answered -> ended
//	failing, ended -- the owed votes are in, or the linger alarm --> done:
//	           the actor is idle, or stops
//
// Each failed acquire round, and every end of a held lease but its
// deadline, sends release to every node first.
type phase uint8

const (
	acquiring  phase = iota // an acquire round is out
	fencing                 // won; writing the token back to the granting nodes
	backingOff              // between acquire rounds
	waiting                 // for the holder's release or its keys' expiry (Config.Line)
	failing                 // gave up; the Result goes out once owed votes are in
	held                    // the lease is held
	extending               // held, with an extend round out
	releasing               // ended by Release; answering it once a quorum confirmed
	ended                   // the lease is over; done once owed votes are in
)

// holding reports whether the lease is held (extending included).
func (a *leaseActor) holding() bool { return a.phase == held || a.phase == extending }

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
	// The caller next in line that the final release queues (HandOff).
	successor      string
	successorSince int64 // Unix microseconds
	successorTTL   time.Duration
	// successorUngranted: the successor is a kept place (Releaser)
	successorUngranted bool
	waitingFor         string // waiting: the holder in the way ("": any)
	cause              error  // why acquiring failed
	failedVotes        []node.Vote
	release            chan<- ReleaseResult  // releasing: the Release to answer
	waiters            []chan<- ExtendResult // manual Extend calls on the round in flight
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
	timer      *time.Timer
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
	recheck     bool      // a recheck came while a round was out
	deferred    bool      // waiting: for a waiter named next to go first
	wakeAt      WakeCause // waiting: what the alarm means
	replied     bool
	extendsOver bool // MaxHold passed: the lease is meant to expire

	start     time.Time // start of the current acquire or extend round
	ownDigest string    // the value as announcements name it, made once
	since     string    // Config.Since as rounds carry it, once queued
	acquired  time.Time // start of the winning acquire round
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
		a.begin(m)
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
func (a *leaseActor) begin(m *begin) {
	a.perLease = perLease{cfg: m.cfg, state: m.state,
		debug: m.cfg.Logger.Enabled(context.Background(), slog.LevelDebug),
		info:  m.cfg.Logger.Enabled(context.Background(), slog.LevelInfo)}
	if a.cfg.QueueAtOnce || a.cfg.Queued {
		a.queue()
	}
	if a.cfg.WaitFirst {
		if a.since != "" && !a.cfg.Queued {
			// Take its place among the waiters at once, so that the
			// release it waits for can name it, in its turn.
			a.send(a.queueCmd, nil)
		}
		a.phase, a.wakeAt = waiting, WakeFallback
		a.setAlarm(time.Now().Add(a.cfg.NodeTimeout / YieldDivisor))
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
	}
}

func (a *leaseActor) handle(msg any) {
	switch m := msg.(type) {
	case *node.Vote:
		a.owed--
		a.vote(m)
		m.Free() // vote copied it
	case *wake:
		a.onAlarm()
	case *expire:
		a.onDeadline()
	case *Wake:
		a.onWake(m)
	case *Extend:
		a.onExtend(m)
	case *Release:
		a.onRelease(m)
	case *Cancel:
		a.abort(m.Cause)
		// The caller's context ended: answer now, without waiting for
		// the votes the actor is owed. The cleanup releases are already
		// with the node actors, which send them and answer each exactly
		// once; the actor stays (and Close waits for it) to collect
		// them, but a stalled node must not hold the caller for up to
		// the node timeout.
		a.answerFailure()
	case *Close:
		if a.holding() {
			err := a.finish(m.Err) // before its release: see finish
			a.releaseAll()
			a.wrapUp(err)
		} else {
			a.abort(m.Abort)
		}
	}
}

// onAlarm acts on the alarm if it is due: a wake of an earlier setting
// (the timer fired as it was reset), or of a lease the actor ran before,
// finds it not due, or not set, and does nothing.
func (a *leaseActor) onAlarm() {
	due := a.alarmAt
	if due == 0 || mono(time.Now()) < due {
		return
	}
	a.alarmAt = 0
	switch a.phase {
	case acquiring, fencing:
		a.roundFailed(errRoundTimeout)
	case extending:
		a.extendFailed(errRoundTimeout)
	case backingOff:
		a.startRound(0)
	case waiting:
		a.startRound(a.wakeAt)
	case held:
		a.startExtend()
		if a.cfg.Owner != nil {
			a.cfg.Owner.ExtendLate(time.Duration(mono(a.start) - due))
		}
	case failing, releasing, ended:
		a.owed = 0 // waited long enough for the votes owed
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

// startRound starts an acquire round, woken for cause (0: not woken, the
// backoff's); rounds a release, an expiry or a recheck woke are not
// charged against Attempts.
func (a *leaseActor) startRound(cause WakeCause) {
	a.count(cause)
	a.start = time.Now()
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
	a.recheck = false
}

// grantable reports whether m is a grant to this lease that may count as
// node m.Node's vote (Wake.Granted): the lease is not fenced (a grant
// brings no token), it sent that node no deletion since it began (see
// cleanUp), and it began to wait recently enough that a validity counted
// from then is worth having; otherwise its round (that node answers it as
// to the key's owner) brings a fresh one.
func (a *leaseActor) grantable(m *Wake) bool {
	return m.Granted && m.Node >= 0 && m.Next == a.digest() && a.cfg.FenceKey == "" &&
		a.noGrant&nodeBit(m.Node) == 0 && !a.cfg.Since.IsZero() && time.Since(a.cfg.Since) < a.cfg.TTL/ExtendDivisor
}

// startGranted starts the round that node i's grant woke: the grant is
// its vote, and the round asks the other nodes alone (on one node, it is
// won at once). The round's validity counts from Config.Since, before
// which no node can have granted the lease: a grant's announcement may
// come late, and the key's TTL runs from the grant.
func (a *leaseActor) startGranted(i int) {
	a.count(WakeRelease)
	a.start = a.cfg.Since
	n := len(a.cfg.Nodes)
	var buf [16]int
	to := buf[:0]
	for j := range n {
		if j != i {
			to = append(to, j)
		}
	}
	if len(to) > 0 {
		a.startVote(acquiring, a.acquireCmd, to, time.Now())
		a.tally.refused-- // node i, not asked: its grant is its vote
	} else {
		// One node: a round with nothing to send, its timer unarmed (the
		// grant decides it now).
		a.phase, a.tally = acquiring, tally{n: n}
		a.round++
		a.takeVotes()
		clear(a.votes)
	}
	a.countGrant(i)
}

// countGrant counts node i's grant as its vote in the round in flight,
// unless the node answered first; the round's validity then counts from
// Config.Since (see startGranted).
func (a *leaseActor) countGrant(i int) {
	if a.votes[i].Outcome != 0 {
		return
	}
	a.votes[i] = node.Vote{Node: i, Round: a.round, Outcome: node.Granted}
	if a.cfg.Since.Before(a.start) {
		a.start = a.cfg.Since
	}
	a.tally.add(node.Granted)
	a.decide()
}

// startVote is the one way a counted round starts (acquire, fence,
// extend): the actor moves to phase p and sends cmd to the nodes in to
// (all when nil), counting the nodes not asked as refused, until the node
// timeout. The round's validity counts from a.start, which the caller
// sets (a fence round keeps its acquire round's); now is when it starts:
// one reading of the clock for the requests and the timeout.
func (a *leaseActor) startVote(p phase, cmd func(node.Request) node.Command, to []int, now time.Time) {
	a.phase = p
	n := len(a.cfg.Nodes)
	a.tally = tally{n: n}
	if to != nil {
		a.tally.refused = n - len(to)
	}
	a.sendAt(cmd, to, now)
	a.setAlarm(now.Add(a.cfg.NodeTimeout))
}

// releaseAll sends release to every node, in a round of its own: a key of
// the lease may be on any of them. Deletions are announced to waiters, and
// the lease leaves the queues of waiters it may still be in: it is done
// acquiring.
func (a *leaseActor) releaseAll() { a.send(a.finalReleaseCmd, nil) }

// cleanUp releases the failed acquire round's keys (a.failedVotes) on
// every node, as releaseAll does: a grant may be on its way from any of
// them; announce: announce the deletions. A node that refused the round
// (another owner's key) set no key of it: a key of the lease there now is
// a release's grant (Wake.Granted), which the release keeps
// (node.Release.Keep), since deleting it would take it back unknown to
// the lease, whose announcement may still come, and to the waiters after
// it, whom nobody would name. The nodes where the release may delete one
// count no grant for the rest of the lease (noGrant). The lease keeps its
// place in the queues of waiters, and takes it back where it lost it
// (releaseCmd): it may go on acquiring (giveUp leaves them).
func (a *leaseActor) cleanUp(announce bool) {
	for i, v := range a.failedVotes {
		if v.Outcome != node.Taken {
			a.noGrant |= nodeBit(i)
		}
	}
	if announce {
		a.send(a.announcedReleaseCmd, nil)
	} else {
		a.send(a.releaseCmd, nil)
	}
}

// send starts a new round: cmd to the nodes in to (all when nil), the same
// message to each (node actors only read it).
func (a *leaseActor) send(cmd func(node.Request) node.Command, to []int) {
	a.sendAt(cmd, to, time.Now())
}

// sendAt is send, for a round that starts at now.
func (a *leaseActor) sendAt(cmd func(node.Request) node.Command, to []int, now time.Time) {
	a.round++
	a.takeVotes()
	clear(a.votes)
	c := cmd(node.Request{Key: a.cfg.Key, Value: a.cfg.Value, Round: a.round, ReplyTo: a.self, Inbox: a.mailbox, Sent: now})
	if to == nil {
		for _, pid := range a.cfg.Nodes {
			a.pool.system.Root.Send(pid, c)
		}
		a.owed += len(a.cfg.Nodes)
		return
	}
	for _, i := range to {
		a.pool.system.Root.Send(a.cfg.Nodes[i], c)
	}
	a.owed += len(to)
}

// takeVotes gives the actor a vote slice for a round, if it has none.
func (a *leaseActor) takeVotes() {
	n := len(a.cfg.Nodes)
	if len(a.votes) == n {
		return
	}
	if b, ok := a.pool.votes.Get().(*[]node.Vote); ok && len(*b) == n {
		a.votes, a.votesBox = *b, b
		return
	}
	a.votes, a.votesBox = make([]node.Vote, n), new([]node.Vote)
}

// dropVotes hands the decided round's votes back to the pool: a held
// lease needs none until its next round (takeVotes), which saves a vote
// per node for every lease held. Later votes of the round are ignored.
func (a *leaseActor) dropVotes() {
	if a.votes == nil {
		return
	}
	clear(a.votes) // let go of their errors
	*a.votesBox = a.votes
	a.pool.votes.Put(a.votesBox)
	a.votes, a.votesBox = nil, nil
}

func (a *leaseActor) acquireCmd(r node.Request) node.Command {
	return &node.Acquire{Request: r, TTL: a.cfg.TTL, FenceKey: a.cfg.FenceKey, Since: a.since}
}

func (a *leaseActor) extendCmd(r node.Request) node.Command {
	return &node.Extend{Request: r, TTL: a.cfg.TTL}
}

// releaseCmd is a failed round's cleanup (cleanUp). A lease that queues
// puts itself back in the queue of waiters (as the Successor, at its own
// since): a node that granted it, or named it next, took it out, and the
// lease goes on waiting; without its place there, that node would name a
// later waiter next.
func (a *leaseActor) releaseCmd(r node.Request) node.Command {
	// Keep grants where the round was refused (past the 64th node a bit
	// is shared: there, delete unless all refused).
	c := &node.Release{Request: r, TTL: a.cfg.TTL, Keep: ^a.noGrant}
	if a.since != "" {
		c.Successor, c.SuccessorSince, c.SuccessorTTL = a.cfg.Value, a.since, a.cfg.TTL
	}
	return c
}

func (a *leaseActor) announcedReleaseCmd(r node.Request) node.Command {
	c := a.releaseCmd(r).(*node.Release)
	c.Announce = true
	return c
}

func (a *leaseActor) finalReleaseCmd(r node.Request) node.Command {
	return &node.Release{Request: r, TTL: a.cfg.TTL, Announce: true, Leave: a.since != ""}
}

// ReleaseQueueing implements Releaser: releaseAll, queueing the caller
// next in line too (an interface rather than a closure: a release costs
// no allocation for it).
func (a *leaseActor) ReleaseQueueing(since time.Time, value string, ttl time.Duration, ungranted bool) {
	a.successorSince, a.successor, a.successorTTL, a.successorUngranted = since.UnixMicro(), value, ttl, ungranted
	a.send(a.handOffCmd, nil)
}

// handOffCmd is finalReleaseCmd with the successor ReleaseQueueing got.
func (a *leaseActor) handOffCmd(r node.Request) node.Command {
	c := a.finalReleaseCmd(r).(*node.Release)
	if a.successor != "" {
		c.Successor, c.SuccessorSince = a.successor, strconv.FormatInt(a.successorSince, 10)
		c.SuccessorTTL, c.SuccessorUngranted = a.successorTTL, a.successorUngranted
	}
	return c
}

func (a *leaseActor) queueCmd(r node.Request) node.Command {
	return &node.Queue{Request: r, Since: a.since, TTL: a.cfg.TTL}
}

// leaveCmd takes the lease out of the queues of waiters. Where the key is
// free, it announces that it leaves, since a release may have named it
// next: the waiter after it goes instead.
func (a *leaseActor) leaveCmd(r node.Request) node.Command {
	return &node.Release{Request: r, TTL: a.cfg.TTL, Leave: true, Announce: true}
}

func (a *leaseActor) vote(v *node.Vote) {
	if v.Round != a.round || a.votes == nil {
		return // from an earlier round, or from one decided already (dropVotes)
	}
	if a.votes[v.Node].Outcome != 0 {
		return // counted already: the node's grant (countGrant)
	}
	a.votes[v.Node] = *v
	if a.debug {
		a.cfg.Logger.Debug("redlease: vote", "resource", a.cfg.Resource, "node", v.Node,
			"round", v.Round, "outcome", v.Outcome, "rtt", v.RTT, "err", v.Err)
	}
	switch a.phase {
	case acquiring, fencing:
		a.tally.add(v.Outcome)
		a.decide()
	case extending:
		a.tally.add(v.Outcome)
		a.extendVote()
	case releasing:
		a.answerRelease(false)
	}
}

// decide moves an acquire or fence round on once its tally settles it.
func (a *leaseActor) decide() {
	switch {
	case a.tally.won() && a.tooSlow(time.Since(a.start)):
		a.roundFailed(errTooSlow)
	case a.tally.won() && a.phase == acquiring && a.cfg.FenceKey != "":
		a.startFence()
	case a.tally.won():
		a.hold()
	case a.tally.lost() && a.phase == fencing:
		a.roundFailed(errFenceRefused)
	case a.tally.lost():
		a.roundFailed(nil)
	}
}

// answerRelease answers a pending Release once a quorum of nodes confirmed
// that our key is gone (deleted, or not ours), or once all have answered:
// a dead node does not hold up the holder.
func (a *leaseActor) answerRelease(all bool) {
	confirmed := 0
	for _, v := range a.votes {
		if v.Outcome == node.Granted || v.Outcome == node.Taken {
			confirmed++
		}
	}
	switch {
	case confirmed >= Quorum(len(a.votes)):
		a.release <- ReleaseResult{Confirmed: confirmed}
	case all:
		a.release <- ReleaseResult{Confirmed: confirmed, Votes: slices.Clone(a.votes)}
	default:
		return
	}
	a.release = nil
	a.phase = ended
}

func (a *leaseActor) hold() {
	a.clearAlarm()
	a.phase = held
	// Acquiring is over: free what only it used, for as long as the lease
	// is held.
	a.backOff, a.failedVotes, a.heard = nil, nil, nil
	a.acquired = a.start
	a.state.token = a.token
	a.state.hold(a.start, a.start.Add(a.cfg.TTL-Drift(a.cfg.TTL, a.cfg.DriftFactor)), EndMargin(a.cfg.TTL), a.atDeadline(nil))
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
	a.planExtend(a.start.Add(a.cfg.TTL / ExtendDivisor))
	if a.info {
		a.cfg.Logger.Info("redlease: acquired", "resource", a.cfg.Resource, "attempts", a.attempts,
			"until", a.state.Until())
	}
}

// leaveQueues takes a lease that won while it queued out of the queues of
// waiters on the nodes its win does not count (they refused it, or have
// not answered): there it would stay, and a later release would name it,
// and grant it the key, after the lease ended, a holder that is no more
// keeping a free node for a TTL. It only leaves (Keep, no Announce): a key
// of the lease there (a grant) stays until the lease's release, as its
// other keys do. Nobody waits for the answers.
func (a *leaseActor) leaveQueues() {
	var c *node.Release
	for i, v := range a.votes {
		if v.Outcome == node.Granted {
			continue
		}
		if c == nil {
			c = &node.Release{Request: node.Request{Key: a.cfg.Key, Value: a.cfg.Value, Sent: time.Now()},
				TTL: a.cfg.TTL, Leave: true, Keep: ^uint64(0)}
		}
		a.pool.system.Root.Send(a.cfg.Nodes[i], c)
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
			a.phase, a.wakeAt, a.deferred = waiting, WakeSplit, false
			a.waitingFor = ""
			d := 6 * time.Since(a.start)
			a.setAlarm(time.Now().Add(time.Duration(rand.Int64N(int64(d) + 1))))
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
		d += max(time.Until(back), 0)
	}
	a.phase = backingOff
	a.setAlarm(time.Now().Add(d))
}

// nextBackOff is the retry schedule's next wait, the schedule made at
// the first.
func (a *leaseActor) nextBackOff() time.Duration {
	if a.backOff == nil {
		a.backOff = a.cfg.NewBackOff()
	}
	return a.backOff.NextBackOff()
}

// wait waits for holder, who holds a quorum, to release (a *Wake) or for
// its keys to expire at free (zero: unknown). It looks again at once when
// a recheck came while the round was out, or when every node that showed
// holder's key has announced its release since (the round came too
// early). When no Wake can come, or nobody knows when the keys expire,
// the backoff bounds the wait, and that wake-up is charged.
func (a *leaseActor) wait(holder string, free time.Time) {
	switch {
	case a.recheck:
		a.startRound(WakeRecheck)
		return
	case a.gone(holder):
		a.startRound(WakeRelease)
		return
	}
	a.waitingFor = holder
	wakes := a.cfg.Line.Wait(holder, free)
	at, why := free, WakeExpiry
	if !wakes || at.IsZero() {
		d := backoff.Stop
		if a.charged < a.cfg.Attempts {
			d = a.nextBackOff()
		}
		switch {
		case d == backoff.Stop && at.IsZero():
			a.giveUp(nil)
			return
		case d != backoff.Stop && (at.IsZero() || time.Now().Add(d).Before(at)):
			at, why = time.Now().Add(d), WakeFallback
		}
	}
	a.phase, a.wakeAt, a.deferred = waiting, why, false
	a.setAlarm(at)
}

// onWake acts on a Wake, after noting which node announced whose release.
// A waiting actor starts a round at once for a recheck, or when the
// release names it next; when it names another waiter and this one to
// stand in for it, it lets that one go first for a node timeout; when it
// names two others, it waits on to be named; when it names nobody, it
// races after raceDelay. Another owner's release than the holder's it
// waits on does not free that holder's quorum, and is ignored. One in a round
// counts a grant from a node that has not answered it yet, and remembers
// a recheck, or being named next, for when the round fails. One that
// backs off (after nodes failed) looks again at once.
func (a *leaseActor) onWake(m *Wake) {
	if m.Cause == WakeRelease && m.Holder != "" && m.Node >= 0 {
		a.hear(m.Holder, m.Node)
		if m.Holder != a.lastHolder { // not another node's word of the last
			now := mono(time.Now())
			if a.lastRelease != 0 {
				a.releaseGap = time.Duration(now - a.lastRelease)
			}
			a.lastHolder, a.lastRelease = m.Holder, now
		}
	}
	switch a.phase {
	case waiting:
		switch {
		case a.grantable(m):
			a.clearAlarm()
			a.startGranted(m.Node) // named next, and granted the key
		case m.Cause == WakeRecheck, m.Next != "" && m.Next == a.digest():
			a.clearAlarm()
			a.startRound(m.Cause) // a recheck, or named next: go
		case a.waitingFor != "" && m.Holder != "" && m.Holder != a.waitingFor:
			// Another owner's release does not free the holder's quorum.
		case m.Next != "" && m.Node < 0:
			// What an announcement said before this head came: not
			// named by it, the head keeps its alarm (that may be long
			// past).
		case m.Next != "" && m.Standby != "" && m.Standby != a.digest():
			// Two others are named, the next and the one standing in
			// for it: this one waits to be named, in its turn, without
			// a round; should both be gone, it looks after
			// SilenceTimeouts node timeouts without an announcement.
			a.wakeAt, a.deferred = WakeRelease, true
			a.setAlarm(time.Now().Add(SilenceTimeouts * a.cfg.NodeTimeout))
		case m.Next != "":
			// Another waiter is named next, and this one stands in for
			// it: let it go first, and race only if no release comes
			// meanwhile (it may have gone). It gives it twice the time
			// between the last two releases (a hold and a hand-off,
			// lately), so that it does not look while the next one
			// holds, but at least a node timeout (the longest its round
			// takes) and at most SilenceTimeouts of them. When nobody
			// stands in (this one is not in that node's queue yet), the
			// next may be a waiter that left as it was named: race
			// sooner.
			d := min(max(a.cfg.NodeTimeout, 2*a.releaseGap), SilenceTimeouts*a.cfg.NodeTimeout)
			if m.Standby == "" {
				d = a.cfg.NodeTimeout / YieldDivisor
			}
			a.wakeAt, a.deferred = WakeRelease, true
			a.setAlarm(time.Now().Add(d))
		case a.wakeAt == WakeRelease && !a.deferred, a.wakeAt == WakeSplit:
			// The race is set.
		default:
			a.wakeAt, a.deferred = WakeRelease, false
			a.setAlarm(time.Now().Add(raceDelay(a.cfg.Line.Len())))
		}
	case backingOff:
		// After nodes failed (a round that timed out under load, say): a
		// release or the watchers' return is worth a look now rather
		// than at the end of the backoff. Each node announces a release
		// once, so this cannot spin.
		a.clearAlarm()
		a.startRound(m.Cause)
	case acquiring, fencing:
		switch {
		case a.phase == acquiring && a.grantable(m) && a.votes[m.Node].Outcome == 0:
			a.countGrant(m.Node) // another node's grant, as the round goes
		case m.Cause == WakeRecheck, m.Next != "" && m.Next == a.digest():
			// A recheck, or named next (granted or not) by a node that
			// may have refused the round first: should the round fail,
			// look again at once, rather than wait for releases that a
			// node which cannot announce will never tell.
			a.recheck = true
		}
	}
}

// queue has the rounds from now on carry Since: refused, they put the
// lease in the nodes' queues of waiters.
func (a *leaseActor) queue() {
	if a.since == "" && !a.cfg.Since.IsZero() {
		a.since = strconv.FormatInt(a.cfg.Since.UnixMicro(), 10)
	}
}

// digest is the lease's value as announcements name it, made once.
func (a *leaseActor) digest() string {
	if a.ownDigest == "" {
		a.ownDigest = node.Digest(a.cfg.Value)
	}
	return a.ownDigest
}

// heard is a holder whose release nodes announced, as a set of nodes (a
// node past the 64th counts as the 64th).
type heard struct {
	holder string
	nodes  uint64
}

func nodeBit(i int) uint64 { return 1 << min(i, 63) }

func (a *leaseActor) hear(holder string, node int) {
	for i := range a.heard {
		if a.heard[i].holder == holder {
			a.heard[i].nodes |= nodeBit(node)
			return
		}
	}
	a.heard = append(a.heard, heard{holder, nodeBit(node)})
}

// gone reports whether every node where the failed round found holder's
// key has announced its release since: the round only came too early.
// While one has not, the actor waits for it (or the key's expiry), so a
// release that is stuck on a node does not make it spin.
func (a *leaseActor) gone(holder string) bool {
	var seen uint64
	for i, v := range a.failedVotes {
		if v.Outcome == node.Taken && v.Holder == holder {
			seen |= nodeBit(i)
		}
	}
	for _, h := range a.heard {
		if h.holder == holder {
			return seen&^h.nodes == 0
		}
	}
	return false
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

// abort gives up acquiring because of cause (a context or the engine).
func (a *leaseActor) abort(cause error) {
	switch a.phase {
	case acquiring, fencing:
		a.clearAlarm()
		a.failedVotes = append(a.failedVotes[:0], a.votes...)
		a.cleanUp(true)
		a.giveUp(cause)
	case backingOff, waiting:
		a.clearAlarm()
		a.giveUp(cause)
	}
}

func (a *leaseActor) giveUp(cause error) {
	if cause == nil {
		cause = errRefused
	}
	if a.since != "" {
		a.send(a.leaveCmd, nil) // out of the queues it may be in
	}
	a.phase = failing
	a.cause = cause
	a.startLinger()
}

// tooSlow: a round that took elapsed leaves no validity beyond the end
// margin, so a lease it won would end at once.
func (a *leaseActor) tooSlow(elapsed time.Duration) bool {
	return validity(a.cfg.TTL, elapsed, a.cfg.DriftFactor) <= EndMargin(a.cfg.TTL)
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
	a.wrapUp(a.state.err)
}

func (a *leaseActor) onRelease(m *Release) {
	if !a.holding() {
		m.Reply <- ReleaseResult{Err: a.state.Err()}
		return
	}
	err := a.finish(ErrReleased) // before the release may grant the next holder the key
	if a.cfg.Line != nil {
		a.cfg.Line.HandOff(a) // releaseAll, queueing the next caller
	} else {
		a.releaseAll()
	}
	a.wrapUp(err)
	a.phase, a.release = releasing, m.Reply
}

// end ends the lease with err, unless its deadline timer was first, and
// wraps up.
func (a *leaseActor) end(err error) { a.wrapUp(a.finish(err)) }

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

// wrapUp follows the end of the lease: the terminal event, the closed event
// channel, answers to pending Extend calls.
func (a *leaseActor) wrapUp(err error) {
	a.phase = ended
	a.stopTimers()
	kind := terminalKind(err)
	a.emit(kind, err) // and closes the event channel
	if a.cfg.Owner != nil {
		a.cfg.Owner.Ended(time.Since(a.acquired), err)
	}
	if a.cfg.Line != nil {
		a.cfg.Line.Done(kind == Released)
	}
	for _, w := range a.waiters {
		w <- ExtendResult{Err: err}
	}
	a.waiters = nil
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
		a.setAlarm(time.Now().Add(lingerTimeouts*a.cfg.NodeTimeout + lingerSlack))
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

// explain is the error of a failed extension round, naming each node.
func (a *leaseActor) explain(cause error) error {
	return &ExtendError{Nodes: Outcomes(a.votes, a.cfg.Addrs), Cause: cause}
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
		a.cfg.Reply <- r
		a.cfg.Reply = nil // the caller has it: a held lease keeps no channel for it
		if r.Err != nil && a.cfg.Line != nil {
			a.cfg.Line.Done(false)
		}
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
		err := a.finish(lost(err))
		a.releaseAll()
		a.wrapUp(err)
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
	errRefused    = errors.New("redlease: a quorum of nodes refused")
	errQuarantine = errors.New("redlease: the quorum needs nodes that sit out a restart quarantine")
	// errQuarantinePastDeadline: waiting for them would outlast the caller.
	errQuarantinePastDeadline = errors.New("redlease: the quorum needs nodes whose restart quarantine ends after the context's deadline")
	errRoundTimeout           = errors.New("redlease: no quorum within the node timeout")
	errTooSlow                = errors.New("redlease: quorum reached after the validity ran out")
	errNoExtension            = errors.New("redlease: no extension before the validity deadline")
	errNotMine                = errors.New("redlease: a quorum of nodes holds another owner's key")
	errFenceRefused           = errors.New("redlease: the fencing token reached no quorum of the granting nodes")
)

// jitter returns d scaled by a random factor in [0.5, 1.5).
func jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int64N(int64(d)+1))
}
