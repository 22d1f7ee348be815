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
	EpochKey       string        // key of the epoch marker: the run id of the process that kept its data
	Quarantine     time.Duration // how long a node that lost its data refuses acquires; < 0: never
	HealthInterval time.Duration // between probes while up (a fifth of it while down)
	First          *Info         // Conn's first probe; nil when the node was unreachable
	// UnsafeEviction: a node that may evict lock keys (Info.Evicts) grants
	// all the same.
	UnsafeEviction bool

	Meter Meter // told of each batch's round trip; nil for none
}

// Meter is told of each batch a node actor put on the wire: its round
// trip and how many commands it carried. It is called from the actor's
// sender goroutine and must not block.
type Meter interface {
	RoundTrip(rtt time.Duration, commands int)
}

// Node is a running node actor. Send it *Acquire, *Fence, *Extend and *Release.
type Node struct {
	PID    *actor.PID
	system *actor.ActorSystem
	actor  *nodeActor
}

// Stats is a snapshot of a node actor's work and health; commands per
// batch is how much pipelining saves.
type Stats struct {
	Commands        uint64    // commands answered by a batch on the wire
	Batches         uint64    // DoMulti calls: round trips
	Restarts        uint64    // times the node was seen to have lost its data
	OnWire          int64     // commands in the batch on the wire now
	Queued          int64     // commands waiting for it (in the mailbox too, while a batch is on the wire)
	Down            bool      // failing fast: the last batches and probes failed
	Evicting        bool      // refusing acquires: the node may evict lock keys (ErrEvicting)
	QuarantineUntil time.Time // acquires refused before it; zero: never quarantined
}

// counters are the actor's Stats as it keeps them, for any goroutine to
// read.
type counters struct {
	commands, batches, restarts atomic.Uint64
	onWire, queued              atomic.Int64
	down, evicting              atomic.Bool
	quarantineUntil             atomic.Int64 // Unix nanoseconds; 0: never
}

// Stats returns a snapshot of the node's counters.
func (n *Node) Stats() Stats {
	c := &n.actor.stats
	s := Stats{
		Commands: c.commands.Load(), Batches: c.batches.Load(), Restarts: c.restarts.Load(),
		OnWire: c.onWire.Load(), Queued: c.queued.Load() + int64(n.actor.mailbox.UserMessageCount()),
		Down: c.down.Load(), Evicting: c.evicting.Load(),
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
		work:   make(chan job, 1),
		runs:   make(chan func(), 1),
		idle:   make(chan struct{}),
	}
	a.start(cfg.First)
	go a.sender()
	pid := system.Root.Spawn(actors.PropsWithMailbox(func() actor.Actor { return a }, senderDispatcher{a},
		func(m *actors.Mailbox) { a.mailbox = m }))
	return &Node{PID: pid, system: system, actor: a}
}

// Stop stops the actor (commands still queued are answered with
// ErrStopped), waits for the batch on the wire and closes the client.
func (n *Node) Stop() {
	_ = n.system.Root.StopFuture(n.PID).Wait()
	n.actor.stopOnce.Do(func() { close(n.actor.work) })
	<-n.actor.idle
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
)

// acquires: refused while the node is quarantined.
func (o op) acquires() bool { return o == opAcquire || o == opAcquireFenced }

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
	since     string
	successor string // a release's Release.Successor
	// silent: a release whose Vote went out unanswered by Redis; it is
	// sent again, first, until Redis answers or its key expired.
	silent bool
}

// job is what the sender goroutine puts on the wire: a batch, or a health
// probe.
type job struct {
	batch    []entry
	epoch    string // the marker acquires require ("": none)
	mark     string // write the epoch marker of this run id first
	probe    bool
	prev     Info // the probe's previous connection
	deadline time.Time
}

type nodeActor struct {
	cfg    Config
	system *actor.ActorSystem
	self   *actor.PID
	conn   *Conn
	queue  []entry // waiting for the job on the wire to return
	spare  []entry // the last batch's slice, reused
	busy   bool    // a job is on the wire
	stats  counters
	health health

	ttl      millis       // the sender goroutine's: TTLs as the scripts take them
	script   scriptArgs   // the sender goroutine's: the batch script call it builds
	out      actors.Batch // the sender goroutine's: the votes of the batch it answers
	work     chan job     // to the sender goroutine; holds at most the one job in flight
	runs     chan func()  // the mailbox's runs, to the sender goroutine (senderDispatcher)
	mailbox  *actors.Mailbox
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
			a.enqueue(entry{op: opAcquireFenced, req: &m.Request, ttl: m.TTL, fenceKey: m.FenceKey, since: m.Since})
		} else {
			a.enqueue(entry{op: opAcquire, req: &m.Request, ttl: m.TTL, since: m.Since})
		}
	case *Fence:
		a.enqueue(entry{op: opFence, req: &m.Request, fenceKey: m.FenceKey, token: m.Token})
	case *Queue:
		a.enqueue(entry{op: opQueue, req: &m.Request, ttl: m.TTL, since: m.Since})
	case *Extend:
		a.enqueue(entry{op: opExtend, req: &m.Request, ttl: m.TTL})
	case *Release:
		a.enqueue(entry{op: opRelease, req: &m.Request, ttl: m.TTL, announce: m.Announce, leave: m.Leave,
			successor: m.Successor, since: m.SuccessorSince})
	case *sent:
		a.busy = false
		a.stats.onWire.Store(0)
		switch {
		case m.unchecked: // unsent: first in line again, after a probe
			a.queue = append(m.batch, a.queue...)
		case len(m.retry) > 0: // issued before anything queued now
			a.queue = append(m.retry, a.queue...)
			a.spare = m.batch[:0]
		default:
			a.spare = m.batch[:0]
		}
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
	a.stats.queued.Store(int64(len(a.queue)))
}

