// Command leader is a candidate in a leader election: of all the
// processes that run it with the same -election, one leads at a time.
// Each candidate waits in line with Acquire for the election's lease
// (fenced, and kept alive while the leader lives); the one that holds it
// leads: it writes a heartbeat with its fencing token to a store, a
// Redis of its own, every -beat. The others wait, and the first in line
// takes over when the leader's lease ends: at once when it steps down
// (its release names the next), within a TTL when it dies.
//
// A leader steps down at once when it learns that its lease is gone,
// from the lease itself (Done, Err) or from the store, which refuses a
// heartbeat whose token is lower than one it has seen: a leader that
// stalled past its lease (a GC pause, a stopped VM) cannot write over its
// successor's heartbeats, even before it learns that it was deposed.
//
//	go run ./examples/leader -nodes 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 -store 127.0.0.1:7000
//
// It prints one line per change on standard output, for people and
// programs alike:
//
//	leader <token>             won the election: leads with this token
//	stepdown <token> <cause>   stopped leading: stale (the store knows a
//	                           later leader), lost or expired (the lease
//	                           ended), resigned (interrupted)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redlease/redlease/engine"
)

// maxTerm bounds a term: a lease is never kept alive without bound, so
// after maxTerm the leader steps down ("expired") and stands again,
// behind the candidates already in line.
const maxTerm = time.Hour

// retryInterval is the pause before standing again after a failed
// Acquire (nodes down or unreachable).
const retryInterval = 100 * time.Millisecond

type options struct {
	nodes    []string
	store    string
	name     string
	election string
	ttl      time.Duration
	beat     time.Duration
}

func main() {
	host, _ := os.Hostname()
	var o options
	nodes := flag.String("nodes", "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003", "comma-separated host:port of the lock nodes (independent Redis masters)")
	flag.StringVar(&o.store, "store", "127.0.0.1:7000", "host:port of the Redis that stores the heartbeats")
	flag.StringVar(&o.name, "name", fmt.Sprintf("%s:%d", host, os.Getpid()), "this candidate's name, stored with its heartbeats")
	flag.StringVar(&o.election, "election", "leader", "the election's name: the resource whose lease makes its holder leader")
	flag.DurationVar(&o.ttl, "ttl", 2*time.Second, "lease TTL: how soon a dead leader is replaced")
	flag.DurationVar(&o.beat, "beat", 200*time.Millisecond, "time between the leader's heartbeats")
	flag.Parse()
	o.nodes = strings.Split(*nodes, ",")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		log.Fatal(err)
	}
}

// run stands for election until ctx ends: it waits to lead, leads until
// its term ends, and stands again.
func run(ctx context.Context, o options) error {
	store, err := dialStore(o.store, o.election)
	if err != nil {
		return err
	}
	defer store.Close()
	e, err := engine.New(engine.Config{Nodes: o.nodes, TTL: o.ttl})
	if err != nil {
		return err
	}
	defer e.Close()

	for ctx.Err() == nil {
		// Wait in line, without polling, until this candidate holds the
		// lease: the holder's release (or its keys' expiry) wakes the
		// first in line. Only ctx bounds the wait.
		lease, err := e.Acquire(ctx, o.election, engine.WithFencing(), engine.WithAutoExtend(maxTerm))
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			log.Printf("election: %v", err) // too few nodes answered: stand again
			select {
			case <-ctx.Done():
			case <-time.After(retryInterval):
			}
			continue
		}
		cause := lead(ctx, lease, store, o)
		fmt.Printf("stepdown %d %s\n", lease.Token(), cause)
	}
	return nil
}

// lead does the leader's work until its lease ends, the store knows a
// later leader, or ctx ends, and says which. It releases the lease on its
// way out, so that the next in line takes over at once.
func lead(ctx context.Context, lease *engine.Lease, store *store, o options) (cause string) {
	defer lease.Release(context.Background())
	token := lease.Token()
	fmt.Printf("leader %d\n", token)
	tick := time.NewTicker(o.beat)
	defer tick.Stop()
	for {
		// The leader's work: until the lease ends (its context) and no
		// later than its validity deadline, which a leader that was
		// stopped for a while may have passed before its lease says so;
		// and with its token, so that the store refuses it once a later
		// leader wrote, however late it arrives.
		work, stop := context.WithDeadline(lease.Context(), lease.Until())
		err := store.Beat(work, token, o.name)
		stop()
		switch {
		case errors.Is(err, errStale):
			return "stale"
		case err != nil && work.Err() == nil:
			log.Printf("heartbeat: %v", err) // the store is unreachable: still the leader
		}
		select {
		case <-lease.Done():
			switch err := lease.Err(); {
			case errors.Is(err, engine.ErrLeaseLost):
				return "lost"
			case errors.Is(err, engine.ErrExpired):
				return "expired" // maxTerm reached
			default:
				return err.Error() // the engine closed: not here, it outlives lead
			}
		case <-ctx.Done():
			return "resigned"
		case <-tick.C:
		}
	}
}
