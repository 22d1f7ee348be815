// Command quickstart is the README's Quick start: it takes a lease on
// three Redis servers, works while it is valid, and releases it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/redlease/redlease/engine"
)

func main() {
	nodes := flag.String("nodes", "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003", "the Redis servers, comma-separated")
	fresh := flag.Bool("fresh", false, "the servers are brand-new: mark them new (once per deployment)")
	flag.Parse()
	cfg := engine.Config{Nodes: strings.Split(*nodes, ","), TTL: 10 * time.Second}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if *fresh {
		// Unmarked nodes sit out a TTL in every engine: an empty node looks
		// just like one that lost live leases' keys in a restart. MarkNew
		// refuses (ErrLiveLocks) once any node holds a lock key.
		if err := engine.MarkNew(ctx, cfg); err != nil {
			log.Fatal(err)
		}
	}

	e, err := engine.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close() // releases whatever is still held

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
	fmt.Printf("acquired %s until %s\n", lease.Resource(), lease.Until().Format(time.RFC3339Nano))

	// Work only until the validity deadline: after Until another holder may
	// exist. (Lease.Done closes when the lease ends for any reason.)
	work, stop := context.WithDeadline(ctx, lease.Until())
	defer stop()
	if err := writeInvoice(work, 42); err != nil {
		log.Print(err)
	}
}

// writeInvoice stands for the work the lease protects.
func writeInvoice(ctx context.Context, id int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	fmt.Printf("invoice %d written\n", id)
	return nil
}
