package node

import (
	"hash/maphash"
	"slices"
	"time"

	"github.com/redlease/redlease/actors"
	"github.com/redlease/redlease/internal/hashslot"
)

// Batching: commands queue in the node actor (enqueue) and go on the
// wire in batches (flush), commands on one key in the order they came.

// keySet is a set of lock keys by a bit of each key's hash: a key whose
// bit is set may be in the set. The keys of the batches on the wire are
// kept so, and a command whose key may be in one waits for it: commands on
// one key take effect in the order they came. A false match only makes a
// command wait for the next batch.
type keySet [16]uint64

func (s *keySet) add(bit uint16) { s[bit/64] |= 1 << (bit % 64) }

func (s *keySet) has(bit uint16) bool { return s[bit/64]&(1<<(bit%64)) != 0 }

var keySeed = maphash.MakeSeed()

func keyBit(key string) uint16 { return uint16(maphash.String(keySeed, key) % (16 * 64)) }

func (a *nodeActor) enqueue(e entry) {
	e.keyBit = keyBit(e.req.Key)
	if a.cfg.Slots != nil {
		e.slot = uint16(hashslot.Of(e.req.Key))
	}
	e.urgent = e.op.acquires() && e.since != "" || e.op == opRelease && (e.leave || e.successor != "")
	e.queued = e.req.Sent
	if e.queued.IsZero() {
		e.queued = time.Now()
	}
	a.queue = append(a.queue, e)
	a.flush()
}

// flush puts the next job on the wire while there is room: a due probe
// first, alone, else what queued, in order, but for commands whose keys a
// batch on the wire may carry, which wait for it. Commands are answered unsent
// when their deadline passed while queued (Timeout), while the node is
// down (Failed, ErrNodeDown) and, for acquires, while it is quarantined.
// A release answered unsent is still sent, silently, as soon as the node
// answers again and while its key may live: a failed attempt's keys must
// not outlive it.
func (a *nodeActor) flush() {
	limit, slow := a.wires, a.link.slow()
	if slow {
		limit = maxWire
		a.addSenders(maxWire)
	}
	if a.inFlight() >= limit || a.alone || a.stopping {
		return
	}
	now := time.Now()
	a.slotsSeen(now)
	whole := a.health.epochDue(now)
	due := a.slotsDue(now)
	mark := whole || len(due) > 0
	if (a.health.probeDue || mark) && a.inFlight() > 0 {
		return // it goes alone, once the wire is clear
	}
	if a.health.probeDue {
		a.health.probeDue = false
		a.used[0], a.alone = true, true
		a.work <- job{probe: true, prev: a.health.checked, deadline: now.Add(a.probeTimeout()), probeKey: a.probeKey()}
		return
	}
	if len(a.queue) == 0 {
		return
	}
	slot, busy := -1, keySet{} // slot: the first free; busy: keys whose commands wait
	for s, used := range a.used {
		if !used {
			if slot < 0 {
				slot = s
			}
			continue
		}
		for w := range busy {
			busy[w] |= a.onWire[s][w]
		}
	}
	switch {
	case a.inFlight() == 0:
	case slow:
		if wait := deepEvery - now.Sub(a.lastSent); wait > 0 {
			a.flushIn(wait)
			return
		}
	case len(a.queue) < overlapAt &&
		!slices.ContainsFunc(a.queue, func(e entry) bool { return e.urgent && !busy.has(e.keyBit) }):
		return
	}
	keys := &a.onWire[slot]
	*keys = keySet{}
	quarantined := a.health.quarantined(now)
	var batch []entry
	if n := len(a.spares); n > 0 {
		batch, a.spares = a.spares[n-1], a.spares[:n-1]
	}
	deadline := time.Time{}
	var longest time.Duration // the batch's longest TTL
	// a.queue[:kept]: releases held back while the node is down, and
	// commands whose keys are on the wire
	kept, i := 0, 0
	for ; i < len(a.queue); i++ {
		e := a.queue[i]
		switch {
		case e.silent:
			if now.Sub(e.queued) >= e.ttl {
				continue // the key expired by now
			}
		case a.health.down:
			if !a.settle(&e, Failed, now, ErrNodeDown) {
				continue
			}
		case now.Sub(e.queued) >= a.cfg.Timeout:
			if !a.settle(&e, Timeout, now, errTimeout) {
				continue
			}
		case e.op.acquires() && quarantined:
			a.replyQuarantined(&e, now, a.health.quarantineUntil, a.health.quarantineErr, nil)
			continue
		case e.op.acquires() && a.slotOut(e.slot, now):
			a.replyQuarantined(&e, now, a.health.slotsOut[e.slot], ErrQuarantined, nil)
			continue
		case e.op.acquires() && a.health.evicting != nil:
			a.reply(&e, Failed, now, a.health.evicting, nil)
			continue
		}
		if a.health.down || busy.has(e.keyBit) {
			a.queue[kept] = e
			kept++
			continue
		}
		if len(batch) == maxBatch {
			break
		}
		if !e.silent && deadline.IsZero() {
			deadline = e.queued.Add(a.cfg.Timeout)
		}
		batch = append(batch, e)
		keys.add(e.keyBit)
		longest = max(longest, e.ttl)
	}
	rest := kept + copy(a.queue[kept:], a.queue[i:])
	clear(a.queue[rest:])
	a.queue = a.queue[:rest]
	if len(batch) == 0 {
		if batch != nil {
			a.spares = append(a.spares, batch)
		}
		return
	}
	if deadline.IsZero() {
		deadline = now.Add(a.cfg.Timeout)
	}
	j := job{slot: slot, sentAt: now, batch: batch, epoch: a.epoch(), channel: a.cfg.Channel, deadline: deadline}
	if a.health.evicting != nil || quarantined {
		// A grant is an acquire: not on a node that may evict, nor on one
		// that sits out a quarantine (it may have lost the holder's key).
		j.channel = ""
	}
	if a.quarantineOn() {
		if j.record = a.health.record.due(now, longest); j.record > 0 {
			j.recordKey = RecordKey(a.probeKey())
		}
	}
	if mark {
		checked := a.health.checked
		j.mark, a.alone = &checked, true
		j.whole, j.marking = whole, due
		if whole && a.cfg.Slots != nil {
			j.marking = a.slotsToMark(now)
		}
	}
	a.used[slot], a.lastSent = true, now
	a.stats.onWire.Add(int64(len(batch)))
	a.work <- j // never blocks: it holds as many jobs as may be on the wire
}

