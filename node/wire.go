package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"time"

	"github.com/redis/rueidis"

	"github.com/redlease/redlease/actors"
)

// The wire: the sender goroutines put the actor's jobs on the node's
// connection (run, send) and answer every command of a batch with its
// Vote (answerReply, reply, answer).

// wire is a sender goroutine's own, reused from batch to batch.
type wire struct {
	ttl    millis       // TTLs as the scripts take them
	script scriptArgs   // the batch script call it builds
	out    actors.Batch // the votes of the batch it answers
	ctx    *deadline    // the context of its batches; nil after one fired
	rest   []entry      // plainFirst's scratch space
	calls  []call       // the batch's script calls
	blocks []call       // its plain blocks (plain.go): one per slot on a cluster
	// markers: the marker keys of a cluster shard's slots, by slot
	// (markerKey), at most one per slot the shard ever served.
	markers map[uint16]string
}

// sender is one of the node's long-lived goroutines, one per batch that
// may be on the wire: each runs the actor's mailbox when it comes, and
// puts the jobs the actor makes on the wire. (A goroutine per batch would
// grow a fresh stack through rueidis every time.) While every job it may
// have is on the wire, what comes for the actor waits in its mailbox, as
// it would wait in its queue: the next batch takes it all once a job is
// back. A command reaches the wire one goroutine hand-off after it was
// sent, not two (a dispatcher worker, then a sender).
func (a *nodeActor) sender() {
	defer a.senders.Done()
	var w wire
	for {
		select {
		case j, ok := <-a.work:
			if !ok {
				return
			}
			if j.probe {
				a.probe(j)
			} else {
				a.run(&w, j)
			}
		case run := <-a.runs:
			run()
		}
	}
}

// senderDispatcher runs the node actor's mailbox on its sender goroutines.
type senderDispatcher struct{ a *nodeActor }

// Schedule hands the mailbox's run to a sender goroutine. The mailbox
// schedules one run at a time, so the channel has room; after the senders
// returned (Stop), a late run gets a goroutine of its own.
func (d senderDispatcher) Schedule(run func()) {
	select {
	case d.a.runs <- run:
	default:
		go run()
	}
}

// Throughput is how many messages a mailbox run handles before yielding.
func (senderDispatcher) Throughput() int { return 300 }

// run sends one batch, answers every entry of it and reports back with
// *sent.
func (a *nodeActor) run(w *wire, j job) {
	done := &sent{slot: j.slot, sentAt: j.sentAt, size: len(j.batch), whole: j.whole, marking: j.marking}
	client, err := a.conn.get()
	if err == nil {
		err = a.send(w, client, j, done)
	}
	if err != nil && j.record > 0 {
		done.recordFailed = true
	}
	switch {
	case errors.Is(err, errUnchecked):
		done.unchecked = true
		done.batch = j.batch
	case done.unchecked: // NOSCRIPT: done.batch waits for a probe
	case err != nil:
		a.unanswered(j.batch, time.Now(), err, done, &w.out)
		fallthrough
	default:
		clear(j.batch)
		done.batch = j.batch[:0]
	}
	w.out.Flush()
	a.system.Root.Send(a.self, done)
}

