package engine

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/redlease/redlease/actors"
	"github.com/redlease/redlease/internal/errtext"
	"github.com/redlease/redlease/lease"
	"github.com/redlease/redlease/node"
)

// Engine takes leases on resources over a set of independent Redis masters.
// It is safe for concurrent use. Close it to release what it holds.
type Engine struct {
	cfg       Config
	system    *actor.ActorSystem
	ownSystem bool
	dispatch  *actors.Dispatcher
	nodes     []*node.Node
	pids      []*actor.PID
	leases    *lease.Pool
	lines     *lines // Acquire's callers by resource, first come first served
	tel       *telemetry

	hub         *actor.PID // event fan-out to subscribers
	subscribers atomic.Int32
	dropped     atomic.Uint64 // events not delivered

	// closed: Close was called. Set under mu, so a check under mu orders
	// against Close; read without it as a fast first check.
	closed  atomic.Bool
	closing chan struct{} // closed with closed: callers waiting in a line give up
	mu      sync.Mutex
	live    map[*lease.State]lease.Ref // leases not yet done
	nextSub uint64
	paced   pacer // Stats and Subscribe
}

// New validates cfg, connects to its nodes and starts the engine's actors.
// An invalid cfg yields an error naming each bad field and value. New
// fails when fewer than a quorum of nodes can be reached, when a node is a
// read-only replica or a master of a Redis Cluster given as host:port
// (ErrClusterMaster), or when two addresses reach the same server; nodes it
// cannot reach (at most a minority) are redialled in the background and
// vote Failed meanwhile. On error nothing is left running.
func New(cfg Config) (*Engine, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = actors.Discard
	}
	reached, err := connect(&cfg)
	if err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, system: cfg.ActorSystem, live: make(map[*lease.State]lease.Ref), dispatch: actors.NewDispatcher(),
		closing: make(chan struct{})}
	if e.system == nil {
		e.system = actors.NewSystem(cfg.Logger)
		e.ownSystem = true
	}
	e.tel = newTelemetry(e)
	e.lines = newLines(e, cfg.engineChannel())
	h := &hub{subs: make(map[uint64]chan Event), dropped: &e.dropped}
	e.hub = e.system.Root.Spawn(actors.Props(func() actor.Actor { return h }, e.dispatch))
	horizon := &node.Horizon{}
	for i, addr := range cfg.Nodes {
		r := reached[i]
		ncfg := node.Config{
			Index: i, Addr: addr, Conn: r.conn,
			Timeout: cfg.NodeTimeout, Logger: cfg.Logger,
			EpochKey: cfg.epochKey(), Quarantine: cfg.RestartQuarantine, HealthInterval: cfg.HealthInterval,
			Horizon: horizon, First: r.info, UnsafeEviction: cfg.UnsafeEviction, Meter: e.tel.forNode(addr),
			Channel:  e.lines.channel,
			OnHealth: func(h node.HealthChange) { e.nodeEvent(i, h) },
			// On one node a hand-off waits for that node alone: a second
			// batch on its wire saves it the wait (see node.maxWire).
			Overlap: len(cfg.Nodes) == 1,
		}
		var n *node.Node
		if r.conn == nil {
			n = node.SpawnCluster(e.system, ncfg, cfg.clientOption(addr), r.view)
		} else {
			n = node.Spawn(e.system, ncfg)
		}
		e.nodes = append(e.nodes, n)
		e.pids = append(e.pids, n.PID)
	}
	e.lines.watch(e.nodes)
	e.leases = lease.NewPool(e.system, e.dispatch, idleLeaseActors, lease.Shared{Nodes: e.pids, Addrs: cfg.Nodes,
		DriftFactor: cfg.DriftFactor, EventBuffer: cfg.EventBuffer, Logger: cfg.Logger, Owner: (*leaseOwner)(e), Clock: cfg.clock})
	e.tel.observe(e)
	return e, nil
}

