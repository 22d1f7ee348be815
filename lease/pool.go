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
	props  *actor.Props // one for all the pool's actors
	keep   int

	// votes keeps the actors' vote slices (*[]node.Vote) between rounds:
	// a held lease between extensions needs none.
	votes sync.Pool

	mu     sync.Mutex
	idle   []*actor.PID
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
	p.props = actors.Props(func() actor.Actor { return &leaseActor{system: system, pool: p} }, dispatcher)
	return p
}

// Start starts acquiring cfg's lease on an idle actor, or a new one, and
// returns the actor and the lease's State; cfg.Shared is the pool's. Not
// after Close.
func (p *Pool) Start(cfg Config) (*actor.PID, *State) {
	cfg.Shared = p.shared
	st := newState(cfg.Resource, cfg.EventBuffer)
	p.mu.Lock()
	var pid *actor.PID
	if n := len(p.idle); n > 0 {
		pid = p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
	}
	p.mu.Unlock()
	if pid == nil {
		p.actors.Add(1)
		pid = p.system.Root.Spawn(p.props)
	}
	p.system.Root.Send(pid, &begin{cfg: cfg, state: st})
	return pid, st
}

// put takes back an actor that is done with its lease; false when the
// pool is full or closed: the actor stops.
func (p *Pool) put(pid *actor.PID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle) >= p.keep {
		return false
	}
	p.idle = append(p.idle, pid)
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
	for _, pid := range idle {
		p.system.Root.Stop(pid)
	}
	p.actors.Wait()
}
