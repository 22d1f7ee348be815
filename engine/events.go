package engine

import (
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/redlease/redlease/actors"
	"github.com/redlease/redlease/lease"
	"github.com/redlease/redlease/node"
)

// EventKind says what happened to a lease: Acquired, Extended,
// ExtendFailed, Lost, Released, Expired or Detached; or to an Acquire
// that waits for one: Waiting, Woken.
type EventKind = lease.EventKind

// Event is one step in a lease's life, or, for the node kinds, a change
// in a node's health. Its fields:
//
//	Kind     EventKind // what happened
//	Resource string    // the resource ("" for the node kinds)
//	Token    uint64    // the fencing token; 0 without fencing
//	Until    time.Time // the validity deadline after the event; for Waiting, when the holder's keys expire (if known); for NodeQuarantined, the quarantine's end
//	Err      error     // the cause of ExtendFailed, of the terminal kinds (for a failed extension an *ExtendError naming each node's answer), NodeDown and NodeQuarantined
//	Wake     WakeCause // for Woken: why the call started a round
//	Node     string    // for the node kinds: the node, as in Config.Nodes
//	Shard    string    // for the node kinds on a Redis Cluster node: the master of the shard that changed
type Event = lease.Event

// The kinds of events. Lost, Released, Expired and Detached are
// terminal: a lease emits exactly one of them, last.
const (
	Acquired     = lease.Acquired
	Extended     = lease.Extended
	ExtendFailed = lease.ExtendFailed
	Lost         = lease.Lost
	Released     = lease.Released
	Expired      = lease.Expired
	Detached     = lease.Detached // Lease.Detach: let go without a release
	// Waiting and Woken are about an Acquire, not a lease: they go to
	// the engine's subscriptions only (Subscribe), never on a lease's
	// channel. Waiting: the call waits, behind a local caller or for
	// another owner's release (Until: when its keys expire, if known).
	// Woken: it starts a round after waiting (Event.Wake says why).
	Waiting = lease.Waiting
	Woken   = lease.Woken
	// NodeDown, NodeQuarantined and NodeServing are about a node, not a
	// lease: they go to the engine's subscriptions only, with Event.Node
	// (as in Config.Nodes) and, on a Redis Cluster node, Event.Shard (the
	// master of the shard that changed: a cluster's shards come and go
	// apart). NodeDown: the node fails fast after unanswered batches or
	// probes (Err says why). NodeQuarantined: it refuses acquires until
	// Until, as it may have lost lock keys (Err, matching ErrQuarantined,
	// says why). NodeServing: it serves again, heard at the first probe
	// after it does (within Config.HealthInterval).
	NodeDown        = lease.NodeDown
	NodeQuarantined = lease.NodeQuarantined
	NodeServing     = lease.NodeServing
)

// nodeEvent publishes a change in the health of the node at index i (on
// a cluster, of one of its shards) as an event.
func (e *Engine) nodeEvent(i int, h node.HealthChange) {
	ev := Event{Kind: NodeServing, Node: e.cfg.Nodes[i], Until: h.Until, Err: h.Err}
	switch {
	case h.Down:
		ev.Kind = NodeDown
	case !h.Until.IsZero():
		ev.Kind = NodeQuarantined
	}
	if h.Shard {
		ev.Shard = h.Addr
	}
	e.publish(ev)
}

// hub fans the events of every lease out to the engine's subscribers. It
// is the only sender on, and the only closer of, each subscription channel.
type hub struct {
	subs    map[uint64]chan Event
	dropped *atomic.Uint64
}

type (
	subscribe struct {
		id uint64
		ch chan Event
	}
	unsubscribe struct{ id uint64 }
	published   struct {
		actors.Late
		ev Event
	}
)

func (h *hub) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *published:
		for _, ch := range h.subs {
			select {
			case ch <- m.ev:
			default:
				h.dropped.Add(1)
			}
		}
	case *subscribe:
		h.subs[m.id] = m.ch
	case *unsubscribe:
		if ch, ok := h.subs[m.id]; ok {
			delete(h.subs, m.id)
			close(ch)
		}
	case *actor.Stopping:
		for id, ch := range h.subs {
			delete(h.subs, id)
			close(ch)
		}
	}
}

// Subscribe returns a channel that receives the events of every lease of
// the engine from now on, and a cancel func that closes it (idempotent).
// Delivery never waits on the reader: when the channel's buffer is full
// the event is dropped for this subscriber and counted in
// Stats().EventsDropped. A Lease's Done and Err remain the source of truth.
// Close closes every subscription after the leases' last events; after
// Close, Subscribe returns a closed channel. Calls that come faster than
// one per some 20µs wait their turn, as Stats's do.
func (e *Engine) Subscribe(buffer int) (events <-chan Event, cancel func()) {
	e.paced.wait()
	ch := make(chan Event, max(buffer, 0))
	e.mu.Lock()
	if e.closed.Load() {
		e.mu.Unlock()
		close(ch)
		return ch, func() {}
	}
	e.nextSub++
	id := e.nextSub
	e.subscribers.Add(1)
	e.system.Root.Send(e.hub, &subscribe{id: id, ch: ch})
	e.mu.Unlock()
	var once atomic.Bool
	return ch, func() {
		if once.CompareAndSwap(false, true) {
			e.subscribers.Add(-1)
			e.system.Root.Send(e.hub, &unsubscribe{id: id})
		}
	}
}

// publish hands a lease's event to the hub when someone listens.
func (e *Engine) publish(ev Event) {
	if e.subscribers.Load() > 0 {
		e.system.Root.Send(e.hub, &published{ev: ev})
	}
}