// connect dials and probes every node at once. It fails, closing what it
// opened, when fewer than a quorum answer, when a node is a read-only
// replica or a cluster's master (ErrClusterMaster), when a node may evict lock keys (unless UnsafeEviction), or when
// two addresses reach the same server (two votes from one server would
// break the quorum). A Redis Cluster's masters are probed and judged so
// too (a master named again as a node of its own votes twice); the
// cluster counts as answering when one of them answered and none refused
// a command the engine needs. Nodes that did not answer get no Info (a
// cluster no view); their node actors probe them until they do.
func connect(cfg *Config) ([]reach, error) {
	reached := probeAll(context.Background(), cfg)
	closeAll := func() {
		for _, r := range reached {
			r.close()
		}
	}
	n := len(cfg.Nodes)
	seen := make(map[string]int, n)
	// judge refuses a master (a node's, or a cluster's) that must not
	// vote.
	judge := func(i int, info *node.Info) error {
		if info.Replica {
			return fmt.Errorf("redlease: config: Nodes[%d] %q is a read-only replica: Redlock needs independent masters", i, cfg.Nodes[i])
		}
		if info.Evicts != "" && !cfg.UnsafeEviction {
			return fmt.Errorf("redlease: config: Nodes[%d] %q has maxmemory set with maxmemory-policy %s: it would evict lock keys when its memory fills and grant held resources again; set maxmemory-policy to noeviction (or Config.UnsafeEviction): %w",
				i, cfg.Nodes[i], info.Evicts, ErrEvicting)
		}
		if j, dup := seen[info.RunID]; dup && j != i {
			return sameServer(cfg, j, i, info.RunID)
		}
		seen[info.RunID] = i
		return nil
	}
	up := 0
	var errs []error
	for i, r := range reached {
		if r.err == nil && r.view != nil {
			var masters []node.Info
			masters, r.err = probeMasters(cfg, cfg.Nodes[i], r.view)
			for _, info := range masters {
				if err := judge(i, &info); err != nil {
					closeAll()
					return nil, err
				}
			}
		}
		if errors.Is(r.err, ErrClusterMaster) {
			closeAll()
			return nil, fmt.Errorf("redlease: config: Nodes[%d] %q: %w", i, cfg.Nodes[i], r.err)
		}
		if r.err != nil {
			cfg.Logger.Warn("redlease: node unreachable, will redial", "node", cfg.Nodes[i], "err", r.err)
			errs = append(errs, r.err)
			continue
		}
		up++
		if r.info == nil {
			continue // a cluster: judged by its masters above
		}
		if err := judge(i, r.info); err != nil {
			closeAll()
			return nil, err
		}
	}
	if q := lease.Quorum(n); up < q {
		closeAll()
		return nil, fmt.Errorf("redlease: %d of %d nodes reachable, %d needed: %w", up, n, q, errors.Join(errs...))
	}
	return reached, nil
}

// probeMasters probes the masters of a Redis Cluster (view, of the node
// addr) as connect probes standalone nodes, and returns what each one
// that answered said. It fails, as a standalone node that does not
// answer, when none answered, or when one refused a command the engine
// needs (the user's ACL, which no redial mends); a master that is down is
// its shard actor's to meet.
func probeMasters(cfg *Config, addr string, view node.ClusterView) ([]node.Info, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ConnectTimeout)
	defer cancel()
	var infos []node.Info
	var errs []error
	for _, p := range node.ProbeCluster(ctx, cfg.clientOption(addr), cfg.epochKey(), view) {
		p.Conn.Close()
		switch {
		case p.Err == nil:
			infos = append(infos, p.Info)
		case node.Denied(p.Err):
			return nil, errtext.Errorf("node %s: master %s: %w", addr, p.Addr, p.Err)
		default:
			errs = append(errs, errtext.Errorf("node %s: master %s: %w", addr, p.Addr, p.Err))
		}
	}
	if len(infos) == 0 {
		return nil, errors.Join(errs...)
	}
	return infos, nil
}

// reach is what probeAll learnt of one node: a master's (or a master
// set's) connection and probe, or a Redis Cluster's view.
type reach struct {
	conn *node.Conn       // nil for a cluster
	info *node.Info       // the probe; nil for a cluster, or when it failed
	view node.ClusterView // a cluster's shards
	err  error            // why the node did not answer
}

func (r reach) close() {
	if r.conn != nil {
		r.conn.Close()
	}
}

