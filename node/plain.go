package node

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/redlease/redlease/actors"
	"github.com/redlease/redlease/internal/redisinfo"
)

// Plain acquires. An acquire that neither queues nor fences, nor expects a
// refusal (Acquire.Contended: a TryAcquire's round, and an Acquire's first
// on a resource not contended lately) goes to the node as a plain SET NX PX in a MULTI/EXEC block that
// also reads what the batch script's epochHolds reads: the epoch marker
// (GET), the replication id (INFO replication) and, on a process that may
// run DEBUG, its losses (INFO commandstats). A SET costs the node a
// fraction of a command in the script (measured on one node: 4.4 against
// 5.5 µs of server CPU per acquire+release).
//
// Why it is as safe as the script. EXEC runs the block at once, as a
// script runs: nothing runs between the reads and the SETs, so they see
// one dataset. A SET's vote counts only when the reads show the dataset
// the engine judged safe (epochHolds, below, the script's rule written in
// Go; TestPlainAgreesWithScript checks them against each other on every
// kind of dataset): exactly when the script would have granted. When they
// do not, the vote is the script's -1 (the node sits out a quarantine),
// whatever the SET did; a key it set there is this lease's own, which
// blocks others and can only make the lease more robust, and is deleted
// at once, silently, so as not to outlive a round that failed. A SET that
// found the key is followed by the script's check (read-only), which
// answers who holds it and for how long: a refusal costs one round trip
// more, an uncontended acquire none. The refusal stands even when the key
// went meanwhile (an acquire that took it then would outlive the round
// that counted it out), and the owner's own key (a retry after a lost
// reply, which a first round never is) is refused too: the SET did not
// renew its TTL.
//
// An acquire goes plain only when no command before it in its batch has
// its key (entry.keyBit): commands on one key still take effect in the order
// they came. The plain block goes first, then the script call. On a Redis
// Cluster's shard there is a block per slot (a transaction, as a script
// call, may only touch one slot's keys), each reading its slot's marker,
// as the slot's script call would: the argument above holds slot by slot.
// A block refused for a slot that moved (MOVED, ASK, TRYAGAIN, at queueing
// or at EXEC) counts as no vote, as a refused script call does. A node
// that refuses MULTI (an ACL without @transaction) runs the block's SETs
// outside a transaction: none counts, each goes again through the script,
// and so does every acquire after (TestPlainFallsBackWithoutTransactions).
// A probe tries MULTI and EXEC too (Info.NoTransactions): an ACL may deny
// EXEC alone, which Redis answers with EXECABORT, ending the transaction.

// plain reports whether e may go as a plain SET.
func (e *entry) plain() bool {
	return e.op == opAcquire && e.since == "" && !e.scripted && !e.asked && !e.silent
}

// plainFirst moves the commands of batch that go plain to its front,
// keeping the order of the others, and returns how many; rest is scratch
// space, returned for reuse.
func plainFirst(batch, rest []entry) (int, []entry) {
	var before keySet // keys of the commands before that stay in the script
	n := 0
	rest = rest[:0]
	for i := range batch {
		e := batch[i]
		if e.plain() && !before.has(e.keyBit) {
			batch[n] = e
			n++
			continue
		}
		before.add(e.keyBit)
		rest = append(rest, e)
	}
	copy(batch[n:], rest)
	clear(rest)
	return n, rest
}

// plainChecks is how many reads open a plain block for epoch.
func plainChecks(epoch string) int {
	switch {
	case epoch == "":
		return 0
	case strings.HasSuffix(epoch, debugSuffix):
		return 3
	}
	return 2
}

// debugSuffix ends an epoch that requires the losses to match too.
const debugSuffix = " debug"

