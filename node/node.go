package node

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/redis/rueidis"

	"github.com/redlease/redlease/actors"
	"github.com/redlease/redlease/internal/hashslot"
)

// maxBatch bounds one DoMulti: rueidis sends pipelines longer than its
// BlockingPipeline (default 2000) over a separate pooled connection, which
// would break the one-connection ordering.
const maxBatch = 1000

// Config describes one node actor.
type Config struct {
	Index   int           // position in the engine's node list, echoed in votes
	Addr    string        // host:port, for logs
	Conn    *Conn         // the node's connection; the actor closes it
	Timeout time.Duration // per command, from its Request.Sent (or reaching the actor) to the answer
	Logger  *slog.Logger

	// Health and restart quarantine (see health.go).
	EpochKey       string        // key of the epoch marker: the lineage of the dataset last judged safe
	Quarantine     time.Duration // how long a node that lost its data refuses acquires; < 0: never
	HealthInterval time.Duration // between probes while up (a fifth of it while down)
	// Horizon, shared by an engine's node actors, is the longest TTL
	// recorded on its nodes: quarantines last at least that long (see
	// horizon.go). nil: this actor's own.
	Horizon *Horizon
	First   *Info // Conn's first probe; nil when the node was unreachable
	// UnsafeEviction: a node that may evict lock keys (Info.Evicts) grants
	// all the same.
	UnsafeEviction bool
	// Channel is the engine's own channel, on which its Watchers listen:
	// the waiters its commands queue leave their values for a release to
	// grant them the key while the engine listens there (see batch.lua,
	// Grants; Announcement.Granted). "": no grants.
	Channel string
	// Overlap lets a second batch go on the wire while one is out, with
	// the commands a hand-off waits for (see maxWire). For an engine of
	// one node.
	Overlap bool
	// Slots, for a shard actor of a Redis Cluster node (DialCluster): the
	// slots its master serves. Its batches go as a script call per slot,
	// each requiring its slot's epoch marker (see Cluster).
	Slots *Slots
	// Moved, for a shard actor: the master refused a command for a slot
	// it does not serve (now).
	Moved func()
	// reroute, for a shard actor: a release its master refused so, to
	// send again where the slot went (Cluster.reroute).
	reroute func(*rerouted)

	Meter Meter // told of each batch's round trip; nil for none
}

// Meter is told of each batch a node actor put on the wire: its round
// trip and how many commands it carried. It is called from the actor's
// sender goroutine and must not block.
type Meter interface {
	RoundTrip(rtt time.Duration, commands int)
}

// ShardMeter is a Meter that tells a Redis Cluster node's shards apart:
// each shard actor's Meter is ForShard of its master's address.
type ShardMeter interface {
	Meter
	ForShard(addr string) Meter
}

// Node is a running node actor, or a Redis Cluster's (DialCluster).
// Send it Commands.
type Node struct {
	PID     *actor.PID
	system  *actor.ActorSystem
	actor   *nodeActor
	cluster *Cluster
}

// Cluster is n's Redis Cluster, nil for a node of one master.
func (n *Node) Cluster() *Cluster { return n.cluster }

// Stats is a snapshot of a node actor's work and health; commands per
// batch is how much pipelining saves.
type Stats struct {
	Commands        uint64    // commands answered by a batch on the wire
	Batches         uint64    // DoMulti calls: round trips
	Restarts        uint64    // times the node was seen to have lost its data
	Healed          uint64    // keys a Heal set: leases that regained the node
	OnWire          int64     // commands in the batches on the wire now
	Queued          int64     // commands waiting for a batch (in the mailbox too, while batches are on the wire)
	Down            bool      // failing fast: the last batches and probes failed
	Evicting        bool      // refusing acquires: the node may evict lock keys (ErrEvicting)
	QuarantineUntil time.Time // acquires refused before it; zero: never quarantined
	// SlotsOut: a Redis Cluster's slots that sit out a quarantine of their
	// own (their epoch marker was another master's: the slot moved), or
	// wait to be marked after it.
	SlotsOut int64
}

// counters are the actor's Stats as it keeps them, for any goroutine to
// read.
type counters struct {
	commands, batches, restarts atomic.Uint64
	healed                      atomic.Uint64
	onWire, queued, slotsOut    atomic.Int64
	down, evicting              atomic.Bool
	quarantineUntil             atomic.Int64 // Unix nanoseconds; 0: never
}

