// Command jobworker is one worker of a job table shared by many worker
// processes. Each job is a resource: a worker takes a job's lease with
// TryAcquire (fenced, and kept alive while the worker lives), does the
// work under the lease's context, writes the result to a store with the
// lease's fencing token, and releases. The store, a Redis of its own,
// refuses a write whose token is lower than one it has seen for the job,
// so a worker that stalled past its lease (a GC pause, a stopped VM)
// cannot overwrite the work of the worker that took the job over.
//
//	go run ./examples/jobworker -nodes 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 -store 127.0.0.1:7000
//
// Run several at once; each exits when every job is done. It prints one
// line per step on standard output, for people and programs alike:
//
//	job <id> start <token>   took the job's lease
//	job <id> resume <token>  took up the job's lease that a stopping worker handed over
//	job <id> handoff <token> (-handoff) stopping: handed the job's lease over, unreleased
//	job <id> skip <token>    the job was done already
//	job <id> lost <token>    the lease ended before the result was written: nothing written
//	job <id> stall <token>   (-stall) about to stop itself before the write
//	job <id> done <token>    the store took the result
//	job <id> stale <token>   the store refused the result: a later holder fenced the job
//	exit                     every job is done
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redlease/redlease/engine"
)

// pollInterval is how long a worker waits before it looks at the table
// again after a pass in which it found nothing to do: the jobs left are
// held by other workers.
const pollInterval = 100 * time.Millisecond

// maxJob bounds how long a job's lease is kept alive: a worker stuck in a
// job longer loses it, and another worker takes the job over.
const maxJob = time.Minute

type options struct {
	nodes   []string
	store   string
	name    string
	jobs    int
	work    time.Duration
	ttl     time.Duration
	stall   bool
	handoff bool
}

func main() {
	host, _ := os.Hostname()
	var o options
	nodes := flag.String("nodes", "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003", "comma-separated host:port of the lock nodes (independent Redis masters)")
	flag.StringVar(&o.store, "store", "127.0.0.1:7000", "host:port of the Redis that stores the results")
	flag.StringVar(&o.name, "name", fmt.Sprintf("%s:%d", host, os.Getpid()), "this worker's name, stored with its results")
	flag.IntVar(&o.jobs, "jobs", 8, "number of jobs in the table (1 to n)")
	flag.DurationVar(&o.work, "work", 500*time.Millisecond, "how long each job's work takes")
	flag.DurationVar(&o.ttl, "ttl", 2*time.Second, "lease TTL: how soon a job held by a stopped worker is taken over")
	flag.BoolVar(&o.stall, "stall", false, "stop this process (SIGSTOP) once, after the last look at its first job's lease and before the write, as a long GC pause would; kill -CONT resumes it")
	flag.BoolVar(&o.handoff, "handoff", false, "when stopped (SIGINT, SIGTERM) during a job, hand the job's lease to another worker instead of finishing the job")
	flag.Parse()
	o.nodes = strings.Split(*nodes, ",")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		log.Fatal(err)
	}
}

// run works through the table until every job is done or ctx ends.
func run(ctx context.Context, o options) error {
	store, err := dialStore(o.store)
	if err != nil {
		return err
	}
	defer store.Close()
	e, err := engine.New(engine.Config{Nodes: o.nodes, TTL: o.ttl})
	if err != nil {
		return err
	}
	defer e.Close() // releases a lease still held when ctx ends

	w := &worker{engine: e, store: store, options: o}
	for {
		left, err := w.pass(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if left == 0 {
			fmt.Println("exit")
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pollInterval):
		}
	}
}

type worker struct {
	engine *engine.Engine
	store  *store
	options
	stalled bool
}

// pass looks at every job once, starting at a random one so that workers
// spread over the table, does those it can take, and returns how many
// jobs are still not done.
func (w *worker) pass(ctx context.Context) (left int, err error) {
	first := rand.IntN(w.jobs)
	for i := range w.jobs {
		job := strconv.Itoa((first+i)%w.jobs + 1)
		done, err := w.store.Done(ctx, job)
		if err != nil {
			return 0, err
		}
		if done {
			continue
		}
		lease, err := w.resume(ctx, job)
		if err != nil {
			return 0, err
		}
		if lease == nil {
			// One round: a job held by another worker is skipped, not
			// waited for. The lease keeps itself alive while this process
			// runs, so a job may take longer than the TTL; a stopped or
			// dead worker stops extending, and its lease ends within a TTL.
			lease, err = w.engine.TryAcquire(ctx, "job:"+job, engine.WithFencing(), engine.WithAutoExtend(maxJob))
			if errors.Is(err, engine.ErrNotAcquired) && ctx.Err() == nil {
				continue
			}
			if err != nil {
				return 0, err
			}
			fmt.Printf("job %s start %d\n", job, lease.Token())
		}
		if err := w.do(ctx, lease, job); err != nil {
			return 0, err
		}
	}
	return w.store.Left(ctx, w.jobs)
}