// probeAll makes a connection per node of cfg and probes them all at once,
// each within ConnectTimeout and ctx; a Redis Cluster it asks for its
// shards.
func probeAll(ctx context.Context, cfg *Config) []reach {
	out := make([]reach, len(cfg.Nodes))
	var wg sync.WaitGroup
	for i, addr := range cfg.Nodes {
		r := &out[i]
		opt := cfg.clientOption(addr)
		cluster := isCluster(addr)
		if !cluster {
			r.conn = node.NewConn(opt)
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
			defer cancel()
			if cluster {
				r.view, r.err = node.AskCluster(ctx, opt)
			} else {
				var info node.Info
				if info, r.err = r.conn.Probe(ctx, cfg.epochKey(), node.Info{}); r.err == nil {
					r.info = &info
				}
				if info.Cluster || node.SlotRefused(r.err) {
					r.info = nil
					r.err = fmt.Errorf("%w: name the cluster as %s%s[,host:port...]", ErrClusterMaster, node.ClusterScheme, addr)
				}
			}
			if r.err != nil {
				r.err = errtext.Errorf("node %s: %w", addr, r.err)
			}
		})
	}
	wg.Wait()
	return out
}

// isCluster reports whether a valid entry of Config.Nodes is a Redis
// Cluster.
func isCluster(addr string) bool {
	t, _ := node.ParseTarget(addr)
	return len(t.Cluster) > 0
}

// MarkNew tells redlease that the nodes of cfg are new: none of them holds
// a lock key that a lease still relies on (a new deployment, or nodes an
// operator has emptied on purpose). It writes each node's epoch marker for
// its dataset's lineage, so that engines use the node at once instead of
// sitting out a quarantine of RestartQuarantine from when they first see
// it.
//
// A node that lost the keys of leases still held (restarted without
// persistence, or from a snapshot) is exactly what the quarantine protects
// against, and looks as empty as a new one. So MarkNew marks nothing when
// CheckNew says why not. Otherwise it marks every node it reaches and
// returns an error naming each one it could not. It uses cfg's Nodes,
// KeyPrefix, Client and ConnectTimeout.
func MarkNew(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	if err := checkNew(ctx, &cfg); err != nil {
		return err
	}
	reached := probeAll(ctx, &cfg)
	if _, err := twice(&cfg, reached); err != nil {
		for _, r := range reached {
			r.close()
		}
		return fmt.Errorf("redlease: mark new nodes: %w", err)
	}
	errs := make([]error, len(reached))
	for i, r := range reached {
		errs[i] = r.err
		if r.err == nil {
			errs[i] = markNew(ctx, &cfg, cfg.Nodes[i], r)
		}
		r.close()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("redlease: mark new nodes: %w", err)
	}
	return nil
}

// sameServer is the refusal of Nodes[j] and Nodes[i], which reach one
// server (run id).
func sameServer(cfg *Config, j, i int, runID string) error {
	return fmt.Errorf("redlease: config: Nodes[%d] %q and Nodes[%d] %q are the same server (run_id %s): one server must not vote twice",
		j, cfg.Nodes[j], i, cfg.Nodes[i], runID)
}

// twice is New's refusal of two entries of Nodes that probeAll found to
// reach one server, for MarkNew and InspectNodes (New also judges a
// cluster's masters so): the entry named second, and the error.
func twice(cfg *Config, reached []reach) (int, error) {
	seen := make(map[string]int, len(reached))
	for i, r := range reached {
		if r.info == nil {
			continue
		}
		if j, dup := seen[r.info.RunID]; dup {
			return i, sameServer(cfg, j, i, r.info.RunID)
		}
		seen[r.info.RunID] = i
	}
	return -1, nil
}

// markNew writes the epoch marker of one node that probeAll reached: on
// a Redis Cluster, in every slot of every master.
func markNew(ctx context.Context, cfg *Config, addr string, r reach) error {
	checkEvicted := !cfg.UnsafeEviction
	if r.conn != nil {
		ok, err := r.conn.Mark(ctx, cfg.epochKey(), *r.info, checkEvicted)
		if err == nil && !ok {
			err = errors.New("its data changed while being marked (a restart, a flush, an eviction): run it again")
		}
		if err != nil {
			return errtext.Errorf("node %s: %w", addr, err)
		}
		return nil
	}
	var errs []error
	for _, p := range node.ProbeCluster(ctx, cfg.clientOption(addr), cfg.epochKey(), r.view) {
		err := p.Err
		if err == nil {
			var ok bool
			ok, err = p.Conn.MarkSlots(ctx, cfg.epochKey(), p.Slots, p.Info, checkEvicted)
			if err == nil && !ok {
				err = errors.New("its data changed while being marked (a restart, a flush, an eviction): run it again")
			}
		}
		p.Conn.Close()
		if err != nil {
			errs = append(errs, errtext.Errorf("node %s: master %s: %w", addr, p.Addr, err))
		}
	}
	return errors.Join(errs...)
}