// Stats returns a snapshot of the node's counters; a cluster's, its
// shards' summed (Down: every shard is down; QuarantineUntil: the
// latest).
func (n *Node) Stats() Stats {
	if n.cluster != nil {
		return n.cluster.stats()
	}
	c := &n.actor.stats
	s := Stats{
		Commands: c.commands.Load(), Batches: c.batches.Load(), Restarts: c.restarts.Load(), Healed: c.healed.Load(),
		OnWire: c.onWire.Load(), Queued: c.queued.Load() + int64(n.actor.mailbox.UserMessageCount()),
		Down: c.down.Load(), Evicting: c.evicting.Load(), SlotsOut: c.slotsOut.Load(),
	}
	if q := c.quarantineUntil.Load(); q != 0 {
		s.QuarantineUntil = time.Unix(0, q)
	}
	return s
}

// Spawn starts the node actor for cfg.
func Spawn(system *actor.ActorSystem, cfg Config) *Node {
	if cfg.Logger == nil {
		cfg.Logger = actors.Discard
	}
	if cfg.HealthInterval <= 0 {
		cfg.HealthInterval = time.Second
	}
	a := &nodeActor{
		cfg:    cfg,
		system: system,
		conn:   cfg.Conn,
		work:   make(chan job, maxWire),
		runs:   make(chan func(), 1),
		wires:  1,
	}
	if cfg.Overlap {
		a.wires = overlapWires
	}
	a.start(cfg.First)
	a.addSenders(a.wires)
	pid := system.Root.Spawn(actors.PropsWithMailbox(func() actor.Actor { return a }, senderDispatcher{a},
		func(m *actors.Mailbox) { a.mailbox = m }))
	return &Node{PID: pid, system: system, actor: a}
}

// Stop stops the actor (commands still queued are answered with
// ErrStopped), waits for the batches on the wire and closes the client.
func (n *Node) Stop() {
	if n.cluster != nil {
		n.cluster.close()
		return
	}
	_ = n.system.Root.StopFuture(n.PID).Wait()
	n.actor.stopOnce.Do(func() { close(n.actor.work) })
	n.actor.senders.Wait()
	n.actor.conn.Close()
}

type op uint8

const (
	opAcquire op = iota
	opExtend
	opRelease
	opAcquireFenced
	opFence
	opQueue
	opCheck
	opHeal
)

// acquires: refused while the node is quarantined or may evict lock keys:
// acquires; heals, which set a key as an acquire does; and checks, whose
// answers decide whether a lease is held.
func (o op) acquires() bool {
	return o == opAcquire || o == opAcquireFenced || o == opHeal || o == opCheck
}

// entry is one queued command.
type entry struct {
	op       op
	req      *Request
	ttl      time.Duration // for a release: how long the key may live
	queued   time.Time
	fenceKey string
	token    uint64
	announce bool // a release to announce
	leave    bool // a release that leaves the queue of waiters
	// since: an acquire that queues, when its caller began to wait (ms);
	// a release with a successor, when the successor did.
	since        string
	successor    string        // a release's successor to queue (HandOff, Cleanup)
	successorTTL time.Duration // and its TTL
	ungranted    bool          // and HandOff.Ungranted
	keep         bool          // a release that keeps a grant (Cleanup.Keep, Leave.KeepGrant)
	cleanup      bool          // a Cleanup: its successor is its own place
	// silent: a release whose Vote went out unanswered by Redis; it is
	// sent again, first, until Redis answers or its key expired.
	silent bool
	// scripted: an acquire that goes through the script, not plain (see
	// plain.go): a plain SET found its key, or a refusal is expected
	// (Acquire.Contended).
	scripted bool
	// asked: a plain acquire whose SET found the key, asking the script
	// who holds it (a check); refused whatever it answers (plain.go).
	asked  bool
	keyBit uint16 // the key's bit in a keySet
	slot   uint16 // the key's hash slot, on a cluster's shard (Config.Slots)
	urgent bool   // a hand-off waits for it: it may go beside a batch on the wire
}

// overlapWires is how many batches may be on a node's wire at once, with
// Config.Overlap; else one, on a fast link. With one, a command that came
// while a batch was out waits for it to return: on one node, most of a
// contended hand-off's time was its release and the next acquire each
// waiting so. A second batch goes, with the commands whose keys the first
// does not carry (rueidis pipelines both on the one connection), when a
// command a hand-off waits for (entry.urgent) is queued, or overlapAt
// commands are. The first costs a write (a system call) per such command
// instead of one per batch: on one node that is two per hand-off, and the
// hand-off takes a quarter less time. The second keeps the node busy while
// the client reads the batch on the wire's answers. On five nodes, on a
// machine whose cores the client and the nodes share, both cost more than
// they saved.
const overlapWires = 2

// Behind a slow link. A node whose recent batches all took at least
// slowLink to come back (link.slow) is behind a network hop, not the
// loopback or a rack's switch, where the batches' own work makes their
// round trip. There up to maxWire batches may be on the wire: a batch
// goes, beside those out, with the commands whose keys they do not
// carry, deepEvery after the last one went (a timer sees to it), however
// few commands queued. A command then waits about deepEvery for a batch
// rather than a round trip of the link, while the answers of a batch,
// which come back together and make the next commands together, still go
// out together.
const (
	maxWire   = 8
	slowLink  = 500 * time.Microsecond
	deepEvery = 100 * time.Microsecond
)