// resume takes up the job's lease if a stopping worker handed it over
// (-handoff): nil when none did, or the lease is gone.
func (w *worker) resume(ctx context.Context, job string) (*engine.Lease, error) {
	h, ok, err := w.store.TakeHandOff(ctx, job)
	if err != nil || !ok {
		return nil, err
	}
	lease, err := w.engine.Resume(ctx, h, engine.WithAutoExtend(maxJob))
	if errors.Is(err, engine.ErrNotAcquired) && ctx.Err() == nil {
		log.Printf("job %s: the lease handed over is gone: %v", job, err)
		return nil, nil // its keys expired: the job is taken as any other
	}
	if err != nil {
		return nil, err
	}
	fmt.Printf("job %s resume %d\n", job, lease.Token())
	return lease, nil
}

// handOff lets the job's lease go without releasing it (Detach), and
// leaves its handle in the store for another worker to take it up.
// The engine's Close, as this worker stops, no longer releases it.
func (w *worker) handOff(ctx context.Context, lease *engine.Lease, job string) error {
	h, err := lease.Detach()
	if err != nil {
		fmt.Printf("job %s lost %d\n", job, lease.Token())
		return nil
	}
	if err := w.store.HandOff(context.WithoutCancel(ctx), job, h); err != nil {
		return err
	}
	fmt.Printf("job %s handoff %d\n", job, h.Token)
	return nil
}

// do does one job under its lease and releases the lease.
func (w *worker) do(ctx context.Context, lease *engine.Lease, job string) error {
	defer lease.Release(context.Background())
	token := lease.Token()

	// Fence first: the store raises the job's fence to this token, so a
	// write of an earlier holder still on its way is refused from now on,
	// and says whether such a write got in first: the job is done then.
	done, err := w.store.Claim(lease.Context(), job, token)
	switch {
	case errors.Is(err, errStale):
		fmt.Printf("job %s stale %d\n", job, token)
		return nil
	case lease.Err() != nil:
		fmt.Printf("job %s lost %d\n", job, token)
		return nil
	case err != nil:
		return err
	case done:
		fmt.Printf("job %s skip %d\n", job, token)
		return nil
	}

	// The work runs under the lease's context: it stops when the lease
	// ends (lost, or the engine closed), before the lease's Until; with
	// -handoff, also when this worker is told to stop, which hands the
	// job over.
	workCtx := lease.Context()
	if w.handoff {
		var cancel context.CancelFunc
		workCtx, cancel = lease.WithContext(ctx)
		defer cancel()
	}
	result, err := work(workCtx, job, w.work)
	if err != nil && w.handoff && ctx.Err() != nil && lease.Err() == nil {
		return w.handOff(ctx, lease, job)
	}
	if err != nil {
		fmt.Printf("job %s lost %d\n", job, token)
		log.Printf("job %s: %v", job, context.Cause(lease.Context()))
		return nil
	}
	// A last look, and then the write. The lease may have passed its
	// validity deadline before it says so (this process may have been
	// stopped), so the look is at Until too. Nothing can make the look
	// and the write one step: this process may stop between them for
	// longer than the lease has left, and another worker may take the job
	// over meanwhile. The store's fence is what refuses this write then.
	if lease.Err() != nil || !time.Now().Before(lease.Until()) {
		fmt.Printf("job %s lost %d\n", job, token)
		return nil
	}
	if w.stall && !w.stalled {
		w.stalled = true
		fmt.Printf("job %s stall %d\n", job, token)
		if err := stopSelf(); err != nil {
			return err
		}
	}
	// The write runs under the worker's context, not the lease's: whether
	// it still counts is the store's call, by the token, and a write cut
	// short when the lease ends might have reached the store anyway.
	err = w.store.Write(ctx, job, token, result, w.name)
	switch {
	case errors.Is(err, errStale):
		fmt.Printf("job %s stale %d\n", job, token)
		return nil
	case err != nil:
		return err
	}
	fmt.Printf("job %s done %d\n", job, token)
	return nil
}

// work is the job itself: here, it takes d and returns a result, unless
// ctx ends first.
func work(ctx context.Context, job string, d time.Duration) (string, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return "result of job " + job, nil
	case <-ctx.Done():
		return "", context.Cause(ctx)
	}
}