// send puts one batch on the wire. It fails with errUnchecked, having sent
// nothing, when rueidis would have had to redial.
func (a *nodeActor) send(w *wire, client rueidis.Client, j job, done *sent) error {
	ctx := w.ctx.arm(j.deadline)
	w.ctx = ctx
	defer func() {
		if !ctx.disarm() {
			w.ctx = nil // it fired: the next batch needs a new one
		}
	}()
	plain := 0
	if !a.noPlain.Load() {
		plain, w.rest = plainFirst(j.batch, w.rest)
	}
	batch := j.batch[plain:] // the script's
	w.blocks = a.calls(j.batch[:plain], 0, w.blocks[:0])
	w.calls = a.calls(batch, maxScriptOps, w.calls[:0])
	// A mark, the script calls, and each block's acquires with its five
	// more (MULTI, at most three reads, EXEC).
	cmds := make(rueidis.Commands, 0, 1+len(w.calls)+plain+5*len(w.blocks))
	mark := false
	if j.mark != nil {
		if a.cfg.Slots != nil {
			done.marked, done.markFailed = a.markSlots(client, *j.mark, j.marking)
		} else {
			// First, so every acquire after it sees the marker.
			cmds = append(cmds, markCmd(client, a.cfg.EpochKey, *j.mark, !a.cfg.UnsafeEviction))
			mark = true
		}
	}
	if j.record > 0 {
		// Before the commands that use the TTL.
		cmds = append(cmds, recordCmd(client, j.recordKey, j.record))
	}
	skip := len(cmds)
	for i, c := range w.blocks {
		cmds = appendPlain(cmds, client, j.batch[c.from:c.to], a.markerKey(w, c), j.epoch, &w.ttl)
		w.blocks[i].end = len(cmds)
	}
	plainEnd := len(cmds)
	for _, c := range w.calls {
		cmds = append(cmds, w.script.build(client, batch[c.from:c.to], a.markerKey(w, c), j.epoch, j.channel, a.cfg.Slots != nil, &w.ttl))
	}
	start := time.Now()
	results := client.DoMulti(ctx, cmds...)
	if err := results[0].Error(); errors.Is(err, errUnchecked) {
		return err
	}
	rtt := time.Since(start)
	if results[len(results)-1].NonRedisError() == nil {
		done.rtt = rtt // the link's, not a timeout's (link.add)
	}
	a.stats.batches.Add(1)
	a.stats.commands.Add(uint64(len(j.batch)))
	if a.cfg.Meter != nil {
		a.cfg.Meter.RoundTrip(rtt, len(j.batch))
	}
	if mark {
		n, err := results[0].AsInt64()
		done.marked, done.markFailed = n == 1, err == nil && n == 0
	}
	if j.record > 0 {
		was, err := results[skip-1].AsInt64()
		done.record, done.recordFailed = max(j.record, time.Duration(was)*time.Millisecond), err != nil
	}
	from := skip
	for _, c := range w.blocks {
		a.answerPlain(j.batch[c.from:c.to], results[from:c.end], j.epoch, time.Now(), done, &w.out)
		from = c.end
	}
	results = results[plainEnd:]

	// A node whose script cache lost the batch script (a new process
	// behind a connection that outlived the old one, SCRIPT FLUSH) is
	// probed before the script's command and every one after it go again,
	// in order: the probe loads the script and finds out which dataset
	// answers now. (The commands after it may have run: every command is
	// idempotent.)
	if i := firstNoScript(results); i >= 0 {
		done.unchecked = true
		done.batch = batch[w.calls[i].from:]
		results = results[:i]
	}

	now := time.Now()
	for i, r := range results {
		call := batch[w.calls[i].from:w.calls[i].to]
		replies, err := r.ToArray()
		if err == nil && len(replies) != len(call) {
			err = fmt.Errorf("redlease: the batch script answered %d replies for %d commands", len(replies), len(call))
		}
		if err == nil {
			for i := range call {
				a.answerReply(&call[i], &replies[i], now, done, &w.out)
			}
			continue
		}
		re, answered := rueidis.IsRedisErr(err)
		if !answered {
			a.unanswered(call, now, err, done, &w.out)
			continue
		}
		moved := a.cfg.Moved != nil && movedSlot(re)
		if moved {
			a.cfg.Moved()
		}
		for i := range call { // the call failed as a whole: no command has its own answer
			if !call[i].silent {
				a.reply(&call[i], Failed, now, err, &w.out)
			}
			if moved && call[i].op == opRelease && a.cfg.reroute != nil {
				a.cfg.reroute(newRerouted(call[i], a.cfg.Addr))
			}
		}
	}
	return nil
}

