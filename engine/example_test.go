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
		log.Printf("someone else holds it: %v", err) // err lists each node's answer
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
