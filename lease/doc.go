// Package lease runs one actor per lease: it asks every node actor at once,
// counts votes, decides at quorum, computes validity on the monotonic clock,
// cleans up after failed rounds, retries with randomized backoff, and ends
// the lease (closing Done) when it is released, its validity deadline
// passes, or the engine closes.
//
// # Lifecycle of a lease actor
//
// A lease moves through these phases, and only along these moves (each
// with what makes it); the drawing is the edge table of lease/phase.go,
// rendered, and every change goes through one function, to, which panics
// on a move the table lacks:
//
//	idle -- begin -->
//	    acquiring
//	idle -- begin, WaitFirst: to hear the release of the lease before it in its engine's line -->
//	    waiting
//	idle -- begin, Resumed: a check round found a quorum holding the lease's value -->
//	    held
//	acquiring -- a quorum in time, with a FenceKey -->
//	    fencing
//	acquiring, fencing -- a quorum in time (fencing: of the granting nodes) -->
//	    held
//	acquiring -- refused by an owner whose release was heard since, or with a recheck owed: at once -->
//	    acquiring
//	acquiring -- refused, with a Line: one other owner holds a quorum, or a split vote -->
//	    waiting
//	acquiring, fencing -- refused, timeout, won too late; attempts left -->
//	    backingOff
//	acquiring, fencing, backingOff, waiting -- out of attempts or backoff, a quarantine past the deadline, Cancel, Close -->
//	    failing
//	backingOff -- the alarm, a Wake -->
//	    acquiring
//	waiting -- a Wake (granted, named next, a recheck), the alarm (see waitReason) -->
//	    acquiring
//	held -- the alarm (auto-extension), Extend -->
//	    extending
//	extending -- a quorum in time (Extended); refused, timeout, too slow (ExtendFailed) -->
//	    held
//	held, extending -- Release -->
//	    releasing
//	held, extending -- the deadline, Close, a quorum without the lease's key (Lost), a crash -->
//	    ended
//	releasing -- a quorum deleted the key, or so many lack it that none can -->
//	    ended
//	failing, releasing, ended -- the owed votes are in, or the linger alarm: done -->
//	    idle
//	acquiring, fencing, backingOff, waiting, held, extending -- the actor stops (a crash, the pool closing) -->
//	    idle
//
// Each phase has one handler, which names every message it acts on:
//
//   - acquiring, fencing (inRound, acquire.go): a round sends Acquire to
//     all N nodes and counts votes for that round only (votes carry the
//     round number; older ones are dropped). N/2+1 grants with validity
//     beyond the end margin make the lease held (after fencing, with a
//     FenceKey: see Fencing tokens); a quorum that became impossible, or
//     the node timeout, fails the round, which sends Release to all N
//     nodes at once.
//   - waiting (wait.go: what can happen while a lease waits, in one file):
//     with a Line, a round that found one other owner on a quorum waits
//     for that owner's release, announced by the nodes (a Wake), or for
//     its keys to expire, as the refusing nodes said; a split vote draws
//     a random delay. What it waits for, and so what its alarm means, is
//     its waitReason.
//   - backingOff (acquire.go): otherwise it waits a randomized backoff and
//     tries again, until the attempt budget, the backoff or the caller's
//     context says stop: failing. The Result goes out once the cleanup
//     votes are in, except when the caller's context ended (Cancel): then
//     at once, the cleanup being already with the node actors.
//   - held, extending (extend.go): the deadline timer ends the lease
//     EndMargin before its validity deadline (so Done closes before Until
//     though the timer fires late under load), on its own goroutine so a
//     busy mailbox cannot delay it: ErrLeaseLost if it was meant to be
//     extended (AutoExtend), ErrExpired otherwise. With AutoExtend,
//     extension rounds run at a third of the TTL (ExtendDivisor) and,
//     after a failure, again about TTL/RetryDivisor later; a quorum
//     answering "not mine" loses the lease at once; a round won heals the
//     nodes that hold no key (see Healing). No extension round,
//     automatic or by Extend, starts later than MaxHold after the lease
//     was acquired (Extend then fails with ErrMaxHold); the lease expires
//     at its deadline. An Extend with a TTL (ttl.go) makes it the lease's
//     from its round on, and moves MaxHold by as much the other way, so
//     that no round ends past MaxHold plus the first TTL; an Extend for
//     another TTL than the round in flight's waits for that round to be
//     decided. Between its rounds a held lease parks: its actor
//     goes back to the Pool, and the lease keeps only its body (its state
//     and its timer). The next message for it (its alarm, its deadline, a
//     call) binds it an idle actor again, so a lease is still run by one
//     actor at a time, not always the same.
//   - releasing, ended, failing (ending, end.go): after the end (or the
//     final failure) the actor waits for the votes it is still owed,
//     bounded by the node timeout, then is done with the lease (idle): its
//     Pool takes it back to run a later lease (what arrives late about
//     this one, votes of its rounds, timers, calls on its State, is told
//     apart and dropped or answered with its Err), or it stops. Nothing it
//     sent is left unanswered, so nothing is left running.
//
// Time comes from Shared.Clock (the system's unless a test sets one).
//
// # Locks
//
// The actor's state needs none: one message at a time. What other
// goroutines touch has a mutex of its own, taken in this order only:
// body.mu (binding a parked lease, the timer's fields), then Pool.mu or
// Pool.spawnMu (binding takes an idle actor, or spawns one), then an
// actor's mailbox lock (posting to it). State.mu (the holder's calls, the
// deadline timer) is taken alone: the AfterEnd functions run once it is
// let go, and the timer ends a lease before it takes body.mu.
//
// # Fencing tokens
//
// With Config.FenceKey (engine.WithFencing) a lease carries a token that
// strictly increases across successive holders of a resource. Every node
// keeps a fence counter per resource, F, next to the lock key K (same
// hash tag); F expires once idle for node.FenceIdle (an hour: see below).
//
//  1. Acquire: a node that grants K to the lease answers its counter,
//     c = max(F, the node's clock in microseconds).
//  2. With a quorum of grants, the token is T = 1 + max(c over the
//     granting nodes). Counters of nodes that refused do not count: they say
//     nothing about this lease.
//  3. Write-back: each granting node raises F to T if K still holds this
//     lease's value. The lease is held, with token T, only once a quorum
//     of nodes acknowledged, and only acknowledgements of granting nodes
//     count (a node that did not grant may already serve a later holder).
//     The validity still runs from the start of the acquire round, so the
//     write-back happens while every granted key is alive.
//
// Why a later holder B gets a larger token than A, assuming Redlock's
// timing (bounded drift, A stops by its Until): A's write-back quorum and
// B's grant quorum share a node n. On n, A's write-back ran while K held
// A's value; B's grant needs K free, and B is later than A, so K lost A's
// value (release or expiry, both after A's write-back, since A's validity
// ends before its keys expire) before B's grant. Redis runs scripts one at
// a time, so B's grant read F ≥ T_A on n, and T_B ≥ T_A + 1.
//
// The traps this avoids: taking the max of the counters without the
// write-back is not monotonic (the quorums meet in one node, but the max
// may come from another); counting a non-granting node's acknowledgement
// could count a node whose F a later holder already read.
//
// A node restarted without persistence forgets F. Restart quarantine keeps
// it from granting until RestartQuarantine (at least the longest TTL) has
// passed since the restart, and its counter then starts from its clock in
// microseconds. Tokens follow node clocks plus one per acquisition, and
// acquisitions of one resource are a round trip (far more than a
// microsecond) apart, so a token is at most about the largest node clock
// at its issue. The restarted node's clock has moved on by the quarantine
// since; the tokens stay monotonic as long as the nodes' clocks differ by
// less than the quarantine and never step back by more than it. With the
// quarantine turned off, the floor alone still covers restarts that take
// longer than the clock difference between nodes.
//
// An idle counter expires, so that a service that fences per job or per
// invoice does not grow its nodes without bound: every fenced grant and
// every write-back gives F node.FenceIdle (D) more to live. Tokens still
// grow once F is gone, by the same floor. Take A's write-back quorum and
// B's grant quorum, sharing node n, as above. If F expired on n before B's
// grant, n's clock has read at least w + D since A's write-back there,
// which n's clock read as w; B's floor there is n's clock at B's grant.
// A's token is at most about the largest clock reading of any node at A's
// acquire, which came before w. So T_B > T_A as long as no node's clock
// ever reads less than a reading any node's clock gave earlier, minus D:
// the nodes' clocks stay within D of each other, and none steps back by
// more than what is left of D. That is the one clock assumption fencing
// makes (restarts need it too, with the quarantine for D), and D = an
// hour bounds how long a counter stays idle before it may go: an hour of
// clock difference or step back is far beyond NTP's, and a resource
// fenced again within the hour keeps its counter.
//
// # Healing
//
// A lease won on a bare quorum (3 of 5 nodes, one having lost its key to
// a restart, a flush or a timeout) would stay on it its whole term, and
// one more node failure would end it. So an extension round also heals:
// the extend script answers Absent where no key is, apart from Taken
// (another owner's key), and once the round is won the lease sends
// node.Heal to the nodes that answered Absent (at once, or as their votes
// come while it is held): set the key only if absent, for the TTL less the
// time since the round started on the lease's clock (nothing if that is
// under a millisecond, or the lease ended). Its node actor sends a heal
// only where it would send an acquire (not on a node that sits out a
// quarantine or may evict lock keys), and the script sets it only where
// the epoch marker holds. A heal counts for nothing in its round, decided
// already; the next round extends the key like any other.
//
// Why it is safe: the round was won by a quorum Q of nodes that still held
// this lease's own key and extended it. While those keys live (at least
// the TTL from the round's start), any other owner needs a quorum, which
// meets Q in a node that refuses it, so a key set on a node outside Q can
// never complete another owner's quorum: it only makes the lease more
// robust. A healed key lives the TTL less what had passed when it was
// sent, so it expires with the keys on Q, later only by as much as its
// own trip to its node took longer than the extensions'.
//
// Why only after the quorum: a script that sets an absent key as it
// extends (go-redsync's WithSetNXOnExtend re-creates a vanished key in its
// extend script) decides before anyone knows whether the lease still holds
// a quorum. Had the lease's keys lapsed on every node (nodes paused past
// the TTL, a clock step) while another owner took and released the
// resource, such a round would make the lease again from nothing and call
// it extended: two holders across the gap, and the holder never told.
// Here that round finds the key Absent on a quorum, and the lease is lost
// (ErrLeaseLost): the holder learns it. The safety checker's heal fault
// (package safety) is that schedule.
//
// It is the engine's machinery: its exported names serve the other
// packages of this module and carry no compatibility promise. Users
// import package engine.
//
// # Glossary
//
// The words of this package, the engine's resource actor (engine/resource.go) and the
// batch script (node/batch.lua), each in the one sense it has here; where
// the code uses a word in a second sense, that sense is given too.
//
//   - round: one command sent to every node (or to the nodes named) under
//     one round number, which each vote echoes; votes of any other round
//     are dropped. Acquire, fence and extend rounds are decided at quorum
//     (startVote); a release or a cleanup takes a round number only so
//     that its votes are told apart.
//   - check: a round of node.Check (Pool.Check), which reads on every
//     node whether a lease's key holds its value, and for how long, and
//     changes nothing. Read takes what a quorum still guarantees, by the
//     acquire's validity rule; a lease resumed on its word
//     (Config.Resumed) is held at once, without an acquire round.
//   - vote: a node's answer to one command (node.Vote): Granted (the node
//     did what was asked), Taken (another owner's key), Absent (for an
//     extend, a release or a check: no key), Timeout or Failed. A
//     refused acquire's vote names the holder (node.Digest) and when its
//     key expires; a quarantined node's, when it is back.
//   - grant: (1) a node's Granted vote on an acquire: the key is set to
//     the lease's value (or held it already); Quorum grants win a round,
//     and a fence round's grants come from the granting nodes only.
//     (2) a release's grant: a release that names a waiter next also sets
//     the key, on that node, to the waiter's value with its TTL, as the
//     waiter's acquire would (Wake.Granted). The waiter counts it as that
//     node's vote when it may (grantable), with its validity counted from
//     Config.Since.
//   - line: an engine's callers of Acquire for one resource, first come,
//     first served; each call's place in it is a turn. The Line interface
//     is a lease's view of its turn.
//   - head: the first turn of a line, the only one whose lease runs
//     rounds on the nodes; the next turn becomes the head when the head's
//     lease ends or its acquire fails.
//   - queue: on each node, the resource's waiters (<lock key>:queue),
//     ordered by Config.Since, then by their Digests. It decides whom
//     releases name; it never refuses anyone.
//   - announcement: what a node publishes on <lock key>:released
//     (node.ReleasedSuffix) while the resource has a queue, when a release
//     deletes the key, or when a waiter leaves the queue while the key is
//     free: the Digests of the holder (none for a leave), of the next
//     waiter and of the standby, then node.GrantedSuffix after a grant.
//     Each node announces each release; the engine passes it to the
//     head's actor as a Wake.
//   - named, next, standby: an announcement names two waiters of the
//     node's queue: next, the first, which the release takes out of the
//     queue (and may grant the key), and standby, the one after it, who
//     stands in should next not come. A waiter named neither, while two
//     others are, waits to be named. Next also means the caller after the
//     head in an engine's line, who is not always the one the nodes name
//     next.
//   - successor: the waiter a release puts in the queue before it names
//     anyone (node.Release.Successor), in the same script call: the next
//     caller in the releasing engine's line, or a kept place. A cleanup
//     names its own lease as successor, to take back its place.
//   - hand-off: a head's final release with its successor
//     (Line.HandOff: the resource actor sends it), which queues, names and
//     may grant the next caller in one step. The benchmark calls
//     hand-off the time from one holder's Release to the next holder's
//     Acquire returning.
//   - kept place: a successor queued for the engine's next caller before
//     that caller came, when nobody is next in a watched line: an owner
//     value of its own, queued as of the release, named but never granted
//     (node.Release.SuccessorUngranted). A caller of the same TTL who
//     comes within NodeTimeout/YieldDivisor takes it; otherwise the
//     engine takes it out of the queues.
//   - cleanup: the release a failed acquire round sends to every node,
//     since a grant may still be on its way from any of them (cleanUp).
//     It keeps a key of the lease on a node that answered the round Taken
//     (node.Release.Keep: there it can only be a release's grant), puts a
//     queued lease back in its place, and is announced only when the
//     round did not fail by refusals alone.
//   - charged round: an acquire round that counts against
//     Config.Attempts: one that no Wake started (the first, a retry after
//     a backoff) or that WakeFallback started. Rounds woken by a release,
//     an expiry, a recheck or a split are not charged; Result.Attempts
//     counts them all.
//   - heal: after an extension round it won, the lease sets its key, if
//     absent, on the nodes that answered Absent (see Healing).
//   - parked: a held lease between rounds: its actor went back to the
//     Pool, and the lease keeps only its body (its State and its timer).
//     Its next message (its alarm, its deadline, a call, a Wake) binds it
//     an idle actor.
//   - linger: a lease actor that ended its lease, or gave up acquiring,
//     waits for the votes it is still owed, at most lingerTimeouts node
//     timeouts plus lingerSlack, before it is done (startLinger). In the
//     engine, a watched line that empties lingers lineLinger (a second)
//     before it is forgotten and its channel unwatched.
//   - quarantine: the time a node that may have lost lock keys (a
//     restart, a flush, a failover, evictions) refuses acquires and
//     grants nothing: RestartQuarantine (node.Config.Quarantine, by
//     default the longest TTL) from when this engine saw it so, on its
//     monotonic clock. Its votes are Failed with node.ErrQuarantined and
//     the end of the quarantine; a round that only quarantined nodes kept
//     from a quorum waits for them (quarantineEnd).
package lease
