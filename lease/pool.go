package lease

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/redlease/redlease/actors"
)

// Pool starts leases on lease actors, and keeps the actors that are done
// with one (up to a bound) to run the next: spawning and stopping an actor
// cost more than a lease's own messages. An actor runs one lease at a
// time; the round numbers of its votes and the tags of its timers keep
// what arrives late about one lease out of the next. The pool keeps
// the leases' bodies too, so that a lease allocates neither, and gives
// its actors to parked leases that wake.
type Pool struct {
	system *actor.ActorSystem
	shared *Shared      // every lease's Config.Shared
	clock  Clock        // shared.Clock, or the system's
	props  *actor.Props // one for all the pool's actors (see spawn)
	keep   int

	// spawnMu serialises spawns, so that the Props' mailbox producer
	// gives its mailbox to the actor its actor producer just made.
	spawnMu sync.Mutex
	spawned *leaseActor

	// votes keeps the actors' vote slices (*[]node.Vote) between rounds:
	// a held lease between extensions needs none.
	votes sync.Pool

	mu     sync.Mutex
	idle   []*leaseActor
	bodies []*body
	closed bool
	actors sync.WaitGroup // every actor spawned, until it stopped
}

// NewPool returns a pool whose actors run on dispatcher (nil:
// protoactor's default) and which keeps at most keep idle actors (and
// as many bodies); with keep 0 every actor stops once it is done with a
// lease or parks it. Its leases share shared (a nil Logger: none); the
// pool keeps a copy.
func NewPool(system *actor.ActorSystem, dispatcher actor.Dispatcher, keep int, shared Shared) *Pool {
	if shared.Logger == nil {
		shared.Logger = actors.Discard
	}
	if shared.Clock == nil {
		shared.Clock = systemClock{}
	}
	p := &Pool{system: system, shared: &shared, clock: shared.Clock, keep: keep}
	p.props = actors.PropsWithMailbox(func() actor.Actor {
		p.spawned = &leaseActor{pool: p}
		return p.spawned
	}, dispatcher, func(m *actors.Mailbox) { p.spawned.mailbox = m })
	return p
}

// spawn starts a new actor. protoactor makes an actor, then its mailbox,
// within Spawn: one Props serves every actor (an actor keeps its Props
// for life), and the producers meet in p.spawned.
func (p *Pool) spawn() *leaseActor {
	p.actors.Add(1)
	p.spawnMu.Lock()
	defer p.spawnMu.Unlock()
	pid := p.system.Root.Spawn(p.props)
	a := p.spawned
	p.spawned = nil
	a.self = pid
	return a
}

// take returns an idle actor, or a new one.
func (p *Pool) take() *leaseActor {
	p.mu.Lock()
	a := pop(&p.idle)
	p.mu.Unlock()
	if a == nil {
		a = p.spawn()
	}
	return a
}

// pop takes the last of s, or nil when s is empty.
func pop[T any](s *[]*T) *T {
	n := len(*s)
	if n == 0 {
		return nil
	}
	v := (*s)[n-1]
	(*s)[n-1] = nil
	*s = (*s)[:n-1]
	return v
}

// put takes back an actor that is done with its lease, or parked it;
// false when the pool is full or closed: the actor stops.
func (p *Pool) put(a *leaseActor) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle) >= p.keep {
		return false
	}
	p.idle = append(p.idle, a)
	return true
}

// putBody takes back the body of a lease that is done.
func (p *Pool) putBody(b *body) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed && len(p.bodies) < p.keep {
		p.bodies = append(p.bodies, b)
	}
}

// Ref is a lease, for its engine to send its actor calls: whichever
// actor runs it, or one bound to it for the call when it is parked. A
// call about a lease that is done is answered as stale (answerStale).
type Ref struct{ b *body }

// Started reports whether r is a lease's (not the zero Ref).
func (r Ref) Started() bool { return r.b != nil }

// Ask posts msg to the lease's actor and, when the actor was idle,
// handles it on the calling goroutine (actors.Mailbox.Offer, at most a
// few messages): for a caller that waits for the answer next, holding
// no lock the actor may take.
func (r Ref) Ask(msg any) {
	if m := r.b.offer(msg); m != nil {
		m.Run()
	}
}