// CheckNew says why MarkNew would mark nothing now: an error matching
// ErrLiveLocks when a node of cfg holds a lock key (leases may be live,
// and any node may have lost their keys), or naming a node whose keys
// could not be listed; nil when it would go ahead.
func CheckNew(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	return checkNew(ctx, &cfg)
}

func checkNew(ctx context.Context, cfg *Config) error {
	locks, err := InspectLocks(ctx, *cfg, "*")
	if len(locks) > 0 { // and what could not be read, if anything
		err = errtext.Errorf("%w (%d resources, %q first)", ErrLiveLocks, len(locks), locks[0].Resource)
		for _, l := range locks {
			for _, k := range l.Keys {
				if k.Err != nil {
					err = errtext.Errorf("%w; node %s: %w", err, k.Node, k.Err)
				}
			}
		}
	}
	if err != nil {
		return errtext.Errorf("redlease: mark new nodes: nothing marked: %w", err)
	}
	return nil
}

// MaxResourceLen bounds a resource name, in bytes: every command to every
// node carries it. Any bytes are allowed, braces and binary included.
const MaxResourceLen = 8 << 10

// Acquire takes the lease on resource, waiting until it is held, ctx
// ends, or Config.RetryAttempts rounds failed. ctx bounds the acquiring
// only: the lease outlives it by design, until released, lost or expired
// (Lease.Context ends with the lease; Lease.WithContext with either).
//
// Callers of Acquire for one resource on one engine queue first come,
// first served, and only the first runs rounds on the nodes; the next
// starts when its lease ends (or its acquire fails), and a caller whose
// ctx ends leaves the queue at once. When a round finds another owner
// holding the resource on a quorum, Acquire does not poll: it waits for
// that owner's release, which every node announces, naming the next
// waiter in the order the callers of every engine came (and mostly
// granting it the key at once), or for the owner's keys to expire, as the
// refusing nodes said they would. These rounds do not count against
// RetryAttempts: ctx bounds the wait. A split vote draws a random delay
// (also uncounted); other failed rounds (nodes down) are retried with
// randomized backoff, and when no node can announce releases (a server
// that denies SUBSCRIBE), the backoff bounds the wait for one too. When
// only nodes in restart quarantine kept a round from a quorum, the next
// round waits until enough of them are back (one attempt per wait, not a
// burst of doomed ones), or fails at once if that is after ctx's deadline.
// A failure matches ErrNotAcquired, is an *AcquireError with each node's
// outcome (a quarantined node's says until when it sits out), and matches
// ctx's error when ctx ended it. When it fails, the attempt's keys have
// been deleted from every node that answered, except when ctx ended: then
// it returns at once, without waiting for a slow or stalled node, and the
// deletes, already handed to the node actors, go on in the background
// (Close waits for them).
func (e *Engine) Acquire(ctx context.Context, resource string, opts ...Option) (*Lease, error) {
	return e.acquire(ctx, resource, e.cfg.RetryAttempts, opts)
}

// TryAcquire is Acquire with a single round: it fails at once when the
// resource is held elsewhere. When this engine holds the resource, or a
// caller of Acquire waits for it here, it fails without a round (an
// *AcquireError with no node outcomes): it never queues behind them.
func (e *Engine) TryAcquire(ctx context.Context, resource string, opts ...Option) (*Lease, error) {
	return e.acquire(ctx, resource, 1, opts)
}

func (e *Engine) acquire(ctx context.Context, resource string, attempts int, opts []Option) (*Lease, error) {
	var start time.Time
	if e.tel.acquireDuration.Enabled(ctx) { // a clock read costs ~100ns on some VMs
		start = time.Now()
	}
	name := "redlease.Acquire"
	if attempts == 1 {
		name = "redlease.TryAcquire"
	}
	spanCtx, span := e.tel.start(ctx, name)
	l, r, err := e.acquireLease(ctx, resource, attempts, opts, span.IsRecording(), "")
	e.tel.acquired(spanCtx, span, attempts == 1, start, r, resource, l, err)
	return l, err
}

