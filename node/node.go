package node

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/redlease/redlease/actors"
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
	// OnHealth, if set, is told when the node goes down, into a restart
	// quarantine, or serves again (a shard actor's copies it, naming its
	// master). Called from the actor's goroutine: it must not block.
	OnHealth func(HealthChange)
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
	told   HealthChange // what OnHealth last heard (tellHealth)
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
	seen     *[]uint16    // on a cluster's shard, the Slots the actor last saw (slotsSeen)
	noPlain  atomic.Bool  // the node refused MULTI: acquires go through the script (plain.go)
	horizon  atomic.Int64 // the longest TTL recorded on the engine's nodes (Horizon, sawRecord)
	stopping bool         // nothing more goes on the wire
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
		a.tellHealth() // a quarantine may have ended, or begun
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