func (a *nodeActor) enqueue(e entry) {
	e.queued = e.req.Sent
	if e.queued.IsZero() {
		e.queued = time.Now()
	}
	a.queue = append(a.queue, e)
	a.flush()
}

// flush puts the next job on the wire unless one is already there: a due
// probe first, else what queued, in order. Commands are answered unsent
// when their deadline passed while queued (Timeout), while the node is
// down (Failed, ErrNodeDown) and, for acquires, while it is quarantined.
// A release answered unsent is still sent, silently, as soon as the node
// answers again and while its key may live: a failed attempt's keys must
// not outlive it.
func (a *nodeActor) flush() {
	if a.busy {
		return
	}
	now := time.Now()
	if a.health.probeDue {
		a.health.probeDue = false
		a.busy = true
		a.work <- job{probe: true, prev: a.health.checked, deadline: now.Add(a.probeTimeout())}
		return
	}
	if len(a.queue) == 0 {
		return
	}
	quarantined := a.health.quarantined(now)
	batch := a.spare
	deadline := time.Time{}
	kept, i := 0, 0 // a.queue[:kept]: releases held back while the node is down
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
		case e.op.acquires() && a.health.evicting != nil:
			a.reply(&e, Failed, now, a.health.evicting, nil)
			continue
		}
		if a.health.down {
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
	}
	rest := kept + copy(a.queue[kept:], a.queue[i:])
	clear(a.queue[rest:])
	a.queue = a.queue[:rest]
	a.spare = nil
	if len(batch) == 0 {
		a.spare = batch
		return
	}
	if deadline.IsZero() {
		deadline = now.Add(a.cfg.Timeout)
	}
	j := job{batch: batch, epoch: a.epoch(), deadline: deadline}
	if a.health.epochDue(now) {
		j.mark = a.health.checked.RunID
	}
	a.busy = true
	a.stats.onWire.Store(int64(len(batch)))
	a.work <- j // never blocks: the sender takes it next, not busy before
}

// settle answers e unsent and reports whether it stays queued: a release
// does, silently, since its key may still be on the node; but not the
// successor it was to queue, who may be done waiting by the time it goes.
func (a *nodeActor) settle(e *entry, o Outcome, now time.Time, err error) bool {
	a.reply(e, o, now, err, nil)
	e.silent, e.successor = true, ""
	return e.op == opRelease
}

// sender is the node's long-lived goroutine: it runs the actor's mailbox
// and puts the jobs the actor makes on the wire. (A goroutine per batch
// would grow a fresh stack through rueidis every time.) While a job is on
// the wire, what comes for the actor waits in its mailbox, as it would
// wait in its queue: the next batch takes it all once the job is back.
// A command reaches the wire one goroutine hand-off after it was sent,
// not two (a dispatcher worker, then this goroutine).
func (a *nodeActor) sender() {
	defer close(a.idle)
	for {
		select {
		case j, ok := <-a.work:
			if !ok {
				return
			}
			if j.probe {
				a.probe(j)
			} else {
				a.run(j)
			}
		case run := <-a.runs:
			run()
		}
	}
}

// senderDispatcher runs the node actor's mailbox on its sender goroutine.
type senderDispatcher struct{ a *nodeActor }

// Schedule hands the mailbox's run to the sender goroutine. The mailbox
// schedules one run at a time, so the channel has room; after the sender
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
func (a *nodeActor) run(j job) {
	done := &sent{size: len(j.batch)}
	client, err := a.conn.get()
	if err == nil {
		err = a.send(client, j, done)
	}
	switch {
	case errors.Is(err, errUnchecked):
		done.unchecked = true
		done.batch = j.batch
	case err != nil:
		a.unanswered(j.batch, time.Now(), err, done)
		fallthrough
	default:
		clear(j.batch)
		done.batch = j.batch[:0]
	}
	a.out.Flush()
	a.system.Root.Send(a.self, done)
}

