package engine

import (
	"context"
	"sync"
	"time"

	"github.com/redlease/redlease/lease"
)

// Lease is a held lock on a resource. Its methods are safe for concurrent
// use. Done and Err are the source of truth for whether it is still held:
// the holder must stop its protected work when Done closes, and in any case
// by Until.
//
// The methods of a nil *Lease (what a failed Acquire returns) answer as of
// a lease never held: Err, Release, Extend and Check return
// ErrNotAcquired, Done and Events are closed, Context is cancelled with
// ErrNotAcquired. A deferred Release after a failed Acquire is harmless.
type Lease struct {
	e        *Engine
	ref      lease.Ref
	state    *lease.State
	resource string
	value    string

	ctxOnce sync.Once
	ctx     context.Context
}

// Resource is the name the lease was acquired for.
func (l *Lease) Resource() string {
	if l == nil {
		return ""
	}
	return l.resource
}

// Value is the lease's owner value, stored at <KeyPrefix>{<resource>} on
// the nodes that granted it: 20 random bytes, URL-safe base64, then, with
// WithMeta, MetaSep ("|") and the meta. It is the lease's secret:
// whoever has it can Resume, and so release, the lease.
func (l *Lease) Value() string {
	if l == nil {
		return ""
	}
	return l.value
}

// Token is the lease's fencing token (WithFencing): larger than the token
// of every earlier holder of the resource. 0 without WithFencing.
func (l *Lease) Token() uint64 {
	if l == nil {
		return 0
	}
	return l.state.Token()
}

// Until is the validity deadline: the start of the winning round plus
// TTL − drift. It carries a monotonic clock reading, so it is immune to
// wall-clock jumps on this host.
func (l *Lease) Until() time.Time {
	if l == nil {
		return time.Time{}
	}
	return l.state.Until()
}

// Done is closed when the lease ends, for any reason: released, detached,
// lost, the engine closed, or at its deadline. A lease that reaches its deadline
// ends a small margin before Until (a fiftieth of its TTL, at least 2ms
// and at most 100ms; lease.EndMargin), so that Done closes before Until
// even when the timer fires late on a loaded machine; Until remains the
// validity deadline. It is closed exactly once: by the lease actor, or,
// when the deadline ends the lease, by the actor's deadline timer on its
// own goroutine, so that a busy actor cannot delay it, or by a call of
// Done, Err or Context's Err or Done made once that end has come on the
// monotonic clock, before the timer ran: after a pause of the process
// (SIGSTOP, a long GC, a virtual machine's), the holder that asks first
// learns that its lease is gone. (A channel got from Done before the
// pause closes when the timer runs, within a scheduler's round after
// the process goes on: ask again rather than keep it across long work.)
func (l *Lease) Done() <-chan struct{} {
	if l == nil {
		return closedDone
	}
	l.due()
	return l.state.Done()
}

// Err is nil while the lease is held; after Done closed it says why it
// ended: ErrReleased, ErrExpired, ErrLeaseLost or ErrDetached (and ErrClosed with
// ErrReleased when the engine closed). It reads the monotonic clock: it
// is not nil once the lease's end (see Done) has come, whether or not
// the deadline's timer has run.
func (l *Lease) Err() error {
	if l == nil {
		return ErrNotAcquired
	}
	l.due()
	return l.state.Err()
}

// due ends the lease if its end has come on the leases' clock, before
// its deadline timer ran.
func (l *Lease) due() { l.ref.ExpireIfDue(l.state) }

// Release deletes the lease's key on every node that holds it with this
// lease's value (another owner's key is never touched) and ends the lease
// with ErrReleased: Done closes at once. It returns as soon as a quorum of
// nodes deleted its key (a dead node does not hold it up), after at most
// Config.NodeTimeout, or when ctx ends. A node that did not answer in time
// gets the release again in the background, while the key may live on it.
//
// What it returns, and what to do:
//   - nil: no quorum of nodes can hold the lease's key any more, so the
//     resource is free for others. Nodes may not have answered (down,
//     slow): too few to hold it. Nothing to do.
//   - a *ReleaseError matching ErrLeaseLost: the key was not the lease's
//     (another owner's, or gone) on so many nodes that no quorum could
//     delete it: the lease had been lost before its release, and the work
//     it protected may have overlapped another holder's. This is the
//     error to act on, before reporting the work as done (fencing tokens
//     are for this: WithFencing).
//   - another *ReleaseError: the nodes that did not answer are a quorum,
//     and may still hold the key: others cannot acquire the resource until
//     the background release reaches them or the key expires (within the
//     lease's TTL). The lease's work was safe; there is nothing to retry.
//   - ctx's error: ctx ended first; the release goes on.
//   - the lease's Err when it had ended before the call (ErrReleased,
//     ErrExpired, ErrLeaseLost, with ErrClosed when the engine closed):
//     nothing was released now; ErrLeaseLost matters as above.
func (l *Lease) Release(ctx context.Context) error {
	if l == nil {
		return ErrNotAcquired
	}
	_, span := l.e.tel.start(ctx, "redlease.Release")
	err := l.release(ctx)
	l.e.tel.call(span, l, err)
	return err
}

func (l *Lease) release(ctx context.Context) error {
	reply := releaseReplies.get()
	r, err := ask(ctx, l, &lease.Release{State: l.state, Reply: reply}, reply)
	if err == nil {
		releaseReplies.put(reply)
	}
	switch {
	case err != nil:
		return err
	case r.Err != nil:
		return r.Err
	case r.Lost || r.Held:
		return &ReleaseError{Resource: l.resource, Nodes: l.e.nodeOutcomes(r.Votes, nil), Lost: r.Lost}
	}
	return nil
}