// link is the smallest round trip of a node's batches in the last one or
// two linkWindows: what the link costs, beyond the batches' own work.
//
// A link is slow only on a whole window's evidence, of linkSamples batches
// at least: the first batches of a node (its script loaded, its marker
// written, its process still warming) are slow on any link. A misjudged
// slow link costs for good: the second batch it sends beside the first
// turns rueidis' connection from writing and reading on the caller's
// goroutine to its background writer and reader, for the connection's life
// (measured on 5 nodes, contended: 0.87x the cycles/s of one batch at a
// time).
type link struct {
	min, prev time.Duration // prev: the last whole window's, 0 if too few batches
	n         int           // batches in this window
	since     time.Time
}

const (
	linkWindow  = 500 * time.Millisecond
	linkSamples = 16
)

func (l *link) add(now time.Time, rtt time.Duration) {
	if now.Sub(l.since) >= linkWindow {
		l.prev = 0
		if l.n >= linkSamples {
			l.prev = l.min
		}
		l.min, l.n, l.since = rtt, 1, now
		return
	}
	l.min = min(l.min, rtt)
	l.n++
}

// slow reports whether the node is behind a slow link: the smallest round
// trip of the last whole window, and of this one, is slowLink or more.
func (l *link) slow() bool { return l.prev > 0 && min(l.min, l.prev) >= slowLink }

// overlapAt is how many queued commands make a second batch worth its
// write: measured on one node, uncontended (go run ./bench -n 1 -clients
// redlease -workers 16,128,512), 4 to 32 all beat waiting, 8 the most.
const overlapAt = 8

// keySet is a set of lock keys by a bit of each key's hash: a key whose
// bit is set may be in the set. The keys of the batches on the wire are
// kept so, and a command whose key may be in one waits for it: commands on
// one key take effect in the order they came. A false match only makes a
// command wait for the next batch.
type keySet [16]uint64

func (s *keySet) add(bit uint16)      { s[bit/64] |= 1 << (bit % 64) }
func (s *keySet) has(bit uint16) bool { return s[bit/64]&(1<<(bit%64)) != 0 }

var keySeed = maphash.MakeSeed()

func keyBit(key string) uint16 { return uint16(maphash.String(keySeed, key) % (16 * 64)) }

// job is what a sender goroutine puts on the wire: a batch, or a health
// probe.
type job struct {
	slot      int // its place among the batches on the wire (onWire)
	sentAt    time.Time
	batch     []entry
	epoch     string        // the marker acquires require ("": none)
	channel   string        // Config.Channel, or "" while the node may evict or is quarantined (no grants)
	mark      *Info         // write the epoch marker of this dataset first
	record    time.Duration // update the TTL record for this TTL first (recordKey)
	recordKey string
	probe     bool
	prev      Info // the probe's previous connection
	deadline  time.Time

	// marking: on a cluster's shard, the slots to mark (slotsToMark);
	// whole: the mark is the shard's (health.epochPending), not only
	// that of slots whose own quarantine ended (slotsOut).
	marking  []uint16
	whole    bool
	probeKey string // the epoch marker the probe reads (probeKey)
}

type nodeActor struct {
	cfg    Config
	system *actor.ActorSystem
	self   *actor.PID
	conn   *Conn
	queue  []entry   // waiting for a place on the wire
	spares [][]entry // the slices of batches that returned, reused
	// The jobs on the wire (inFlight), by slot: used, and the keys of its
	// batch. alone: the one on the wire is a probe, or writes the epoch
	// marker, which nothing may run beside.
	used     [maxWire]bool
	onWire   [maxWire]keySet
	wires    int // how many batches may be on the wire: 1, or overlapWires with Config.Overlap; maxWire on a slow link
	link     link
	lastSent time.Time   // when the last batch went out
	deep     *time.Timer // flushes deepEvery after lastSent, on a slow link
	deepSet  bool        // deep is set
	alone    bool
	seen     *[]uint16   // on a cluster's shard, the Slots the actor last saw (slotsSeen)
	noPlain  atomic.Bool // the node refused MULTI: acquires go through the script (plain.go)
	stopping bool        // nothing more goes on the wire
	stats    counters
	health   health

	work     chan job    // to the sender goroutines; holds the jobs on the wire
	runs     chan func() // the mailbox's runs, to a sender goroutine (senderDispatcher)
	mailbox  *actors.Mailbox
	senders  sync.WaitGroup
	started  int // sender goroutines started (addSenders)
	stopOnce sync.Once
	timer    *time.Timer // next health probe
}

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