// addSenders starts sender goroutines until n run: one per batch that
// may be on the wire, and no more, since a job handed to an idle sender is
// a goroutine wake-up that the sender which made it, back from the
// mailbox's run, would have spared.
func (a *nodeActor) addSenders(n int) {
	for ; a.started < n; a.started++ {
		a.senders.Add(1)
		go a.sender()
	}
}

// flushIn has the actor flush again in d (deepTick), unless it will.
func (a *nodeActor) flushIn(d time.Duration) {
	if a.deepSet {
		return
	}
	a.deepSet = true
	if a.deep == nil {
		a.deep = time.AfterFunc(d, func() { a.system.Root.Send(a.self, &deepTick{}) })
		return
	}
	a.deep.Reset(d)
}

// deepTick: flushIn's time came.
type deepTick struct{ actors.Late }

// returned frees the wire's slot of a job that came back.
func (a *nodeActor) returned(slot int) {
	a.used[slot], a.onWire[slot] = false, keySet{}
	a.alone = false
}

// inFlight is how many jobs are on the wire.
func (a *nodeActor) inFlight() int {
	n := 0
	for _, used := range a.used {
		if used {
			n++
		}
	}
	return n
}

// settle answers e unsent and reports whether it stays queued: a release
// does, silently, since its key may still be on the node; but not the
// successor it was to queue, who may be done waiting by the time it goes.
func (a *nodeActor) settle(e *entry, o Outcome, now time.Time, err error) bool {
	a.reply(e, o, now, err, nil)
	e.silent, e.successor = true, ""
	return e.op == opRelease
}
