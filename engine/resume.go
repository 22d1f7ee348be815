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
	// holds the lease's key (TTL: what it has left); Taken, it does not
	// (another owner's key, whose TTL and HeldBy it gives, or none);
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
		Nodes: l.e.nodeOutcomes(r.Votes)}
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

// Resume takes up a lease that another process acquired, or this one
// before a restart: lock in one request, release in another (go-redsync's
// WithValue). value is the lease's Lease.Value, its meta included. Resume
// reads the nodes (a check round, as Lease.Check) and, when a quorum of
// them holds resource's key with value, returns the lease as held,
// without writing anything: it can Extend, Release and, WithAutoExtend,
// keep itself alive as any lease, and Release is as safe as ever (it
// deletes only keys that hold value). Its validity comes from what the
// nodes answered, by the acquire's rule and conservatively: the check's
// start plus the least TTL left among the quorum of holding nodes whose
// keys live longest, less the drift (that TTL·DriftFactor + 2ms), so the
// time the check took counts against it (Check.Until). Its maximum hold
// (MaxHold) counts from the Resume.
//
// Like TryAcquire, it fails without a round when this engine holds the
// resource or a caller of Acquire waits for it here. Otherwise a failure
// is an *AcquireError with each node's answer, matching ErrNotAcquired,
// and ctx's error when ctx ended it; it matches ErrLeaseLost too when so
// many nodes answered that their key does not hold value (released,
// expired, another owner's: HeldBy says whose) that no quorum can: the
// lease is gone for good. Without ErrLeaseLost, nodes did not answer, sit
// out a quarantine, or the quorum's keys expire within the end margin:
// the lease may still be held, and a later Resume may find it.
//
// Options: WithTTL is the TTL the lease's extensions set (Config.TTL by
// default: pass the one it was acquired with); WithAutoExtend as for
// Acquire; WithToken gives a fenced lease its token (Token), which the
// nodes cannot confirm: pass the one the acquiring process saw. WithMeta
// is refused (the meta is in value); WithFencing and WithRetry change
// nothing.
//
// The process that acquired the lease is not told: should its Lease live
// on, it learns of the release at its next extension (Lost) or reaches
// its deadline. Hand a lease over only from a holder that stopped using
// it.
//
//	// In the process that acquired it: hand resource, lease.Value() and
//	// lease.Token() on. In the one that finishes the work:
//	lease, err := e.Resume(ctx, "invoice:42", value, engine.WithToken(token))
//	if err == nil { err = lease.Release(ctx) }
func (e *Engine) Resume(ctx context.Context, resource, value string, opts ...Option) (*Lease, error) {
	if value == "" {
		return nil, errNoValue
	}
	_, span := e.tel.start(ctx, "redlease.Resume")
	l, _, err := e.acquireLease(ctx, resource, 1, opts, false, value)
	endSpan(span, err)
	span.End()
	return l, err
}

// errNoValue: Resume without a value.
var errNoValue = errors.New("redlease: Resume needs the lease's value (Lease.Value), got \"\"")

// WithToken gives a lease taken up by Resume its fencing token
// (Lease.Token, Event.Token): the one Token returned in the process that
// acquired it WithFencing. Resume takes it on the caller's word. For
// Resume only.
//
//	lease, err := e.Resume(ctx, "invoice:42", value, engine.WithToken(token))
func WithToken(token uint64) Option {
	return Option{set: setToken, token: token}
}
