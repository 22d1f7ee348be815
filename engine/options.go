package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Option tunes one Acquire or TryAcquire call.
//
// It is a value rather than a function: applying a function to the
// call's options would move them to the heap, an allocation per call.
type Option struct {
	set        optionKind
	d          time.Duration // WithTTL's TTL, WithAutoExtend's maxHold
	newBackOff func() backoff.BackOff
	meta       string // WithMeta's
	token      uint64 // WithToken's
}

type optionKind uint8

const (
	setTTL optionKind = iota + 1
	setAutoExtend
	setFencing
	setRetry
	setMeta
	setToken
)

// apply sets what opt says in o; the zero Option sets nothing.
func (opt Option) apply(o *options) {
	switch opt.set {
	case setTTL:
		o.ttl = opt.d
	case setAutoExtend:
		o.autoExtend, o.maxHold = true, opt.d
	case setFencing:
		o.fencing = true
	case setRetry:
		o.newBackOff = opt.newBackOff
	case setMeta:
		o.meta = opt.meta
	case setToken:
		o.token = opt.token
	}
}

type options struct {
	ttl        time.Duration
	newBackOff func() backoff.BackOff
	autoExtend bool
	maxHold    time.Duration // resolved: WithAutoExtend's, else Config.MaxHold, else DefaultMaxHoldTTLs·ttl
	fencing    bool
	meta       string // WithMeta's
	token      uint64 // WithToken's
}

// WithTTL sets the lease's TTL for this call instead of Config.TTL. It must
// exceed the drift allowance (TTL·DriftFactor + 2ms) and Config.NodeTimeout,
// and not exceed Config.MaxTTL.
func WithTTL(d time.Duration) Option {
	return Option{set: setTTL, d: d}
}

// WithAutoExtend keeps the lease alive: the engine extends it on all nodes
// at a third of the TTL (AutoExtendDivisor), and again about
// TTL/ExtendRetryDivisor after a failed round, until maxHold
// has passed since it was acquired; the lease then expires at its deadline
// (Expired). An extension that no quorum confirms by the validity deadline
// ends the lease as Lost, at the deadline at the latest. maxHold also
// bounds Lease.Extend on this lease, instead of Config.MaxHold. maxHold
// must be positive: there are no unbounded leases.
func WithAutoExtend(maxHold time.Duration) Option {
	return Option{set: setAutoExtend, d: maxHold}
}

// WithFencing gives the lease a fencing token (Lease.Token, Event.Token)
// that strictly increases across successive holders of the resource,
// under Redlock's timing assumptions: pass it to the protected store and
// have it reject writes with a lower token than it has seen. It costs one
// more round trip, to the granting nodes, before the lease is held. The
// argument is in the documentation of package lease.
func WithFencing() Option {
	return Option{set: setFencing}
}

// WithRetry replaces Config.RetryBackOff for this call: newBackOff makes
// the schedule of waits between rounds (a factory, since a BackOff is
// stateful; called when the call first waits). Config.RetryAttempts and
// the context still bound the attempts.
func WithRetry(newBackOff func() backoff.BackOff) Option {
	return Option{set: setRetry, newBackOff: newBackOff}
}

func (e *Engine) options(opts []Option) (options, error) {
	o := options{ttl: e.cfg.TTL, newBackOff: e.cfg.RetryBackOff}
	for _, opt := range opts {
		opt.apply(&o)
	}
	if err := checkTTL(o.ttl, e.cfg.DriftFactor); err != nil {
		return o, fmt.Errorf("redlease: WithTTL %w", err)
	}
	if o.ttl > e.cfg.MaxTTL {
		return o, fmt.Errorf("redlease: WithTTL must not exceed MaxTTL (%v), got %v", e.cfg.MaxTTL, o.ttl)
	}
	if o.ttl <= e.cfg.NodeTimeout {
		return o, fmt.Errorf("redlease: WithTTL must exceed NodeTimeout (%v), got %v", e.cfg.NodeTimeout, o.ttl)
	}
	if o.autoExtend && o.maxHold <= 0 {
		return o, fmt.Errorf("redlease: WithAutoExtend maxHold must be > 0, got %v", o.maxHold)
	}
	if !o.autoExtend {
		o.maxHold = e.cfg.MaxHold
		if o.maxHold == 0 {
			o.maxHold = DefaultMaxHoldTTLs * o.ttl
		}
	}
	if o.newBackOff == nil {
		return o, errors.New("redlease: WithRetry needs a BackOff factory, got nil")
	}
	if err := checkMeta(o.meta); err != nil {
		return o, err
	}
	return o, nil
}
