package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/redis/rueidis"

	"github.com/redlease/redlease/actors"
)

// maxBatch bounds one DoMulti: rueidis sends pipelines longer than its
// BlockingPipeline (2000) over a separate pooled connection, which would
// break the one-connection ordering.
const maxBatch = 1000

// Config describes one node actor.
type Config struct {
	Index   int            // position in the engine's node list, echoed in votes
	Addr    string         // host:port, for logs
	Client  rueidis.Client // connected client; nil to dial lazily from Options
	Options rueidis.ClientOption
	Timeout time.Duration // per command, from reaching the actor to the answer
	Logger  *slog.Logger
	// Dispatcher runs the actor's mailbox; nil for protoactor's default.
	Dispatcher actor.Dispatcher

	// Health and restart quarantine (see health.go).
	EpochKey       string        // key whose absence means the node lost its data
	Quarantine     time.Duration // how long a node that lost its data refuses acquires; < 0: never
	HealthInterval time.Duration // between probes while up (a fifth of it while down)
	First          *Info         // the probe New made; nil when the node was unreachable
}

// Node is a running node actor. Send it *Acquire, *Extend and *Release.
type Node struct {
	PID    *actor.PID
	system *actor.ActorSystem
	actor  *nodeActor
}

// Stats counts a node actor's work and health. Its fields are read with
// atomic loads through Node.Stats; commands per batch is how much
// pipelining saves.
type Stats struct {
	Commands        atomic.Uint64 // commands answered by a batch on the wire
	Batches         atomic.Uint64 // DoMulti calls: round trips
	Restarts        atomic.Uint64 // times the node was seen to have lost its data
	Down            atomic.Bool   // failing fast: the last batches and probes failed
	QuarantineUntil atomic.Int64  // Unix nanoseconds; acquires refused before it
}

// Stats returns the node's live counters.
func (n *Node) Stats() *Stats { return &n.actor.stats }

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
		conn:   &conn{opt: cfg.Options, client: cfg.Client},
		work:   make(chan job, 1),
		idle:   make(chan struct{}),
	}
	a.start(cfg.First)
	props := actor.PropsFromProducer(func() actor.Actor { return a })
	if cfg.Dispatcher != nil {
		props = actor.PropsFromProducer(func() actor.Actor { return a }, actor.WithDispatcher(cfg.Dispatcher))
	}
	pid := system.Root.Spawn(props)
	go a.sender()
	return &Node{PID: pid, system: system, actor: a}
}

// Stop stops the actor (commands still queued are answered with
// ErrStopped), waits for the batch on the wire and closes the client.
func (n *Node) Stop() {
	_ = n.system.Root.StopFuture(n.PID).Wait()
	n.actor.stopOnce.Do(func() { close(n.actor.work) })
	<-n.actor.idle
	n.actor.conn.close()
}

type op uint8

const (
	opAcquire op = iota
	opExtend
	opRelease
	opAcquireFenced
	opFence
)

// acquires: refused while the node is quarantined.
func (o op) acquires() bool { return o == opAcquire || o == opAcquireFenced }

// entry is one queued command.
type entry struct {
	op       op
	req      *Request
	ttl      time.Duration
	queued   time.Time
	fenceKey string
	token    uint64
}

// job is what the sender goroutine puts on the wire: a batch (preceded by
// restoring the epoch key when setEpoch), or a health probe.
type job struct {
	batch    []entry
	setEpoch bool
	probe    bool
	deadline time.Time
}

type nodeActor struct {
	cfg    Config
	system *actor.ActorSystem
	self   *actor.PID
	conn   *conn
	queue  []entry // waiting for the job on the wire to return
	spare  []entry // the last batch's slice, reused
	busy   bool    // a job is on the wire
	stats  Stats
	health health

	work     chan job      // to the sender goroutine; holds at most the one job in flight
	idle     chan struct{} // closed when the sender goroutine returned
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
	case *Acquire:
		if m.FenceKey != "" {
			a.enqueue(entry{op: opAcquireFenced, req: &m.Request, ttl: m.TTL, fenceKey: m.FenceKey})
		} else {
			a.enqueue(entry{op: opAcquire, req: &m.Request, ttl: m.TTL})
		}
	case *Fence:
		a.enqueue(entry{op: opFence, req: &m.Request, fenceKey: m.FenceKey, token: m.Token})
	case *Extend:
		a.enqueue(entry{op: opExtend, req: &m.Request, ttl: m.TTL})
	case *Release:
		a.enqueue(entry{op: opRelease, req: &m.Request})
	case *sent:
		a.busy = false
		a.spare = m.batch[:0]
		a.batchDone(m)
		a.flush()
	case *probed:
		a.busy = false
		a.probeDone(m)
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
		a.failQueued(ErrStopped)
	}
}

func (a *nodeActor) enqueue(e entry) {
	e.queued = time.Now()
	a.queue = append(a.queue, e)
	a.flush()
}

// flush puts the next job on the wire unless one is already there: a due
// probe first, else what queued. Commands are answered unsent when their
// deadline passed while queued (Timeout), while the node is down (Failed,
// ErrNodeDown) and, for acquires, while it is quarantined.
func (a *nodeActor) flush() {
	if a.busy {
		return
	}
	now := time.Now()
	if a.health.probeDue {
		a.health.probeDue = false
		a.busy = true
		a.work <- job{probe: true, deadline: now.Add(a.probeTimeout())}
		return
	}
	if len(a.queue) == 0 {
		return
	}
	quarantined := a.health.quarantined(now)
	batch := a.spare
	n := 0
	for _, e := range a.queue {
		switch {
		case now.Sub(e.queued) >= a.cfg.Timeout:
			a.reply(&e, Timeout, now, errTimeout)
		case a.health.down:
			a.reply(&e, Failed, now, ErrNodeDown)
		case e.op.acquires() && quarantined:
			a.replyQuarantined(&e, now, a.health.quarantineUntil)
		default:
			if len(batch) == maxBatch {
				goto full
			}
			batch = append(batch, e)
		}
		n++
	}
full:
	rest := copy(a.queue, a.queue[n:])
	clear(a.queue[rest:])
	a.queue = a.queue[:rest]
	a.spare = nil
	if len(batch) == 0 {
		a.spare = batch
		return
	}
	a.busy = true
	// Never blocks: the sender is idle while not busy.
	a.work <- job{batch: batch, setEpoch: a.health.epochDue(now), deadline: batch[0].queued.Add(a.cfg.Timeout)}
}

