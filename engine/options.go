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
	n          int           // WithRetryAttempts' n
	d          time.Duration // WithTTL's TTL, WithAutoExtend's maxHold, WithRetryDelay's min
	max        time.Duration // WithRetryDelay's max
	newBackOff func() backoff.BackOff
	meta       string // WithMeta's
	token      uint64 // Resume's: Handle.Token
}

type optionKind uint8

const (
	setTTL optionKind = iota + 1
	setAutoExtend
	setFencing
	setRetry
	setMeta
	setToken
	setRetryDelay
	setRetryAttempts
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
	case setRetryDelay:
		o.newBackOff = opt.newBackOff
		if opt.d <= 0 || opt.max < opt.d {
			o.err = fmt.Errorf("redlease: WithRetryDelay needs 0 < min <= max, got min %v, max %v", opt.d, opt.max)
		}
	case setRetryAttempts:
		o.attempts = opt.n
		if opt.n < 1 {
			o.err = fmt.Errorf("redlease: WithRetryAttempts needs n >= 1, got %d", opt.n)
		}
	}
}

type options struct {
	ttl        time.Duration
	newBackOff func() backoff.BackOff
	autoExtend bool
	maxHold    time.Duration // resolved: WithAutoExtend's, else Config.MaxHold, else DefaultMaxHoldTTLs·ttl
	fencing    bool
	meta       string // WithMeta's
	token      uint64 // Resume's: Handle.Token
	attempts   int    // WithRetryAttempts' (0: Config.RetryAttempts)
	err        error  // a bad option's, when apply can tell
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
// stateful; called when the call first waits). Config.RetryAttempts (or
// WithRetryAttempts) and the context still bound the attempts.
// WithRetryDelay sets the same schedule: of the two, the last given wins.
func WithRetry(newBackOff func() backoff.BackOff) Option {
	return Option{set: setRetry, newBackOff: newBackOff}
}

func (e *Engine) options(opts []Option) (options, error) {
	o := options{ttl: e.cfg.TTL, newBackOff: e.cfg.RetryBackOff}
	for _, opt := range opts {
		opt.apply(&o)
	}
	if o.err != nil {
		return o, o.err
	}
	if err := e.checkLeaseTTL(o.ttl); err != nil {
		return o, fmt.Errorf("redlease: WithTTL %w", err)
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

// checkLeaseTTL says what is wrong with a lease TTL of d (WithTTL's,
// ExtendTTL's), if anything.
func (e *Engine) checkLeaseTTL(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("must be > 0, got %v", d)
	}
	if err := checkTTL(d, e.cfg.DriftFactor); err != nil {
		return err
	}
	if d > e.cfg.MaxTTL {
		return fmt.Errorf("must not exceed MaxTTL (%v), got %v (a larger Config.MaxTTL allows it, at a cost: a node that may have lost its data sits out the restart quarantine, MaxTTL by default)", e.cfg.MaxTTL, d)
	}
	if d <= e.cfg.NodeTimeout {
		return fmt.Errorf("must exceed NodeTimeout (%v), got %v", e.cfg.NodeTimeout, d)
	}
	return nil
}

// WithRetryDelay replaces Config.RetryBackOff for this call with a
// randomized exponential schedule between min and max, without importing
// a backoff package: waits start near min and double up to max, each
// randomized by ±50% and kept within [min, max]. It needs 0 < min <= max.
// It and WithRetry set the same schedule: of the two, the last given
// wins. Config.RetryAttempts (or WithRetryAttempts) and the context still
// bound the attempts. Made once and reused, the option costs no
// allocation per call.
//
//	lease, err := e.Acquire(ctx, "invoice:42", engine.WithRetryDelay(20*time.Millisecond, time.Second))
func WithRetryDelay(min, max time.Duration) Option {
	newBackOff := func() backoff.BackOff { return boundedBackOff{exponentialBackOff(min, max), min, max} }
	return Option{set: setRetryDelay, d: min, max: max, newBackOff: newBackOff}
}

// WithRetryAttempts bounds this Acquire to n rounds that count, instead
// of Config.RetryAttempts: as there, rounds woken by a holder's release
// or expiry do not count, and the context bounds the wait for a holder.
// It needs n >= 1. It leaves the schedule between rounds (WithRetry,
// WithRetryDelay) as it is. TryAcquire makes one round whatever n is.
//
//	lease, err := e.Acquire(ctx, "invoice:42", engine.WithRetryAttempts(3))
func WithRetryAttempts(n int) Option {
	return Option{set: setRetryAttempts, n: n}
}

// boundedBackOff keeps the waits of an ExponentialBackOff, randomized
// around its interval, within [min, max].
type boundedBackOff struct {
	*backoff.ExponentialBackOff
	min, max time.Duration
}

// NextBackOff is the ExponentialBackOff's next wait, within [min, max].
func (b boundedBackOff) NextBackOff() time.Duration {
	return min(max(b.ExponentialBackOff.NextBackOff(), b.min), b.max)
}

// ExtendOption tunes one Lease.Extend call. Like Option, it is a value;
// the zero ExtendOption sets nothing.
type ExtendOption struct {
	ttl time.Duration
	set bool
}

// ExtendTTL makes d the lease's TTL from this extension on, as
// redislock's Refresh(ttl) does: the round sets it on the nodes (their
// PTTL), Until moves to the round's start plus d − drift, and later
// extensions, automatic ones included, keep d (the first at d/3). The TTL
// changes when the round starts, whatever its outcome: a failed round may
// have set it on some nodes, so a shorter TTL brings Until forward at
// once, and the retries carry d.
//
// d must be positive, exceed the drift allowance and Config.NodeTimeout,
// and not exceed Config.MaxTTL (else Extend fails, naming d and the
// bound, and runs no round). MaxTTL is the longest TTL any lease of the
// engine may carry, and so, by default, how long a node that may have
// lost its data sits out (Config.RestartQuarantine): raising it to allow
// a longer d lengthens every such quarantine. The lease's maximum hold still bounds it: no
// extension starts after it (ErrMaxHold), and the lease is held at most
// its maximum hold plus the TTL it was acquired with, counted from its
// acquisition, whatever TTLs it moved to: a d that would carry it further
// fails with ErrBeyondMaxHold (a shorter one may fit; the error says what
// does), and a shorter d moves the last start of an extension later by as
// much as it shortens the TTL.
//
// An Extend with ExtendTTL(d) that comes while a round with another TTL
// is in flight (an automatic extension, or an Extend without it) waits
// for that round to be decided, then runs its own; with the round's TTL,
// it joins the round, as an Extend without options does.
//
//	err := lease.Extend(ctx, engine.ExtendTTL(time.Minute))
func ExtendTTL(d time.Duration) ExtendOption {
	return ExtendOption{ttl: d, set: true}
}

// extendTTL is the TTL opts ask for, the last ExtendTTL given, checked
// as WithTTL's (0: the lease's own).
func (e *Engine) extendTTL(opts []ExtendOption) (time.Duration, error) {
	var o ExtendOption
	for _, opt := range opts {
		if opt.set {
			o = opt
		}
	}
	if !o.set {
		return 0, nil
	}
	if err := e.checkLeaseTTL(o.ttl); err != nil {
		return 0, fmt.Errorf("redlease: ExtendTTL %w", err)
	}
	return o.ttl, nil
}
