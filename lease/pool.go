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
// what arrives late about one lease out of the next.
type Pool struct {
	system *actor.ActorSystem
	shared *Shared      // every lease's Config.Shared
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
	idle   []Ref
	closed bool
	actors sync.WaitGroup // every actor spawned, until it stopped
}

// NewPool returns a pool whose actors run on dispatcher (nil:
// protoactor's default) and which keeps at most keep idle actors; with
// keep 0 every actor stops after its lease. Its leases share shared (a
// nil Logger: none); the pool keeps a copy.
func NewPool(system *actor.ActorSystem, dispatcher actor.Dispatcher, keep int, shared Shared) *Pool {
	if shared.Logger == nil {
		shared.Logger = actors.Discard
	}
	p := &Pool{system: system, shared: &shared, keep: keep}
	p.props = actors.PropsWithMailbox(func() actor.Actor {
		p.spawned = &leaseActor{pool: p}
		return p.spawned
	}, dispatcher, func(m *actors.Mailbox) { p.spawned.mailbox = m })
	return p
}

// spawn starts a new actor. protoactor makes an actor, then its mailbox,
// within Spawn: one Props serves every actor (an actor keeps its Props
// for life), and the producers meet in p.spawned.
func (p *Pool) spawn() Ref {
	p.spawnMu.Lock()
	defer p.spawnMu.Unlock()
	pid := p.system.Root.Spawn(p.props)
	a := p.spawned
	p.spawned = nil
	a.self = pid
	return Ref{PID: pid, mailbox: a.mailbox}
}

// Ref is a lease actor: its PID, and its mailbox for a caller that waits
// for the actor's answer (Ask).
type Ref struct {
	PID     *actor.PID
	mailbox *actors.Mailbox
}

// Ask posts msg to the actor and, when the actor was idle, handles it on
// the calling goroutine (actors.Mailbox.Offer, at most a few messages):
// for a caller that waits for the answer next, holding no lock the actor
// may take.
func (r Ref) Ask(msg any) {
	if r.mailbox.Offer(msg) {
		r.mailbox.Run()
	}
}

// Run runs the actor on the calling goroutine: see Start and Offer. A
// no-op on the zero Ref.
func (r Ref) Run() {
	if r.mailbox != nil {
		r.mailbox.Run()
	}
}

// Offer posts msg to the actor (actors.Mailbox.Offer); true: the actor was
// idle, and the caller must call Run soon, holding no lock the actor may
// take.
func (r Ref) Offer(msg any) bool { return r.mailbox.Offer(msg) }

// Start starts acquiring cfg's lease on an idle actor, or a new one, and
// returns the actor and the lease's State; cfg.Shared is the pool's. Not
// after Close.
//
// When run is true, the lease begins once the caller calls r.Run, which
// it must do at once, holding no lock the lease may take (its owner's
// Done): the idle actor then handles the begin on the calling goroutine,
// which is about to wait for the lease's Result anyway.
func (p *Pool) Start(cfg Config) (r Ref, st *State, run bool) {
	cfg.Shared = p.shared
	st = newState(cfg.Resource, cfg.EventBuffer)
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		r = p.idle[n-1]
		p.idle[n-1] = Ref{}
		p.idle = p.idle[:n-1]
	}
	p.mu.Unlock()
	if r.PID == nil {
		p.actors.Add(1)
		r = p.spawn()
	}
	return r, st, r.mailbox.Offer(&begin{cfg: cfg, state: st})
}

// put takes back an actor that is done with its lease; false when the
// pool is full or closed: the actor stops.
func (p *Pool) put(r Ref) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle) >= p.keep {
		return false
	}
	p.idle = append(p.idle, r)
	return true
}

// Close stops the idle actors and waits until every actor has stopped:
// call it once every lease started is done (its State's Stopped closed).
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, r := range idle {
		p.system.Root.Stop(r.PID)
	}
	p.actors.Wait()
}