// call is the commands of a batch, batch[from:to], that one script call
// or plain block carries.
type call struct {
	from, to int
	slot     uint16 // on a cluster's shard, theirs
	end      int    // a plain block's: where its commands end in the batch's
}

// calls splits batch into script calls or plain blocks, appended to out:
// up to limit commands each (0: any number) and, on a cluster's shard, of
// one slot each, the commands sorted by slot (stable: commands on one key
// keep their order).
func (a *nodeActor) calls(batch []entry, limit int, out []call) []call {
	if a.cfg.Slots != nil {
		slices.SortStableFunc(batch, func(x, y entry) int { return int(x.slot) - int(y.slot) })
	}
	for from := 0; from < len(batch); {
		to := from + 1
		for to < len(batch) && (limit == 0 || to-from < limit) && batch[to].slot == batch[from].slot {
			to++
		}
		out = append(out, call{from: from, to: to, slot: batch[from].slot})
		from = to
	}
	return out
}

// markerKey is the epoch marker a call requires: on a cluster's shard,
// its slot's, made once per slot (w.markers).
func (a *nodeActor) markerKey(w *wire, c call) string {
	if a.cfg.Slots == nil {
		return a.cfg.EpochKey
	}
	k, ok := w.markers[c.slot]
	if !ok {
		if w.markers == nil {
			w.markers = map[uint16]string{}
		}
		k = markerKey(a.cfg.EpochKey, c.slot)
		w.markers[c.slot] = k
	}
	return k
}

// movedSlot reports whether err is a cluster master's refusal of a slot
// it does not serve now: MOVED, ASK (the slot migrates), TRYAGAIN (its
// keys are split by a migration), CLUSTERDOWN.
func movedSlot(err *rueidis.RedisError) bool {
	_, moved := err.IsMoved()
	_, ask := err.IsAsk()
	return moved || ask || err.IsTryAgain() || err.IsClusterDown()
}

// answerReply answers e with its reply in the batch script's answer.
func (a *nodeActor) answerReply(e *entry, reply *rueidis.RedisMessage, now time.Time, done *sent, out *actors.Batch) {
	n, counter, holder, meta, err := parseReply(reply)
	switch {
	case err != nil: // an error reply: the node is up, the command did nothing
		if !e.silent {
			a.reply(e, Failed, now, err, out)
		}
	case e.silent:
	case n == 1 && e.asked: // its own key, which the plain SET did not renew: refused
		a.reply(e, Taken, now, nil, out)
	case n == 1 && e.op == opCheck: // counter: the key's PTTL
		a.answer(e, Vote{Outcome: Granted, RTT: now.Sub(e.queued), TTL: pttl(counter)}, out)
	case n == 1:
		if e.op == opHeal {
			a.stats.healed.Add(1)
		}
		a.replyCounter(e, now, counter, out)
	case n == keyAbsent:
		a.reply(e, Absent, now, nil, out)
	case n == epochMissing:
		a.lost(e, done)
		a.replyQuarantined(e, now, now.Add(a.quarantineFor()), ErrQuarantined, out)
	case holder != "": // counter: the key's PTTL
		v := Vote{Outcome: Taken, RTT: now.Sub(e.queued), Holder: holder, Meta: meta, TTL: pttl(counter)}
		if int64(counter) >= 0 {
			v.Until = now.Add(v.TTL)
		}
		a.answer(e, v, out)
	default:
		a.reply(e, Taken, now, nil, out)
	}
}

// unanswered answers entries that got no answer from Redis, and keeps their
// releases to send again.
func (a *nodeActor) unanswered(batch []entry, now time.Time, err error, done *sent, out *actors.Batch) {
	o := Failed
	if isTimeout(err) {
		o, err = Timeout, errTimeout
	}
	for i := range batch {
		e := batch[i]
		done.failed++
		if !e.silent {
			a.reply(&e, o, now, err, out)
		}
		if e.op == opRelease {
			e.silent, e.successor = true, "" // see settle
			done.retry = append(done.retry, e)
		}
	}
}