// sender is the node's long-lived goroutine that puts jobs on the wire,
// off the mailbox. (A goroutine per batch would grow a fresh stack through
// rueidis every time.)
func (a *nodeActor) sender() {
	defer close(a.idle)
	for j := range a.work {
		if j.probe {
			a.probe(j.deadline)
		} else {
			a.run(j)
		}
	}
}

// run sends one batch, answers every entry of it and reports back with
// *sent.
func (a *nodeActor) run(j job) {
	done := &sent{size: len(j.batch), epochSet: j.setEpoch}
	client, err := a.conn.get()
	if err != nil {
		now := time.Now()
		for i := range j.batch {
			a.reply(&j.batch[i], Failed, now, err)
		}
		done.failed = len(j.batch)
	} else {
		a.send(client, j, done)
	}
	clear(j.batch)
	done.batch = j.batch[:0]
	a.system.Root.Send(a.self, done)
}

func (a *nodeActor) send(client rueidis.Client, j job, done *sent) {
	ctx, cancel := context.WithDeadline(context.Background(), j.deadline)
	defer cancel()
	batch := j.batch
	cmds := make(rueidis.Commands, 0, len(batch)+1)
	if j.setEpoch {
		// First on the connection, so every acquire after it sees the epoch.
		cmds = append(cmds, client.B().Set().Key(a.cfg.EpochKey).Value("1").Nx().Build())
	}
	skip := len(cmds)
	checkEpoch := a.cfg.Quarantine >= 0
	for i := range batch {
		cmds = append(cmds, batch[i].build(client, false, a.cfg.EpochKey, checkEpoch))
	}
	results := client.DoMulti(ctx, cmds...)
	a.stats.Batches.Add(1)
	a.stats.Commands.Add(uint64(len(batch)))
	if skip > 0 {
		if err := results[0].Error(); err != nil && !rueidis.IsRedisNil(err) {
			done.epochSet = false
		}
		results = results[skip:]
	}

	// A node restarted without persistence has forgotten the scripts:
	// send those commands again in full, in their order.
	var again []int
	for i, r := range results {
		if re, ok := rueidis.IsRedisErr(r.Error()); ok && re.IsNoScript() {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		cmds = cmds[:0]
		for _, i := range again {
			cmds = append(cmds, batch[i].build(client, true, a.cfg.EpochKey, checkEpoch))
		}
		for k, r := range client.DoMulti(ctx, cmds...) {
			results[again[k]] = r
		}
	}

	now := time.Now()
	for i, r := range results {
		n, counter, err := parseResult(r)
		switch {
		case err == nil && n == 1:
			a.replyCounter(&batch[i], now, counter)
		case err == nil && n == epochMissing:
			done.lostData = true
			a.replyQuarantined(&batch[i], now, now.Add(a.cfg.Quarantine))
		case err == nil:
			a.reply(&batch[i], Taken, now, nil)
		case isTimeout(err):
			done.failed++
			a.reply(&batch[i], Timeout, now, errTimeout)
		default:
			done.failed++
			a.reply(&batch[i], Failed, now, err)
		}
	}
}

// parseResult reads a script's answer: an integer, or for a fenced grant
// {1, counter}.
func parseResult(r rueidis.RedisResult) (n int64, counter uint64, err error) {
	msg, err := r.ToMessage()
	if err != nil {
		return 0, 0, err
	}
	if !msg.IsArray() {
		n, err = msg.AsInt64()
		return n, 0, err
	}
	arr, _ := msg.ToArray()
	if len(arr) != 2 {
		return 0, 0, fmt.Errorf("redlease: script answered %d values, want 2", len(arr))
	}
	if n, err = arr[0].AsInt64(); err != nil {
		return 0, 0, err
	}
	c, err := arr[1].AsInt64()
	return n, uint64(c), err
}

func (a *nodeActor) replyCounter(e *entry, now time.Time, counter uint64) {
	a.system.Root.Send(e.req.ReplyTo, &Vote{
		Node: a.cfg.Index, Round: e.req.Round, Outcome: Granted, RTT: now.Sub(e.queued), Counter: counter,
	})
}

func (a *nodeActor) reply(e *entry, o Outcome, now time.Time, err error) {
	a.system.Root.Send(e.req.ReplyTo, &Vote{
		Node: a.cfg.Index, Round: e.req.Round, Outcome: o, RTT: now.Sub(e.queued), Err: err,
	})
}

// replyQuarantined refuses an acquire while the node sits out, saying
// until when, so the lease can wait for it instead of retrying blindly.
func (a *nodeActor) replyQuarantined(e *entry, now, until time.Time) {
	a.system.Root.Send(e.req.ReplyTo, &Vote{
		Node: a.cfg.Index, Round: e.req.Round, Outcome: Failed, RTT: now.Sub(e.queued), Err: ErrQuarantined, Until: until,
	})
}

func (a *nodeActor) failQueued(err error) {
	now := time.Now()
	for i := range a.queue {
		a.reply(&a.queue[i], Failed, now, err)
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
