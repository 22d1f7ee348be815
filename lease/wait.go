package lease

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/redlease/redlease/node"
)

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
	// HandOff sends c, the held lease's final release, to every node,
	// with the caller after this one in the line for it to put in the
	// nodes' queues of waiters (node.HandOff.Successor: since is when it
	// began to wait, value its owner value, ttl its lease's TTL, which a
	// release that grants it the key sets), or a place kept for the next
	// caller. The round of c is counted already. That caller cannot leave
	// the line meanwhile, so that if it leaves, its leave reaches the nodes
	// after the release that queued it. The lease needs its place no more,
	// as after Done(released): the lease ended with ErrReleased, not by its
	// deadline first.
	HandOff(c *node.HandOff, released bool)
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

// String names the cause; "none" for the zero WakeCause, which every
// event but Woken carries.
func (c WakeCause) String() string {
	switch {
	case c == 0:
		return "none"
	case int(c) < len(wakeNames):
		return wakeNames[c]
	}
	return fmt.Sprintf("WakeCause(%d)", uint8(c))
}

// GrantFreshDivisor: a release's grant counts as a node's vote only for a
// lease that began to wait (Config.Since, from which its validity then
// counts) less than TTL/GrantFreshDivisor ago; an older waiter runs a
// round instead, which that node answers as to the key's owner, with a
// fresh validity. A third of the TTL: what is left is worth holding.
const GrantFreshDivisor = 3

// grantable reports whether m is a grant to this lease that may count as
// node m.Node's vote (Wake.Granted): the lease is not fenced (a grant
// brings no token), it sent that node no deletion since it began (see
// cleanUp), and the grant is fresh (GrantFreshDivisor).
func (a *leaseActor) grantable(m *Wake) bool {
	return m.Granted && m.Node >= 0 && m.Next == a.digest() && a.cfg.FenceKey == "" &&
		a.noGrant&nodeBit(m.Node) == 0 && !a.cfg.Since.IsZero() &&
		a.elapsed(a.cfg.Since) < a.cfg.TTL/GrantFreshDivisor
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
		a.startVote(acquiring, a.acquireCmd, to, a.now())
		a.tally.refused-- // node i, not asked: its grant is its vote
	} else {
		// One node: a round with nothing to send, its timer unarmed (the
		// grant decides it now).
		a.to(acquiring)
		a.tally = tally{n: n}
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

// wait waits for holder, who holds a quorum, to release (a *Wake) or for
// its keys to expire at free (zero: unknown). It looks again at once when
// a recheck came while the round was out, or when every node that showed
// holder's key has announced its release since (the round came too
// early). When no Wake can come, or nobody knows when the keys expire,
// the backoff bounds the wait, and that wake-up is charged.
func (a *leaseActor) wait(holder string, free time.Time) {
	switch {
	case a.lookAgain:
		a.startRound(WakeRecheck)
		return
	case a.gone(holder):
		a.startRound(WakeRelease)
		return
	}
	a.waitingFor = holder
	wakes := a.cfg.Line.Wait(holder, free)
	at, why := free, waitExpiry
	if !wakes || at.IsZero() {
		d := backoff.Stop
		if a.charged < a.cfg.Attempts {
			d = a.nextBackOff()
		}
		now := a.now()
		switch {
		case d == backoff.Stop && at.IsZero():
			a.giveUp(nil)
			return
		case d != backoff.Stop && (at.IsZero() || now.Add(d).Before(at)):
			at, why = now.Add(d), waitFallback
		}
	}
	a.to(waiting)
	a.waitFor(why, at)
}

// waitFor sets what the waiting lease waits for, and its alarm at at.
func (a *leaseActor) waitFor(r waitReason, at time.Time) {
	a.reason = r
	a.setAlarm(at)
}

// waiting handles everything that can happen while a lease waits: the
// alarm starts a round (for the waitReason); a Wake may start one, or
// change what the lease waits for; the caller may give up. A Wake that
// grants the lease the key starts a round with that grant as a vote; one
// that is a recheck, or names this lease next, starts a round at once.
// Another owner's release than the holder's it waits on does not free
// that holder's quorum, and is ignored. When a release names another
// waiter and this one to stand in for it, it lets that one go first;
// when it names two others, it waits on to be named; when it names
// nobody, it races after raceDelay.
func (a *leaseActor) waiting(msg any) {
	switch m := msg.(type) {
	case *wake:
		a.startRound(a.reason.cause())
	case *Wake:
		a.wokenWaiting(m)
	default:
		a.quitBetweenRounds(msg) // Cancel, Close
	}
}

func (a *leaseActor) wokenWaiting(m *Wake) {
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
		// What an announcement said before this head came: not named by
		// it, the head keeps its alarm (that may be long past).
	case m.Next != "" && m.Standby != "" && m.Standby != a.digest():
		// Two others are named, the next and the one standing in for it:
		// this one waits to be named, in its turn, without a round;
		// should both be gone, it looks after SilenceTimeouts node
		// timeouts without an announcement.
		a.waitFor(waitTurn, a.now().Add(SilenceTimeouts*a.cfg.NodeTimeout))
	case m.Next != "":
		// Another waiter is named next, and this one stands in for it:
		// let it go first, and race only if no release comes meanwhile
		// (it may have gone). It gives it twice the time between the
		// last two releases (a hold and a hand-off, lately), so that it
		// does not look while the next one holds, but at least a node
		// timeout (the longest its round takes) and at most
		// SilenceTimeouts of them. When nobody stands in (this one is
		// not in that node's queue yet), the next may be a waiter that
		// left as it was named: race sooner.
		d := min(max(a.cfg.NodeTimeout, 2*a.releaseGap), SilenceTimeouts*a.cfg.NodeTimeout)
		if m.Standby == "" {
			d = a.cfg.NodeTimeout / YieldDivisor
		}
		a.waitFor(waitTurn, a.now().Add(d))
	case a.reason == waitRace, a.reason == waitSplit:
		// The race is set.
	default:
		a.waitFor(waitRace, a.now().Add(raceDelay(a.cfg.Line.Len())))
	}
}

// noteRelease notes which node announced whose release (a Wake), in every
// phase: gone reads it, and the time between releases paces waitTurn.
func (a *leaseActor) noteRelease(m *Wake) {
	if m.Cause != WakeRelease || m.Holder == "" || m.Node < 0 {
		return
	}
	a.hear(m.Holder, m.Node)
	if m.Holder != a.lastHolder { // not another node's word of the last
		now := mono(a.now())
		if a.lastRelease != 0 {
			a.releaseGap = time.Duration(now - a.lastRelease)
		}
		a.lastHolder, a.lastRelease = m.Holder, now
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
