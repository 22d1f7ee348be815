package lease

import (
	"fmt"
	"time"
)

// EventKind says what happened to a lease.
type EventKind int

// The kinds of lease events. Lost, Released, Expired and Detached are
// terminal: each lease emits exactly one of them, last.
const (
	Acquired     EventKind = iota + 1 // the lease is held
	Extended                          // an extension moved Until forward
	ExtendFailed                      // an extension round failed; the lease holds until Until
	Lost                              // the lease ended before its time: another owner, or no extension by Until
	Released                          // the holder (or Close) released it
	Expired                           // it reached Until without being meant to go on
	Detached                          // the holder let it go without releasing it, for another holder to take up

	// Waiting and Woken are about an acquisition, not a lease: they go to
	// the engine's subscribers only, never on a lease's channel.
	Waiting // an Acquire waits: behind a local caller, or for another owner's release (Until: when its keys expire, if known)
	Woken   // an Acquire that waited starts a round (Wake says why)

	// NodeDown, NodeQuarantined and NodeServing are about a node (Node,
	// and Shard on a cluster), not a lease: they go to the engine's
	// subscribers only.
	NodeDown        // the node fails fast after unanswered batches or probes (Err says why)
	NodeQuarantined // the node refuses acquires until Until, as it may have lost lock keys (Err says why)
	NodeServing     // the node serves again, after NodeDown or NodeQuarantined
)

var kindNames = [...]string{
	Acquired: "Acquired", Extended: "Extended", ExtendFailed: "ExtendFailed",
	Lost: "Lost", Released: "Released", Expired: "Expired", Detached: "Detached", Waiting: "Waiting", Woken: "Woken",
	NodeDown: "NodeDown", NodeQuarantined: "NodeQuarantined", NodeServing: "NodeServing",
}

func (k EventKind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Terminal reports whether k ends the lease.
func (k EventKind) Terminal() bool { return k >= Lost && k <= Detached }

// Event is one step in a lease's life.
type Event struct {
	Kind     EventKind
	Resource string
	Token    uint64    // fencing token; 0 without fencing
	Until    time.Time // validity deadline after this event
	Err      error     // the cause, for ExtendFailed and the terminal kinds
	Wake     WakeCause // for Woken: why
	// Node, for the node kinds, is the node as in Config.Nodes; Shard, on
	// a Redis Cluster node, the master of the shard the event is about.
	Node, Shard string
}

// emit delivers ev on the lease's own channel without ever blocking (see
// State.deliver): the last slot is kept for the terminal event, after
// which the channel closes, so only non-terminal events can be dropped
// (and are counted). The owner gets it too (Owner.Publish).
func (a *leaseActor) emit(kind EventKind, err error) {
	ev := Event{Kind: kind, Resource: a.cfg.Resource, Token: a.state.token, Until: a.state.Until(), Err: err}
	if !a.state.deliver(ev) && a.cfg.Owner != nil {
		a.cfg.Owner.Dropped()
	}
	if a.cfg.Owner != nil {
		a.cfg.Owner.Publish(ev)
	}
}
