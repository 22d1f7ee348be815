package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/leakcheck"
	"github.com/redlease/redlease/internal/testwait"
)

// A lease outlives the context of its Acquire; WithContext ends with the
// caller's context or the lease, whichever ends first, and context.Cause
// says which; cancel leaves nothing behind.
func TestLeaseWithContext(t *testing.T) {
	c := startNodes(t, 3)
	e := newEngine(t, c.Addrs())

	acquireCtx, endAcquireCtx := context.WithCancel(t.Context())
	l, err := e.Acquire(acquireCtx, "ctx")
	if err != nil {
		t.Fatal(err)
	}
	endAcquireCtx()
	if err := l.Extend(t.Context()); err != nil || l.Err() != nil || l.Context().Err() != nil {
		t.Fatalf("after Acquire's context ended: Extend %v, Err %v, Context %v; want the lease held", err, l.Err(), l.Context().Err())
	}

	// The caller's context ends first: its cause, and the lease holds.
	errShutdown := errors.New("shutting down")
	parent, endParent := context.WithCancelCause(t.Context())
	byParent, cancelByParent := l.WithContext(parent)
	defer cancelByParent()
	byLease, cancelByLease := l.WithContext(t.Context())
	defer cancelByLease()
	if byParent.Err() != nil || byLease.Err() != nil {
		t.Fatalf("contexts of a held lease ended: %v, %v", byParent.Err(), byLease.Err())
	}
	endParent(errShutdown)
	waitDone(t, byParent, "the context whose parent ended")
	if cause := context.Cause(byParent); !errors.Is(cause, errShutdown) {
		t.Errorf("context.Cause after the parent ended = %v, want %v", cause, errShutdown)
	}
	if byLease.Err() != nil || l.Err() != nil {
		t.Fatalf("another parent's end reached the lease (%v) or its other context (%v)", l.Err(), byLease.Err())
	}

	// Linked and unlinked while the lease is held: nothing stays running.
	for range 100 {
		_, cancel := l.WithContext(context.Background())
		cancel()
	}
	if leaked := leakcheck.Leaked(time.Second, "(*Lease).WithContext"); leaked != "" {
		t.Fatalf("cancelled contexts left goroutines behind:\n%s", leaked)
	}
	cancelled, cancel := l.WithContext(context.Background())
	cancel()

	// The lease ends first: its Err.
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitDone(t, byLease, "the context of the released lease")
	if cause := context.Cause(byLease); !errors.Is(cause, ErrReleased) {
		t.Errorf("context.Cause after Release = %v, want ErrReleased", cause)
	}
	if cause := context.Cause(cancelled); !errors.Is(cause, context.Canceled) {
		t.Errorf("context.Cause of a context cancelled before the lease ended = %v, want context.Canceled", cause)
	}
	if leaked := leakcheck.Leaked(time.Second, "(*Lease).WithContext"); leaked != "" {
		t.Fatalf("the lease's end left goroutines behind:\n%s", leaked)
	}

	var never *Lease // what a failed Acquire returns
	ctx, cancelNever := never.WithContext(t.Context())
	defer cancelNever()
	waitDone(t, ctx, "the context of a lease never held")
	if cause := context.Cause(ctx); !errors.Is(cause, ErrNotAcquired) {
		t.Errorf("context.Cause for a nil lease = %v, want ErrNotAcquired", cause)
	}
}

// waitDone waits for ctx to end: WithContext cancels on the goroutine
// context.AfterFunc starts.
func waitDone(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	testwait.Eventually(t, 5*time.Second, what, func() bool { return ctx.Err() != nil })
}
