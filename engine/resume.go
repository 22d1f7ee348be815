package engine

import (
	"context"
	"errors"
	"time"

	"github.com/redlease/redlease/lease"
)

// Check is what the nodes say of a lease now (Lease.Check), read on
// every node at once without changing anything: the read-only check of
// go-redsync's Valid and redislock's TTL.
type Check struct {
	// Holding is how many nodes hold the lease's key with its value now.
	Holding int
	// Quorum: Holding is a quorum of the nodes (Quorum(len(Config.Nodes))).
	Quorum bool
	// TTL is what a quorum still guarantees: the least TTL left among the
	// quorum of holding nodes whose keys live longest, as they answered;
	// 0 without a quorum.
	TTL time.Duration
	// Until is when the keys of that quorum may expire at the earliest,
	// by the acquire's validity rule: the check's start plus TTL, less
	// the drift (TTL·DriftFactor + 2ms), since every node answered after
	// the start; zero without a quorum. It is the validity Resume would
	// take. The lease's own is still Lease.Until, which an extension
	// moves: Until is not a reason to work longer.
	Until time.Time
	// Meta says who holds the resource on a quorum of the nodes: the
	// lease's own meta (WithMeta) with Quorum; another owner's, when one
	// holds a quorum; "" when none does, or it has no meta.
	Meta string
	// Nodes are the answers, in Config.Nodes order: Granted, the node
	// holds the lease's key (TTL: what it has left); Taken, another
	// owner's key is there (its TTL and HeldBy given); Absent, no key;
	// Timeout or Failed. A node that may have lost keys answers Failed
	// with ErrQuarantined, as it does an acquire: its word does not count.
	Nodes []NodeOutcome
}

// Check asks every node, at once and changing nothing, whether it holds
// the lease's key with its value, and for how long: how many do, whether
// that is a quorum, what TTL a quorum still guarantees, and who holds the
// resource (Check). It waits for every node's answer (each by
// Config.NodeTimeout), or until ctx ends (an error matching ctx's). It
// does not extend the lease, and it does not end it: a lease found
// without a quorum is still held until its next extension finds it lost,
// or its deadline. A lease that ended answers with its Err, a nil *Lease
// with ErrNotAcquired, and a closed engine with ErrClosed.
//
//	c, err := lease.Check(ctx)
//	if err == nil && !c.Quorum { log.Printf("held on %d nodes; %q holds it", c.Holding, c.Meta) }
func (l *Lease) Check(ctx context.Context) (Check, error) {
	if l == nil {
		return Check{}, ErrNotAcquired
	}
	if err := l.state.Err(); err != nil {
		return Check{}, err
	}
	r, err := l.e.read(ctx, l.resource, l.value)
	if err != nil {
		return Check{}, err
	}
	c := Check{Holding: r.Holding, Quorum: r.Quorum(), TTL: r.TTL, Until: r.Until, Meta: lease.HeldBy(r.Votes),
		Nodes: l.e.nodeOutcomes(r.Votes, nil)}
	if c.Quorum {
		c.Meta = MetaOf(l.value)
	}
	return c, nil
}

// read runs a check round of resource's key and value (lease.Pool.Check).
func (e *Engine) read(ctx context.Context, resource, value string) (lease.Reading, error) {
	if e.closed.Load() {
		return lease.Reading{}, ErrClosed
	}
	votes, start, ok := e.leases.Check(ctx, e.closing, e.cfg.lockKey(resource), value)
	switch {
	case ok:
		return lease.Read(votes, start, e.cfg.DriftFactor), nil
	case e.closed.Load():
		return lease.Reading{}, ErrClosed
	}
	return lease.Reading{}, contextError(ctx)
}

// Handle is what it takes to take a lease up with Resume, in another
// engine of this process or another: Lease.Detach gives it. Its fields
// are exported, with JSON names, so that it crosses processes in any
// encoding; a process that keeps its leases' handles to resume them after
// a restart makes one of Lease.Resource, Value and Token, and the TTL it
// acquired with. Value is the lease's secret: whoever has it can release
// the lease.
type Handle struct {
	Resource string `json:"resource"`
	// Value is the lease's owner value (Lease.Value), its meta included.
	Value string `json:"value"`
	// Token is the lease's fencing token (Lease.Token): 0 without
	// fencing. The nodes cannot confirm it: Resume takes it on trust.
	Token uint64 `json:"token,omitempty"`
	// TTL is the lease's TTL, which the extensions of the lease taken up
	// set (0: that engine's Config.TTL).
	TTL time.Duration `json:"ttl,omitempty"`
}