func firstNoScript(results []rueidis.RedisResult) int {
	for i, r := range results {
		if re, ok := rueidis.IsRedisErr(r.Error()); ok && re.IsNoScript() {
			return i
		}
	}
	return -1
}

// parseReply reads a command's reply in the batch script's answer: an
// integer, {1, counter} for a fenced grant, {1, PTTL} for a check that
// found the key its owner's, or {0, PTTL, holder, meta} for another
// owner's key (counter then carries the PTTL, which may be negative); or
// an error reply.
func parseReply(msg *rueidis.RedisMessage) (n int64, counter uint64, holder, meta string, err error) {
	if err = msg.Error(); err != nil {
		return 0, 0, "", "", err
	}
	if !msg.IsArray() {
		n, err = msg.AsInt64()
		return n, 0, "", "", err
	}
	arr, _ := msg.ToArray()
	if len(arr) != 2 && len(arr) != 4 {
		return 0, 0, "", "", fmt.Errorf("redlease: script answered %d values, want 2 or 4", len(arr))
	}
	if n, err = arr[0].AsInt64(); err != nil {
		return 0, 0, "", "", err
	}
	c, err := arr[1].AsInt64()
	if err == nil && len(arr) == 4 {
		holder, err = arr[2].ToString()
		if err == nil {
			meta, err = arr[3].ToString()
		}
	}
	return n, uint64(c), holder, meta, err
}

// pttl is a PTTL the script answered, in counter: 0 for none (a key
// without a TTL, -1).
func pttl(counter uint64) time.Duration {
	return max(time.Duration(int64(counter)), 0) * time.Millisecond
}

func (a *nodeActor) replyCounter(e *entry, now time.Time, counter uint64, out *actors.Batch) {
	a.answer(e, Vote{Outcome: Granted, RTT: now.Sub(e.queued), Counter: counter}, out)
}

func (a *nodeActor) reply(e *entry, o Outcome, now time.Time, err error, out *actors.Batch) {
	a.answer(e, Vote{Outcome: o, RTT: now.Sub(e.queued), Err: err}, out)
}

// replyQuarantined refuses an acquire while the node sits out, saying
// until when, so the lease can wait for it instead of retrying blindly,
// and why (err, matching ErrQuarantined; nil for ErrQuarantined).
func (a *nodeActor) replyQuarantined(e *entry, now, until time.Time, err error, out *actors.Batch) {
	if err == nil {
		err = ErrQuarantined
	}
	a.answer(e, Vote{Outcome: Failed, RTT: now.Sub(e.queued), Err: err, Until: until}, out)
}

// answer sends v, from this node and for e's round, to e's sender: through
// out, when the sender gave its mailbox and the caller a Batch (the
// sender goroutine, answering a batch), else at once.
func (a *nodeActor) answer(e *entry, v Vote, out *actors.Batch) {
	if e.req.ReplyTo == nil {
		return // nobody waits for it (see Release)
	}
	p := votes.Get().(*Vote)
	*p = v
	p.Node, p.Round = a.cfg.Index, e.req.Round
	if a.cfg.Slots != nil {
		p.Shard, p.Slot = a.cfg.Addr, e.slot
	}
	if out != nil && e.req.Inbox != nil {
		out.Post(e.req.Inbox, p)
		return
	}
	a.system.Root.Send(e.req.ReplyTo, p)
}

func (a *nodeActor) failQueued(err error) {
	now := time.Now()
	for i := range a.queue {
		if !a.queue[i].silent {
			a.reply(&a.queue[i], Failed, now, err, nil)
		}
	}
	clear(a.queue)
	a.queue = a.queue[:0]
}

var errTimeout = errors.New("redlease: node timeout")

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}