// ask sends msg to the lease actor and waits for its answer on reply, for
// ctx, or for the actor to be gone (a lease that ended answers with its
// Err).
func ask[T any](ctx context.Context, l *Lease, msg any, reply chan T) (T, error) {
	var zero T
	if l.state.Ended() {
		return zero, l.state.Err()
	}
	l.ref.Ask(msg)
	select {
	case r := <-reply:
		return r, nil
	case <-ctx.Done():
		return zero, contextError(ctx)
	case <-l.state.Stopped():
		select {
		case r := <-reply:
			return r, nil
		default:
			return zero, l.state.Err()
		}
	}
}

// Extend runs an extension round now (or joins the one in flight): a
// compare-and-PEXPIRE on all nodes that counts only if a quorum confirms
// before the current validity ends; Until then moves to the round's start
// plus TTL − drift. It returns nil when extended, an *ExtendError when the
// round failed (the lease still holds until Until), ErrMaxHold once the
// lease's maximum hold (Config.MaxHold, or WithAutoExtend's maxHold) has
// passed since it was acquired (no round runs; the lease expires at
// Until), and the lease's Err when it has ended, including when this round
// found it lost. It waits at most Config.NodeTimeout, or until ctx ends
// (the round goes on). ExtendTTL changes the lease's TTL with it.
//
// A round that extended the lease's own key on a quorum also heals it:
// on the nodes that answered that they hold no key (a node that lost it),
// it sets the key only if absent, for the TTL less the time since the
// round started, except on nodes that sit out a quarantine or may evict
// lock keys, and only where the node's epoch marker holds, as for an
// acquire. A lease won on a bare quorum so regains every healthy node.
// A round that finds the key absent on a quorum sets nothing: the lease is
// lost (package lease, Healing, says why).
func (l *Lease) Extend(ctx context.Context, opts ...ExtendOption) error {
	if l == nil {
		return ErrNotAcquired
	}
	ttl, err := l.e.extendTTL(opts)
	if err != nil {
		return err
	}
	_, span := l.e.tel.start(ctx, "redlease.Extend")
	reply := extendReplies.get()
	r, err := ask(ctx, l, &lease.Extend{State: l.state, TTL: ttl, Reply: reply}, reply)
	if err == nil {
		extendReplies.put(reply)
		err = r.Err
	}
	l.e.tel.call(span, l, err)
	return err
}

// Events returns the lease's event channel: Acquired first, then Extended
// and ExtendFailed, then exactly one terminal event (Lost, Released,
// Expired or Detached), after which the lease actor closes it. Delivery never blocks
// the lease: when the buffer (Config.EventBuffer) is full, non-terminal
// events are dropped and counted in Stats().EventsDropped, but the terminal
// event always arrives. Done and Err are the source of truth.
func (l *Lease) Events() <-chan Event {
	if l == nil {
		return closedEvents
	}
	return l.state.Events()
}

// Context returns a context that is cancelled when the lease ends, with
// context.Cause saying why (ErrReleased, ErrExpired, ErrLeaseLost, ...).
// Pass it to the work the lease protects: the lease ends, and the context
// is cancelled, before Until (see Done). It does not derive from the
// context given to Acquire, which the lease outlives by design (the
// lease lasts until released, lost or expired): WithContext gives one
// that ends with either.
func (l *Lease) Context() context.Context {
	if l == nil {
		return notAcquiredCtx
	}
	l.ctxOnce.Do(func() {
		ctx, cancel := context.WithCancelCause(context.Background())
		l.ctx = leaseContext{ctx, l}
		l.state.AfterEnd(func() { cancel(l.state.Err()) })
	})
	return l.ctx
}

// leaseContext is a lease's Context: a context cancelled when the lease
// ends, whose Err and Done also end the lease if its end has come on the
// monotonic clock before its deadline timer ran (see Done). The lease
// ends on this goroutine then, and cancels the context before Err
// returns. context.Cause finds the cancelled context within.
type leaseContext struct {
	context.Context
	l *Lease
}

func (c leaseContext) Err() error {
	c.l.due()
	return c.Context.Err()
}

func (c leaseContext) Done() <-chan struct{} {
	c.l.due()
	return c.Context.Done()
}

// WithContext returns a copy of parent that is also cancelled when the
// lease ends: the context for work that must stop when either the
// caller's context or the lease ends. context.Cause says which: the
// lease's Err (ErrReleased, ErrExpired, ErrLeaseLost, ...) or parent's
// cause. Call cancel when the work is done: it releases what the link
// to the lease holds (not the lease), and leaves nothing running. On a
// nil *Lease the context is cancelled at once, with ErrNotAcquired.
//
//	ctx, cancel := lease.WithContext(r.Context()) // r: an *http.Request
//	defer cancel()
//	err := work(ctx) // context.Cause(ctx): ErrLeaseLost, or the request's end
func (l *Lease) WithContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	leaseCtx := l.Context()
	if leaseCtx.Err() != nil { // ended: at once, not on AfterFunc's goroutine
		cancel(context.Cause(leaseCtx))
	}
	stop := context.AfterFunc(leaseCtx, func() { cancel(context.Cause(leaseCtx)) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// What the methods of a nil *Lease return: a lease never held.
var (
	closedDone     = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
	closedEvents   = func() chan Event { c := make(chan Event); close(c); return c }()
	notAcquiredCtx = func() context.Context {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(ErrNotAcquired)
		return ctx
	}()
)