// appendPlain appends batch's plain block: MULTI, the reads epoch needs,
// a SET NX PX per acquire, EXEC.
func appendPlain(cmds rueidis.Commands, c rueidis.Client, batch []entry, epochKey, epoch string, ttl *millis) rueidis.Commands {
	cmds = append(cmds, c.B().Multi().Build())
	switch plainChecks(epoch) {
	case 3:
		cmds = append(cmds, c.B().Get().Key(epochKey).Build(), c.B().Info().Section("replication").Build(),
			c.B().Info().Section("commandstats").Build())
	case 2:
		cmds = append(cmds, c.B().Get().Key(epochKey).Build(), c.B().Info().Section("replication").Build())
	}
	for i := range batch {
		cmds = append(cmds, batch[i].plainSet(c, ttl))
	}
	return append(cmds, c.B().Exec().Build())
}

// epochHolds is batch.lua's epochHolds on what a plain block read: the
// marker (ok: it exists), INFO replication and INFO commandstats.
func epochHolds(epoch, marker string, ok bool, replication, commandstats string) bool {
	if epoch == "" {
		return true
	}
	lineage, debug := strings.CutSuffix(epoch, debugSuffix)
	parts := strings.Fields(lineage) // replid, run id, losses, db: Info.Lineage
	if !ok || marker != lineage || len(parts) != 4 {
		return false
	}
	if id, _ := redisinfo.Field(replication, "master_replid"); id != parts[0] {
		return false
	}
	if role, _ := redisinfo.Field(replication, "role"); role != "master" {
		return false
	}
	if debug {
		n, err := strconv.ParseInt(parts[2], 10, 64)
		return err == nil && losses(commandstats) == n
	}
	return true
}

// answerPlain answers the acquires of a plain block from its replies
// (MULTI's first, EXEC's last).
func (a *nodeActor) answerPlain(batch []entry, results []rueidis.RedisResult, epoch string, now time.Time, done *sent, out *actors.Batch) {
	exec := results[len(results)-1]
	arr, err := exec.ToArray()
	if err != nil {
		if _, answered := rueidis.IsRedisErr(err); !answered {
			a.unanswered(batch, now, err, done, out)
			return
		}
		// EXECABORT names a queued command's error; that one is clearer.
		for _, r := range results[:len(results)-1] {
			if re := r.Error(); re != nil {
				err = re
				break
			}
		}
		if re, _ := rueidis.IsRedisErr(err); re != nil && a.cfg.Moved != nil && movedSlot(re) {
			a.cfg.Moved() // a cluster's slot that moved: see the script's calls
		}
		if noPerm(err) {
			a.noPlain.Store(true) // an ACL without MULTI: the script it is
			for _, e := range batch {
				e.scripted = true
				done.retry = append(done.retry, e)
			}
			return
		}
		for i := range batch {
			a.reply(&batch[i], Failed, now, err, out)
		}
		return
	}
	checks := plainChecks(epoch)
	if len(arr) != checks+len(batch) {
		err := fmt.Errorf("redlease: EXEC answered %d replies for %d commands", len(arr), checks+len(batch))
		for i := range batch {
			a.reply(&batch[i], Failed, now, err, out)
		}
		return
	}
	holds := true
	if checks > 0 {
		marker, merr := arr[0].ToString()
		repl, _ := arr[1].ToString()
		stats := ""
		if checks == 3 {
			stats, _ = arr[2].ToString()
		}
		holds = epochHolds(epoch, marker, merr == nil, repl, stats)
	}
	for i := range batch {
		e := &batch[i]
		r := &arr[checks+i]
		set := r.Error() == nil
		switch {
		case r.Error() != nil && !rueidis.IsRedisNil(r.Error()):
			a.reply(e, Failed, now, r.Error(), out)
		case !holds:
			a.lost(e, done)
			a.replyQuarantined(e, now, now.Add(a.quarantineFor()), ErrQuarantined, out)
			if set { // not a vote: the key goes
				c := entry{op: opRelease, req: &Request{Key: e.req.Key, Grants: e.req.Grants, Value: e.req.Value},
					ttl: e.ttl, queued: now, silent: true, keyBit: e.keyBit}
				done.retry = append(done.retry, c)
			}
		case set:
			a.replyCounter(e, now, 0, out)
		default: // the key was there: the script tells whose
			c := *e
			c.asked = true
			done.retry = append(done.retry, c)
		}
	}
}