// acquireLease is Acquire, or TryAcquire with one attempt, or, given the
// value of a lease held already (resume), Resume, whose one round is a
// check; it also returns the lease actor's Result, with the winning
// round's votes if asked.
func (e *Engine) acquireLease(ctx context.Context, resource string, attempts int, opts []Option, winningVotes bool, resume string) (*Lease, lease.Result, error) {
	if e.closed.Load() {
		return nil, lease.Result{}, ErrClosed
	}
	o, err := e.options(opts)
	switch {
	case err != nil:
		return nil, lease.Result{}, err
	case resume != "" && o.meta != "":
		return nil, lease.Result{}, errMetaAtResume
	case resume != "" && len(resume) > maxValueLen:
		return nil, lease.Result{}, fmt.Errorf("redlease: Resume's value is %d bytes long: no Lease.Value is longer than %d", len(resume), maxValueLen)
	}
	if resource == "" {
		return nil, lease.Result{}, errors.New("redlease: resource must not be empty")
	}
	if len(resource) > MaxResourceLen {
		return nil, lease.Result{}, fmt.Errorf("redlease: resource is %d bytes long, at most %d", len(resource), MaxResourceLen)
	}
	if err := ctx.Err(); err != nil {
		return nil, lease.Result{}, &AcquireError{Resource: resource, Cause: contextError(ctx), Nodes: e.nodeOutcomes(nil, nil), resumed: resume != ""}
	}
	value := resume
	if value == "" {
		value = ownerValue(o.meta)
	}
	key, grants := node.LockKeys(e.cfg.KeyPrefix, resource)
	cfg := lease.Config{
		Resource: resource, Key: key, Grants: grants, Value: value,
		TTL: o.ttl, NodeTimeout: e.cfg.NodeTimeout,
		Attempts: attempts, MaxHold: o.maxHold, AutoExtend: o.autoExtend,
	}
	if attempts > 1 {
		cfg.NewBackOff = o.newBackOff
		if o.attempts > 0 { // WithRetryAttempts; a TryAcquire makes one round whatever it says
			cfg.Attempts = o.attempts
		}
	}
	if dl, ok := ctx.Deadline(); ok {
		cfg.Deadline = dl
	}
	if o.fencing && resume == "" {
		cfg.FenceKey = fenceKey(key)
	}
	lt := new(leaseTurn)
	t := &lt.turn
	e.lines.join(t, key, cfg.Value, o.ttl, attempts == 1)
	if err := t.await(ctx, e.closing); errors.Is(err, ErrClosed) {
		return nil, lease.Result{}, err
	} else if err != nil {
		return nil, lease.Result{}, &AcquireError{Resource: resource, Cause: err, Nodes: e.nodeOutcomes(nil, nil), resumed: resume != ""}
	}
	if t.refused || t.crashed {
		cause := errHeldHere
		if t.crashed {
			cause = errCrashed
		}
		return nil, lease.Result{}, &AcquireError{Resource: resource, Cause: cause, resumed: resume != ""}
	}
	cfg.Line = t
	if attempts > 1 {
		cfg.Value = t.value // a kept place comes with its own
		cfg.WaitFirst, cfg.Queued = t.waitFirst, t.queued
		// Queued on the nodes by when it joined the line, not when it
		// became the head: callers of every engine go in the order
		// they came, not engines in turn.
		cfg.Since, cfg.QueueAtOnce = t.since, t.contended
	}
	if resume != "" {
		// Held at the head of the line, as an acquire that won.
		r, err := e.read(ctx, resource, value)
		if err == nil {
			err = r.Resumes(time.Now(), o.ttl)
		}
		if err != nil {
			t.Done(false)
			if errors.Is(err, ErrClosed) {
				return nil, lease.Result{}, err
			}
			return nil, lease.Result{}, &AcquireError{Resource: resource, Attempts: 1, Nodes: e.nodeOutcomes(r.Votes, err), Cause: err,
				HeldBy: lease.HeldBy(r.Votes), resumed: true}
		}
		cfg.Resumed = &lease.Resumed{Start: r.Start, Until: r.Until, Token: o.token}
	}

	reply := acquireReplies.get()
	cfg.Reply, cfg.WinningVotes = reply, winningVotes
	e.mu.Lock()
	if e.closed.Load() {
		e.mu.Unlock()
		acquireReplies.put(reply)
		t.Done(false)
		return nil, lease.Result{}, ErrClosed
	}
	// Started under the lock so Close sees every lease, and before its
	// owner's Done can run.
	ref, st, run := e.leases.Start(cfg)
	e.live[st] = ref
	e.mu.Unlock()
	// Before the lease runs, when run: its Line calls then reach the
	// resource actor after. (Otherwise the actor was busy, and runs the
	// lease meanwhile: a Done or a Wait may come first, which the resource
	// actor takes as from a caller with no lease actor yet.)
	t.run(st, ref)
	if run {
		ref.Run()
	}

	// The actor answers before it is done with the lease, however that
	// comes about (a crash or a stop included): the reply is all there
	// is to wait for, and to a cancelled ctx the actor answers at once.
	// (Waiting on Stopped too would make that channel for every lease;
	// context.AfterFunc would cost three allocations a call, and a
	// select costs more than a receive when ctx cannot end.)
	var r lease.Result
	if done := ctx.Done(); done == nil {
		r = <-reply
	} else {
		select {
		case r = <-reply:
		case <-done:
			ref.Post(&lease.Cancel{State: st, Cause: contextError(ctx)})
			r = <-reply
		}
	}
	acquireReplies.put(reply)
	if r.Err != nil {
		return nil, r, &AcquireError{Resource: resource, Attempts: r.Attempts, Nodes: e.nodeOutcomes(r.Votes, r.Err), Cause: r.Err,
			HeldBy: lease.HeldBy(r.Votes), resumed: resume != ""}
	}
	t.held.Store(true)
	lt.Lease = Lease{e: e, ref: ref, state: st, resource: resource, value: cfg.Value}
	return &lt.Lease, r, nil
}