func (a *nodeActor) Receive(ctx actor.Context) {
	defer actors.Recover(func(reason any) {
		a.cfg.Logger.Error("redlease: node actor panicked", "node", a.cfg.Addr, "panic", reason)
		a.failQueued(fmt.Errorf("redlease: node actor panicked: %v", reason))
		ctx.Stop(ctx.Self())
	})
	switch m := ctx.Message().(type) {
	case *sent:
		a.returned(m.slot)
		if m.rtt > 0 {
			a.link.add(time.Now(), m.rtt)
		}
		a.stats.onWire.Add(-int64(m.size))
		switch {
		case m.unchecked: // unsent: first in line again, after a probe
			a.queue = append(append(m.retry, m.batch...), a.queue...)
		case len(m.retry) > 0: // issued before anything queued now
			a.queue = append(m.retry, a.queue...)
			a.spares = append(a.spares, m.batch[:0])
		default:
			a.spares = append(a.spares, m.batch[:0])
		}
		a.batchDone(m)
		a.flush()
	case *probed:
		a.returned(0)
		a.probeDone(m)
		a.flush()
	case *deepTick:
		a.deepSet = false
		a.flush()
	case *healthTick:
		a.health.probeDue = true
		a.flush()
	case *actor.Started:
		a.self = ctx.Self()
		a.armProbe()
		a.flush() // a probe may be due
	case *actor.Stopping:
		if a.timer != nil {
			a.timer.Stop()
		}
		if a.deep != nil {
			a.deep.Stop()
		}
		// Commands still in the mailbox would never be handled (a stopped
		// actor's user messages are dropped): queue them to be answered.
		a.stopping = true
		a.mailbox.DrainUser(func(msg any) { a.command(msg) })
		a.failQueued(ErrStopped)
	default:
		a.command(m)
	}
	a.stats.queued.Store(int64(len(a.queue)))
}

// command queues msg if it is a command.
func (a *nodeActor) command(msg any) {
	switch m := msg.(type) {
	case *Acquire:
		if m.FenceKey != "" {
			a.enqueue(entry{op: opAcquireFenced, req: &m.Request, ttl: m.TTL, fenceKey: m.FenceKey, since: m.Since})
		} else {
			a.enqueue(entry{op: opAcquire, req: &m.Request, ttl: m.TTL, since: m.Since, scripted: m.Contended})
		}
	case *Fence:
		a.enqueue(entry{op: opFence, req: &m.Request, fenceKey: m.FenceKey, token: m.Token})
	case *Queue:
		a.enqueue(entry{op: opQueue, req: &m.Request, ttl: m.TTL, since: m.Since})
	case *Extend:
		a.enqueue(entry{op: opExtend, req: &m.Request, ttl: m.TTL})
	case *Check:
		a.enqueue(entry{op: opCheck, req: &m.Request})
	case *Heal:
		a.enqueue(entry{op: opHeal, req: &m.Request, ttl: m.TTL})
	case *Release:
		a.enqueue(entry{op: opRelease, req: &m.Request, ttl: m.TTL, announce: true, leave: m.Queued})
	case *HandOff:
		successorTTL := m.SuccessorTTL
		if successorTTL <= 0 {
			successorTTL = m.TTL
		}
		a.enqueue(entry{op: opRelease, req: &m.Request, ttl: m.TTL, announce: true, leave: m.Queued,
			successor: m.Successor, since: m.SuccessorSince, successorTTL: successorTTL, ungranted: m.Ungranted})
	case *Cleanup:
		e := entry{op: opRelease, req: &m.Request, ttl: m.TTL, announce: m.Announce, successorTTL: m.TTL,
			keep: m.Keep&(1<<min(a.cfg.Index, 63)) != 0, cleanup: true}
		if m.Since != "" {
			e.successor, e.since = m.Value, m.Since
		}
		a.enqueue(e)
	case *Leave:
		a.enqueue(entry{op: opRelease, req: &m.Request, ttl: m.TTL, announce: !m.KeepGrant, leave: true, keep: m.KeepGrant,
			successorTTL: m.TTL})
	case *rerouted:
		a.enqueue(m.e)
	}
}

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
			a.replyQuarantined(&e, now, a.health.quarantineUntil, nil)
			continue
		case e.op.acquires() && a.slotOut(e.slot, now):
			a.replyQuarantined(&e, now, a.health.slotsOut[e.slot], nil)
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
		a.replyQuarantined(e, now, now.Add(a.quarantineFor()), out)
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
// until when, so the lease can wait for it instead of retrying blindly.
func (a *nodeActor) replyQuarantined(e *entry, now, until time.Time, out *actors.Batch) {
	a.answer(e, Vote{Outcome: Failed, RTT: now.Sub(e.queued), Err: ErrQuarantined, Until: until}, out)
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
