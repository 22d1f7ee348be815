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

// redialEvery limits how often a node that could not be reached is dialled.
const redialEvery = time.Second

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
}

// Node is a running node actor. Send it *Acquire, *Extend and *Release.
type Node struct {
	PID    *actor.PID
	system *actor.ActorSystem
	actor  *nodeActor
}

// Stats counts a node actor's work. Read it with atomic loads through
// Node.Stats; commands per batch is how much pipelining saves.
type Stats struct {
	Commands atomic.Uint64 // commands answered by a batch on the wire
	Batches  atomic.Uint64 // DoMulti calls: round trips
}

// Stats returns the node's live counters.
func (n *Node) Stats() *Stats { return &n.actor.stats }

// Spawn starts the node actor for cfg.
func Spawn(system *actor.ActorSystem, cfg Config) *Node {
	if cfg.Logger == nil {
		cfg.Logger = actors.Discard
	}
	a := &nodeActor{
		cfg:    cfg,
		system: system,
		conn:   &conn{opt: cfg.Options, client: cfg.Client},
		work:   make(chan []entry, 1),
		idle:   make(chan struct{}),
	}
	props := actor.PropsFromProducer(func() actor.Actor { return a })
	if cfg.Dispatcher != nil {
		props = actor.PropsFromProducer(func() actor.Actor { return a }, actor.WithDispatcher(cfg.Dispatcher))
	}
	a.self = system.Root.Spawn(props)
	go a.sender()
	return &Node{PID: a.self, system: system, actor: a}
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
)

// entry is one queued command.
type entry struct {
	op     op
	req    *Request
	ttl    time.Duration
	queued time.Time
}

type nodeActor struct {
	cfg    Config
	system *actor.ActorSystem
	self   *actor.PID
	conn   *conn
	queue  []entry // waiting for the batch on the wire to return
	spare  []entry // the last batch's slice, reused
	busy   bool    // a batch is on the wire
	stats  Stats

	work     chan []entry  // to the sender goroutine; holds at most the one batch in flight
	idle     chan struct{} // closed when the sender goroutine returned
	stopOnce sync.Once
}

func (a *nodeActor) Receive(ctx actor.Context) {
	defer actors.Recover(func(reason any) {
		a.cfg.Logger.Error("redlease: node actor panicked", "node", a.cfg.Addr, "panic", reason)
		a.failQueued(fmt.Errorf("redlease: node actor panicked: %v", reason))
		ctx.Stop(ctx.Self())
	})
	switch m := ctx.Message().(type) {
	case *Acquire:
		a.enqueue(opAcquire, &m.Request, m.TTL)
	case *Extend:
		a.enqueue(opExtend, &m.Request, m.TTL)
	case *Release:
		a.enqueue(opRelease, &m.Request, 0)
	case *sent:
		a.busy = false
		a.spare = m.batch[:0]
		a.flush()
	case *actor.Stopping:
		a.failQueued(ErrStopped)
	}
}

func (a *nodeActor) enqueue(o op, r *Request, ttl time.Duration) {
	a.queue = append(a.queue, entry{op: o, req: r, ttl: ttl, queued: time.Now()})
	a.flush()
}

// flush puts what queued on the wire unless a batch is already there.
// Commands whose deadline passed while queued are answered Timeout unsent.
func (a *nodeActor) flush() {
	if a.busy || len(a.queue) == 0 {
		return
	}
	now := time.Now()
	batch := a.spare
	n := 0
	for _, e := range a.queue {
		if now.Sub(e.queued) >= a.cfg.Timeout {
			a.reply(&e, Timeout, now, errTimeout)
			n++
			continue
		}
		if len(batch) == maxBatch {
			break
		}
		batch = append(batch, e)
		n++
	}
	rest := copy(a.queue, a.queue[n:])
	clear(a.queue[rest:])
	a.queue = a.queue[:rest]
	a.spare = nil
	if len(batch) == 0 {
		a.spare = batch
		return
	}
	a.busy = true
	a.work <- batch // never blocks: the sender is idle while not busy
}

// sender is the node's long-lived goroutine that puts batches on the wire,
// off the mailbox. (A goroutine per batch would grow a fresh stack through
// rueidis every time.)
func (a *nodeActor) sender() {
	defer close(a.idle)
	for batch := range a.work {
		a.run(batch, batch[0].queued.Add(a.cfg.Timeout))
	}
}

// run sends one batch, answers every entry of it and reports back with
// *sent.
func (a *nodeActor) run(batch []entry, deadline time.Time) {
	client, err := a.conn.get()
	if err != nil {
		now := time.Now()
		for i := range batch {
			a.reply(&batch[i], Failed, now, err)
		}
	} else {
		a.send(client, batch, deadline)
	}
	clear(batch)
	a.system.Root.Send(a.self, &sent{batch: batch[:0]})
}

func (a *nodeActor) send(client rueidis.Client, batch []entry, deadline time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	cmds := make(rueidis.Commands, len(batch))
	for i := range batch {
		cmds[i] = batch[i].build(client, false)
	}
	results := client.DoMulti(ctx, cmds...)
	a.stats.Batches.Add(1)
	a.stats.Commands.Add(uint64(len(cmds)))

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
			cmds = append(cmds, batch[i].build(client, true))
		}
		for j, r := range client.DoMulti(ctx, cmds...) {
			results[again[j]] = r
		}
	}

	now := time.Now()
	for i, r := range results {
		n, err := r.AsInt64()
		switch {
		case err == nil && n == 1:
			a.reply(&batch[i], Granted, now, nil)
		case err == nil:
			a.reply(&batch[i], Taken, now, nil)
		case isTimeout(err):
			a.reply(&batch[i], Timeout, now, errTimeout)
		default:
			a.reply(&batch[i], Failed, now, err)
		}
	}
}

func (a *nodeActor) reply(e *entry, o Outcome, now time.Time, err error) {
	a.system.Root.Send(e.req.ReplyTo, &Vote{
		Node: a.cfg.Index, Round: e.req.Round, Outcome: o, RTT: now.Sub(e.queued), Err: err,
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

// conn is a node's client, dialled lazily when the node was down at start.
// Only batch goroutines call get, one at a time per node.
type conn struct {
	opt rueidis.ClientOption

	mu      sync.Mutex
	client  rueidis.Client
	closed  bool
	err     error     // the last dial error
	retryAt time.Time // no dial before this
}

func (c *conn) get() (rueidis.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return nil, ErrStopped
	case c.client != nil:
		return c.client, nil
	case time.Now().Before(c.retryAt):
		return nil, c.err
	}
	client, err := rueidis.NewClient(c.opt)
	if err != nil {
		c.err = fmt.Errorf("redlease: connect: %w", err)
		c.retryAt = time.Now().Add(redialEvery)
		return nil, c.err
	}
	c.client = client
	return client, nil
}

func (c *conn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.client != nil {
		c.client.Close()
		c.client = nil
	}
}