// leaseTurn is an acquire's Lease, made with its caller's turn in the
// resource's line: one allocation for both.
type leaseTurn struct {
	Lease
	turn turn
}

// contextError is ctx's error, joined with its cause when that differs, so
// both errors.Is(err, context.Canceled) and the cause match.
func contextError(ctx context.Context) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause == nil || errors.Is(cause, err) {
		return err
	}
	return errors.Join(err, cause)
}

// Stats is a snapshot of an engine's counters.
type Stats struct {
	Leases        int    // lease actors running: acquiring, held, or finishing a release or a cleanup
	EventsDropped uint64 // events a full lease or subscription channel did not take
	// Waiters counts, by resource, the Acquire calls not yet answered:
	// queued behind a local caller, or running rounds and waiting for the
	// holder's release. Resources nobody waits for are absent.
	Waiters map[string]int
	Wakeups Wakeups // rounds that waiting Acquire calls started, by cause
	// Nodes are in the order of Config.Nodes, one per vote; a Redis
	// Cluster node's shards are in its entry's Shards.
	Nodes []NodeStats
}

// NodeStats counts one node's traffic and tells its health. A Redis
// Cluster node's entry sums its Shards: Down when every shard is,
// QuarantinedUntil the latest of theirs (some shards may serve
// meanwhile: Shards says which).
type NodeStats struct {
	// Addr is the node's address as in Config.Nodes; for a shard, its
	// master's host:port.
	Addr       string
	Commands   uint64 // commands sent
	RoundTrips uint64 // pipelined batches they went out in
	// Pending: commands given to the node and not yet answered, queued
	// or on the wire. An acquire or a release returns once a quorum
	// answered: the other nodes' commands may still be pending.
	Pending  int64
	Down     bool // failing fast after unanswered batches, until a probe succeeds
	Evicting bool // refusing acquires while it may evict lock keys (ErrEvicting)
	// QuarantinedUntil: the node lost its data and refuses acquires until
	// then (zero or past: not quarantined).
	QuarantinedUntil time.Time
	Restarts         uint64 // times it was seen to have lost its data
	// QuarantinedSlots: on a Redis Cluster, the slots that refuse acquires
	// in a quarantine of their own (their epoch marker was another
	// master's: most often, the slot moved) or wait to be marked after it;
	// the cluster's other slots keep their votes.
	QuarantinedSlots int64
	// Healed counts the lock keys an extension set on it again: a lease
	// that had lost its key there regained the node (see Lease.Extend).
	Healed uint64
	// Shards, for a Redis Cluster node, are its shards as this engine
	// knows them now, by master address, each counted and judged as a
	// node of its own (their Shards are nil); nil for other nodes.
	Shards []NodeStats
}

