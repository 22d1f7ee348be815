package lease

import (
	"time"

	"github.com/redlease/redlease/node"
)

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
// (node.Cleanup.Keep), since deleting it would take it back unknown to
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
	a.sendAt(cmd, to, a.now())
}

// sendAt is send, for a round that starts at now.
func (a *leaseActor) sendAt(cmd func(node.Request) node.Command, to []int, now time.Time) {
	c := a.newRound(cmd, now)
	if to == nil {
		a.sendAll(c)
		a.owed += len(a.cfg.Nodes)
		return
	}
	for _, i := range to {
		a.pool.system.Root.Send(a.cfg.Nodes[i], c)
	}
	a.owed += len(to)
}

// newRound numbers a new round, readies its votes, and makes its command,
// sent at now: the one place a round's request is made (send, and prepare
// for a Line to send). The caller counts the votes it is owed.
func (a *leaseActor) newRound(cmd func(node.Request) node.Command, now time.Time) node.Command {
	a.round++
	a.takeVotes()
	clear(a.votes)
	return cmd(a.request(a.round, now))
}

// request is the lease's node.Request for round (0: nobody waits for
// the answers), sent at now.
func (a *leaseActor) request(round uint64, now time.Time) node.Request {
	r := node.Request{Key: a.cfg.Key, Grants: a.cfg.Grants, Value: a.cfg.Value, Round: round, Sent: now}
	if round != 0 {
		r.ReplyTo, r.Inbox = a.self, a.mailbox
	}
	return r
}

// sendAll sends c to every node.
func (a *leaseActor) sendAll(c node.Command) {
	for _, pid := range a.cfg.Nodes {
		a.pool.system.Root.Send(pid, c)
	}
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
	return &node.Acquire{Request: r, TTL: a.cfg.TTL, FenceKey: a.cfg.FenceKey, Since: a.since, Contended: a.contended()}
}

// contended: the round expects a refusal: it is not the lease's first, or
// the lease waited for a release before it, or its resource was contended
// lately.
func (a *leaseActor) contended() bool {
	return a.attempts > 1 || a.cfg.WaitFirst || a.cfg.QueueAtOnce || a.cfg.Queued
}

func (a *leaseActor) extendCmd(r node.Request) node.Command {
	return &node.Extend{Request: r, TTL: a.cfg.TTL}
}

// releaseCmd is a failed round's cleanup (cleanUp). A lease that queues
// puts itself back in the queue of waiters (at its own since): a node
// that granted it, or named it next, took it out, and the lease goes on
// waiting; without its place there, that node would name a later waiter
// next.
func (a *leaseActor) releaseCmd(r node.Request) node.Command {
	// Keep grants where the round was refused (past the 64th node a bit
	// is shared: there, delete unless all refused).
	return &node.Cleanup{Request: r, TTL: a.cfg.TTL, Since: a.since, Keep: ^a.noGrant}
}

func (a *leaseActor) announcedReleaseCmd(r node.Request) node.Command {
	c := a.releaseCmd(r).(*node.Cleanup)
	c.Announce = true
	return c
}

func (a *leaseActor) finalReleaseCmd(r node.Request) node.Command {
	return &node.Release{Request: r, TTL: a.cfg.TTL, Queued: a.since != ""}
}

// handOffCmd is finalReleaseCmd for a Line to queue a successor in
// (Line.HandOff; without one, it is a Release).
func (a *leaseActor) handOffCmd(r node.Request) node.Command {
	return &node.HandOff{Request: r, TTL: a.cfg.TTL, Queued: a.since != ""}
}

func (a *leaseActor) queueCmd(r node.Request) node.Command {
	return &node.Queue{Request: r, Since: a.since, TTL: a.cfg.TTL}
}

// leaveCmd takes the lease out of the queues of waiters. Where the key is
// free, it announces that it leaves, since a release may have named it
// next: the waiter after it goes instead.
func (a *leaseActor) leaveCmd(r node.Request) node.Command {
	return &node.Leave{Request: r, TTL: a.cfg.TTL}
}

// leaveQueues takes a lease that won while it queued out of the queues of
// waiters on the nodes its win does not count (they refused it, or have
// not answered): there it would stay, and a later release would name it,
// and grant it the key, after the lease ended, a holder that is no more
// keeping a free node for a TTL. It only leaves (KeepGrant): a key
// of the lease there (a grant) stays until the lease's release, as its
// other keys do. Nobody waits for the answers.
func (a *leaseActor) leaveQueues() {
	var c *node.Leave
	for i, v := range a.votes {
		if v.Outcome == node.Granted {
			continue
		}
		if c == nil {
			c = &node.Leave{Request: a.request(0, a.now()), TTL: a.cfg.TTL, KeepGrant: true}
		}
		a.pool.system.Root.Send(a.cfg.Nodes[i], c)
	}
}
