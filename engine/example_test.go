package engine_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/redlease/redlease/engine"
)

// Take a lease, do the protected work while it is valid, release it.
func Example() {
	e, err := engine.New(engine.Config{
		Nodes: []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379", "10.0.0.4:6379", "10.0.0.5:6379"},
		TTL:   10 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close() // releases whatever is still held

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lease, err := e.Acquire(ctx, "invoice:42")
	if errors.Is(err, engine.ErrNotAcquired) {
		// Held by another owner until ctx ended, or too few nodes could
		// grant it (down, or quarantined): err names each node's answer.
		log.Printf("not acquired: %v", err)
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(context.Background())

	// Work only until the validity deadline: after Until another holder may
	// exist. (Lease.Done closes when the lease ends for any reason.)
	work, stop := context.WithDeadline(ctx, lease.Until())
	defer stop()
	if err := writeInvoice(work, 42); err != nil {
		log.Print(err)
	}
}

// TryAcquire makes a single round: it fails at once on a held resource.
func ExampleEngine_TryAcquire() {
	var e *engine.Engine // from engine.New
	lease, err := e.TryAcquire(context.Background(), "nightly-report", engine.WithTTL(time.Minute))
	if err != nil {
		var ae *engine.AcquireError
		if errors.As(err, &ae) {
			for _, n := range ae.Nodes {
				log.Printf("%s: %v", n.Addr, n.Outcome)
			}
		}
		return
	}
	defer lease.Release(context.Background())
}

func writeInvoice(ctx context.Context, id int) error { return ctx.Err() }

// Watch a lease that keeps itself alive: its events say when it was
// extended, when an extension failed and how, and how it ended; its
// context is what the protected work runs under.
func ExampleLease_Events() {
	var e *engine.Engine // from engine.New
	lease, err := e.Acquire(context.Background(), "leader", engine.WithTTL(3*time.Second), engine.WithAutoExtend(time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	go lead(lease.Context()) // cancelled, with the cause, when the lease ends

	for ev := range lease.Events() { // closed after the terminal event
		switch ev.Kind {
		case engine.Extended:
			log.Printf("%s held until %v", ev.Resource, ev.Until)
		case engine.ExtendFailed:
			log.Printf("%s: extension failed, still held until %v: %v", ev.Resource, ev.Until, ev.Err)
		case engine.Lost, engine.Released, engine.Expired:
			log.Printf("%s ended (%v): %v", ev.Resource, ev.Kind, ev.Err)
		}
	}
	// Done and Err are the source of truth, even if events were dropped.
	<-lease.Done()
	if errors.Is(lease.Err(), engine.ErrLeaseLost) {
		log.Print("stepping down: leadership lost")
	}
}

func lead(ctx context.Context) { <-ctx.Done() }

// Say who holds a lease: its meta is stored with it, and named to whoever
// is refused, so that followers know their leader without a side channel.
func ExampleWithMeta() {
	var e *engine.Engine // from engine.New
	lease, err := e.TryAcquire(context.Background(), "leader", engine.WithMeta("10.0.0.7:8080"))
	var ae *engine.AcquireError
	if errors.As(err, &ae) && ae.HeldBy != "" {
		log.Printf("following the leader at %s", ae.HeldBy) // its error says: held by "10.0.0.7:8080"
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(context.Background())
}

// Ask the nodes whether a lease is still held, and for how long, without
// extending it.
func ExampleLease_Check() {
	var lease *engine.Lease // from Acquire
	c, err := lease.Check(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	if !c.Quorum {
		log.Printf("held on %d nodes only; the resource is held by %q", c.Holding, c.Meta)
	}
	log.Printf("a quorum's keys live %v more", c.TTL)
}

// Lock in one request, release in another: the first process lets the
// lease go with Detach, which leaves its keys, and hands its Handle on;
// the second takes the lease up by it.
func ExampleEngine_Resume() {
	var e *engine.Engine // from engine.New
	var h engine.Handle  // from Lease.Detach, in the process that acquired
	lease, err := e.Resume(context.Background(), h)
	if errors.Is(err, engine.ErrLeaseLost) {
		log.Print("the lease is gone: expired, released or taken over")
		return
	}
	if err != nil {
		log.Fatal(err) // nodes did not answer: it may still be held
	}
	if err := lease.Release(context.Background()); err != nil {
		log.Print(err)
	}
}

// Retry on a schedule of your own without importing a backoff package:
// waits from 20ms, doubling up to a second, each randomized.
func ExampleWithRetryDelay() {
	var e *engine.Engine // from engine.New
	lease, err := e.Acquire(context.Background(), "invoice:42", engine.WithRetryDelay(20*time.Millisecond, time.Second))
	if err != nil {
		log.Print(err)
		return
	}
	defer lease.Release(context.Background())
}

// Give up after three rounds that failed for want of nodes; waiting for
// a holder's release does not count (the context bounds that).
func ExampleWithRetryAttempts() {
	var e *engine.Engine // from engine.New
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := e.Acquire(ctx, "invoice:42", engine.WithRetryAttempts(3))
	if err != nil {
		log.Print(err)
		return
	}
	defer lease.Release(context.Background())
}

// Serve a request under a lease: the work stops when the request's
// context ends or when the lease does, and context.Cause says which.
func ExampleLease_WithContext() {
	var lease *engine.Lease // from Acquire, held beyond this request
	var request context.Context
	ctx, cancel := lease.WithContext(request)
	defer cancel()
	if err := writeInvoice(ctx, 42); err != nil {
		log.Printf("stopped: %v", context.Cause(ctx)) // e.g. ErrLeaseLost, or the request's end
	}
}

// Extend a lease to a longer TTL before a step that must not be
// interrupted by an extension that comes late; later extensions keep it.
func ExampleExtendTTL() {
	var lease *engine.Lease // from Acquire
	err := lease.Extend(context.Background(), engine.ExtendTTL(time.Minute))
	switch {
	case errors.Is(err, engine.ErrBeyondMaxHold):
		log.Printf("a minute would outlast the lease's maximum hold: %v", err)
	case err != nil:
		log.Printf("not extended, still held until %v: %v", lease.Until(), err)
	}
}