// nodeStats is what the engine tells of a node (or a shard) at addr.
func nodeStats(addr string, ns node.Stats) NodeStats {
	return NodeStats{Addr: addr, Commands: ns.Commands, RoundTrips: ns.Batches,
		Pending: ns.Queued + ns.OnWire, Down: ns.Down, Evicting: ns.Evicting, Restarts: ns.Restarts, QuarantinedUntil: ns.QuarantineUntil,
		QuarantinedSlots: ns.SlotsOut, Healed: ns.Healed}
}

// Stats returns the engine's counters. Safe for concurrent use. Calls
// that come faster than one per some 20µs wait their turn (see pacer): a
// loop of them must not starve the engine's own work.
func (e *Engine) Stats() Stats {
	e.paced.wait()
	e.mu.Lock()
	s := Stats{Leases: len(e.live), EventsDropped: e.dropped.Load()}
	e.mu.Unlock()
	e.lines.stats(&s)
	for i, n := range e.nodes {
		ns := nodeStats(e.cfg.Nodes[i], n.Stats())
		if c := n.Cluster(); c != nil {
			ns.Shards = []NodeStats{}
			for master, shard := range c.Shards() {
				ns.Shards = append(ns.Shards, nodeStats(master, shard.Stats()))
			}
			slices.SortFunc(ns.Shards, func(a, b NodeStats) int { return strings.Compare(a.Addr, b.Addr) })
		}
		s.Nodes = append(s.Nodes, ns)
	}
	return s
}

// leaseOwner is the engine as its lease actors see it (lease.Owner).
type leaseOwner Engine

func (o *leaseOwner) Publish(ev Event) {
	o.tel.published(ev)
	(*Engine)(o).publish(ev)
}

func (o *leaseOwner) Dropped() { o.dropped.Add(1) }

func (o *leaseOwner) ExtendLate(late time.Duration) {
	o.tel.extendLateness.Record(context.Background(), late.Seconds())
}

func (o *leaseOwner) Ended(held time.Duration, err error) { o.tel.ended(held, err) }

// Done forgets a lease its actor is done with.
func (o *leaseOwner) Done(st *lease.State) {
	o.mu.Lock()
	delete(o.live, st)
	o.mu.Unlock()
}

// Close releases every lease the engine holds (they end with an error
// matching ErrReleased and ErrClosed), fails acquisitions in progress with
// ErrClosed, closes the subscriptions, stops the actors and closes the node
// clients. It waits for
// the releases, each bounded by Config.NodeTimeout. A release that a node
// left unanswered (it was down, or timed out) is not sent again after
// Close, as it would be while the engine runs: Close does not wait for
// that node, and the key there expires by its TTL. Every call on the
// engine after Close, Close included, returns ErrClosed.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed.Load() {
		e.mu.Unlock()
		return ErrClosed
	}
	e.closed.Store(true)
	close(e.closing)
	live := make(map[*lease.State]lease.Ref, len(e.live))
	for st, ref := range e.live {
		live[st] = ref
	}
	e.mu.Unlock()

	for st, ref := range live {
		ref.Post(&lease.Close{State: st, Err: errClosedLease, Abort: ErrClosed})
	}
	for st := range live {
		<-st.Stopped()
	}
	e.leases.Close()
	e.lines.close()
	_ = e.system.Root.PoisonFuture(e.hub).Wait() // after the leases' last events
	e.tel.close()
	for _, n := range e.nodes {
		n.Stop()
	}
	e.dispatch.Stop()
	if e.ownSystem {
		e.system.Shutdown()
	}
	return nil
}

// idleLeaseActors bounds the lease actors an engine keeps between leases
// and for parked leases to wake on (lease.Pool): enough for thousands of
// leases a second to reuse actors instead of spawning them, at about 1 KB
// each (an actor, protoactor's record of it, its mailbox), and as many
// lease bodies of ~400 B.
const idleLeaseActors = 1024

// errClosedLease ends the leases of a closing engine.
var errClosedLease = errtext.Errorf(errtext.Prefix+"%w: %w", ErrReleased, ErrClosed)

// newValue is a lease's owner value: 20 random bytes, URL-safe base64.
func newValue() string {
	var b [20]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	var text [27]byte      // base64.RawURLEncoding.EncodedLen(20): one allocation, the string's
	base64.RawURLEncoding.Encode(text[:], b[:])
	return string(text[:])
}