// send puts one batch on the wire. It fails with errUnchecked, having sent
// nothing, when rueidis would have had to redial.
func (a *nodeActor) send(client rueidis.Client, j job, done *sent) error {
	ctx, cancel := context.WithDeadline(context.Background(), j.deadline)
	defer cancel()
	batch := j.batch
	cmds := make(rueidis.Commands, 0, len(batch)+1)
	if j.mark != "" {
		// First, so every acquire after it sees the marker.
		cmds = append(cmds, markCmd(client, a.cfg.EpochKey, j.mark))
	}
	skip := len(cmds)
	for c := range chunks(len(batch)) {
		cmds = append(cmds, a.script.build(client, chunkOf(batch, c), false, a.cfg.EpochKey, j.epoch, &a.ttl))
	}
	start := time.Now()
	results := client.DoMulti(ctx, cmds...)
	if err := results[0].Error(); errors.Is(err, errUnchecked) {
		return err
	}
	a.stats.batches.Add(1)
	a.stats.commands.Add(uint64(len(batch)))
	if a.cfg.Meter != nil {
		a.cfg.Meter.RoundTrip(time.Since(start), len(batch))
	}
	if skip > 0 {
		n, _ := results[0].AsInt64()
		done.marked = n == 1
		results = results[skip:]
	}

	// A script the node's cache had lost (SCRIPT FLUSH, a restart,
	// eviction) failed while what followed it ran: send it and everything
	// after it again, in full, so that the commands take effect in the
	// order they were issued. Every command is idempotent, and the answers
	// of the second run are the ones that count.
	if i := firstNoScript(results); i >= 0 {
		cmds = cmds[:0]
		for c := i; c < chunks(len(batch)); c++ {
			cmds = append(cmds, a.script.build(client, chunkOf(batch, c), true, a.cfg.EpochKey, j.epoch, &a.ttl))
		}
		copy(results[i:], client.DoMulti(ctx, cmds...))
	}

	now := time.Now()
	for c, r := range results {
		chunk := chunkOf(batch, c)
		replies, err := r.ToArray()
		if err == nil && len(replies) != len(chunk) {
			err = fmt.Errorf("redlease: the batch script answered %d replies for %d commands", len(replies), len(chunk))
		}
		if err == nil {
			for i := range chunk {
				a.answerReply(&chunk[i], &replies[i], now, done)
			}
			continue
		}
		if _, answered := rueidis.IsRedisErr(err); !answered {
			a.unanswered(chunk, now, err, done)
			continue
		}
		for i := range chunk { // the call failed as a whole: no command has its own answer
			if !chunk[i].silent {
				a.reply(&chunk[i], Failed, now, err, &a.out)
			}
		}
	}
	return nil
}

// chunks is how many batch script calls carry n commands.
func chunks(n int) int { return (n + maxScriptOps - 1) / maxScriptOps }

// chunkOf is the commands of batch that script call c carries.
func chunkOf(batch []entry, c int) []entry {
	return batch[c*maxScriptOps : min((c+1)*maxScriptOps, len(batch))]
}

// answerReply answers e with its reply in the batch script's answer.
func (a *nodeActor) answerReply(e *entry, reply *rueidis.RedisMessage, now time.Time, done *sent) {
	n, counter, holder, err := parseReply(reply)
	switch {
	case err != nil: // an error reply: the node is up, the command did nothing
		if !e.silent {
			a.reply(e, Failed, now, err, &a.out)
		}
	case e.silent:
	case n == 1:
		a.replyCounter(e, now, counter, &a.out)
	case n == epochMissing:
		done.lostData = true
		a.replyQuarantined(e, now, now.Add(a.cfg.Quarantine), &a.out)
	case holder != "": // counter: the key's PTTL
		v := Vote{Outcome: Taken, RTT: now.Sub(e.queued), Holder: holder}
		if pttl := int64(counter); pttl >= 0 {
			v.Until = now.Add(time.Duration(pttl) * time.Millisecond)
		}
		a.answer(e, v, &a.out)
	default:
		a.reply(e, Taken, now, nil, &a.out)
	}
}

// unanswered answers entries that got no answer from Redis, and keeps their
// releases to send again.
func (a *nodeActor) unanswered(batch []entry, now time.Time, err error, done *sent) {
	o := Failed
	if isTimeout(err) {
		o, err = Timeout, errTimeout
	}
	for i := range batch {
		e := batch[i]
		done.failed++
		if !e.silent {
			a.reply(&e, o, now, err, &a.out)
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
// integer, {1, counter} for a fenced grant, or {0, PTTL, holder} for an
// acquire refused (counter then carries the PTTL, which may be negative);
// or an error reply.
func parseReply(msg *rueidis.RedisMessage) (n int64, counter uint64, holder string, err error) {
	if err = msg.Error(); err != nil {
		return 0, 0, "", err
	}
	if !msg.IsArray() {
		n, err = msg.AsInt64()
		return n, 0, "", err
	}
	arr, _ := msg.ToArray()
	if len(arr) < 2 || len(arr) > 3 {
		return 0, 0, "", fmt.Errorf("redlease: script answered %d values, want 2 or 3", len(arr))
	}
	if n, err = arr[0].AsInt64(); err != nil {
		return 0, 0, "", err
	}
	c, err := arr[1].AsInt64()
	if err == nil && len(arr) == 3 {
		holder, err = arr[2].ToString()
	}
	return n, uint64(c), holder, err
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