// Detach lets the lease go without releasing it, for another engine (in
// another process, say) to take up with Resume, and returns the Handle
// that takes. The lease ends here with ErrDetached: Done closes, a
// Detached event ends its events, this engine extends it no more, and
// Close no longer releases it; its keys stay on the nodes, and keep the
// resource held until they expire (a TTL after its last extension, past
// Until) or the lease taken up is released. Whoever takes it up must
// Resume it before then. The holder here must stop its work first, as
// for a Release: the lease may be in other hands at once.
//
// A lease that had ended answers with its Err (and the zero Handle): its
// keys may be gone, or another owner's. A nil *Lease answers
// ErrNotAcquired.
//
//	h, err := lease.Detach() // in the process that hands it over
//	b, _ := json.Marshal(h)  // ... to the one that goes on with it:
//	lease, err := e.Resume(ctx, h)
func (l *Lease) Detach() (Handle, error) {
	if l == nil {
		return Handle{}, ErrNotAcquired
	}
	reply := make(chan lease.DetachResult, 1)
	r, err := ask(context.Background(), l, &lease.Detach{State: l.state, Reply: reply}, reply)
	if err == nil {
		err = r.Err
	}
	if err != nil {
		return Handle{}, err
	}
	return Handle{Resource: l.resource, Value: l.value, Token: l.state.Token(), TTL: r.TTL}, nil
}

// Resume takes up a lease that another engine holds or let go (Detach),
// in another process or in this one before a restart: lock in one
// request, release in another (go-redsync's WithValue), by its Handle.
// It reads the nodes (a check round, as Lease.Check) and, when a quorum
// of them holds the key of h.Resource with h.Value, returns the lease as
// held, without writing anything: it can Extend, Release and,
// WithAutoExtend, keep itself alive as any lease, and Release is as safe
// as ever (it deletes only keys that hold the value). Its validity comes
// from what the nodes answered, by the acquire's rule and conservatively:
// the check's start plus the least TTL left among the quorum of holding
// nodes whose keys live longest, less the drift (that TTL·DriftFactor +
// 2ms), so the time the check took counts against it (Check.Until). Its
// maximum hold (MaxHold) counts from the Resume. Its TTL is h.TTL
// (Config.TTL when 0), and its fencing token h.Token, taken on trust.
//
// Like TryAcquire, it fails without a round when this engine holds the
// resource or a caller of Acquire waits for it here. Otherwise a failure
// is an *AcquireError with each node's answer, matching ErrNotAcquired,
// and ctx's error when ctx ended it; it matches ErrLeaseLost too when so
// many nodes answered that their key does not hold the value (released,
// expired, another owner's: HeldBy says whose) that no quorum can: the
// lease is gone for good. Without ErrLeaseLost, nodes did not answer, sit
// out a quarantine, or the quorum's keys expire within the end margin:
// the lease may still be held, and a later Resume may find it.
//
// Options: WithTTL instead of h.TTL; WithAutoExtend as for Acquire.
// WithMeta is refused (the meta is in the value); WithFencing and
// WithRetry change nothing.
//
// An engine that still holds the lease is not told: should its Lease live
// on, it learns of the release at its next extension (Lost) or reaches
// its deadline, and its Close releases it. Hand a lease over with Detach.
//
//	lease, err := e.Resume(ctx, h) // h: the Handle Detach gave
//	if err == nil { err = lease.Release(ctx) }
func (e *Engine) Resume(ctx context.Context, h Handle, opts ...Option) (*Lease, error) {
	if h.Value == "" {
		return nil, errNoValue
	}
	_, span := e.tel.start(ctx, "redlease.Resume")
	lead := []Option{{set: setToken, token: h.Token}}
	if h.TTL != 0 {
		lead = append(lead, WithTTL(h.TTL))
	}
	l, _, err := e.acquireLease(ctx, h.Resource, 1, append(lead, opts...), false, h.Value)
	endSpan(span, err)
	span.End()
	return l, err
}

// errNoValue: Resume without a value.
var errNoValue = errors.New("redlease: Resume needs the lease's value (Handle.Value), got \"\"")