// Post posts msg to the lease's actor, which a dispatcher worker runs.
func (r Ref) Post(msg any) { r.b.post(msg) }

// ExpireIfDue ends st, the lease of r's actor, as its deadline timer
// would, if its end (EndMargin before Until) has come on the pool's
// clock, and tells the actor: for a holder that asks whether its lease
// is held before the timer ran, as after a pause of the process
// (SIGSTOP, a long GC, a virtual machine's), when the monotonic clock
// has moved on and the timer's goroutine has not run yet. (While st has
// not ended, r's actor is st's.)
func (r Ref) ExpireIfDue(st *State) {
	if st.Ended() {
		return
	}
	if now := r.b.pool.clock.Now(); !now.Before(st.ends()) && st.expireIfDue(now) {
		r.b.post(expired)
	}
}

// Run runs the lease's actor on the calling goroutine: see Start and
// Offer. A no-op on the zero Ref.
func (r Ref) Run() {
	if r.b == nil {
		return
	}
	r.b.mu.Lock()
	a := r.b.actor // bound until it runs: only a running actor parks
	r.b.mu.Unlock()
	a.mailbox.Run()
}

// Offer posts msg to the lease's actor (actors.Mailbox.Offer); true: the
// actor was idle, and the caller must call Run soon, holding no lock the
// actor may take.
func (r Ref) Offer(msg any) bool { return r.b.offer(msg) != nil }

// offer posts msg to the lease's actor, binding one to a parked lease,
// and returns the actor's mailbox when the actor was idle: whoever
// offered must see that it runs. A call about a lease that is done is
// answered at once.
func (b *body) offer(msg any) *actors.Mailbox {
	b.mu.Lock()
	if !b.live {
		b.mu.Unlock()
		answerStale(msg)
		return nil
	}
	a, idle := b.bindLocked()
	idle = a.mailbox.Offer(msg) || idle
	b.mu.Unlock()
	if idle {
		return a.mailbox
	}
	return nil
}

// post is offer, with the actor run by a dispatcher worker.
func (b *body) post(msg any) {
	if m := b.offer(msg); m != nil {
		m.Schedule()
	}
}

// bindLocked returns the actor running the lease, binding one from the
// pool when the lease is parked: the body itself is the actor's first
// message (see Receive), so that only the actor's goroutine writes its
// fields. idle: the actor's mailbox was idle, and must be run. b.mu is
// held.
func (b *body) bindLocked() (a *leaseActor, idle bool) {
	if b.actor == nil {
		b.actor = b.pool.take()
		idle = b.actor.mailbox.Offer(b)
	}
	return b.actor, idle
}

// Start starts acquiring cfg's lease on an idle actor, or a new one, and
// returns the lease and its State; cfg.Shared is the pool's. Not after
// Close.
//
// When run is true, the lease begins once the caller calls r.Run, which
// it must do at once, holding no lock the lease may take (its owner's
// Done): the idle actor then handles the begin on the calling goroutine,
// which is about to wait for the lease's Result anyway.
func (p *Pool) Start(cfg Config) (r Ref, st *State, run bool) {
	cfg.Shared = p.shared
	st = newState(cfg.Resource, cfg.EventBuffer)
	p.mu.Lock()
	b := pop(&p.bodies)
	p.mu.Unlock()
	if b == nil {
		b = &body{pool: p}
	}
	b.mu.Lock()
	b.live = true
	// The actor reads these once begin reaches it, after the mailbox's
	// lock: a body comes back to the pool with its perLease zero.
	b.cfg, b.state = cfg, st
	a, run := b.bindLocked()
	run = a.mailbox.Offer(beginning) || run
	b.mu.Unlock()
	return Ref{b}, st, run
}

// Close stops the idle actors and waits until every actor has stopped:
// call it once every lease started is done (its State's Stopped closed).
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle, p.bodies = nil, nil
	p.mu.Unlock()
	for _, a := range idle {
		p.system.Root.Stop(a.self)
	}
	p.actors.Wait()
}
