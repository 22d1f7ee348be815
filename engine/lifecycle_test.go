package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/redlease/redlease/internal/testwait"
	"github.com/redlease/redlease/lease"
)

// collect reads a lease's events until the channel closes.
func collect(t *testing.T, l *Lease, limit time.Duration) []Event {
	t.Helper()
	var evs []Event
	timeout := time.After(limit)
	for {
		select {
		case ev, ok := <-l.Events():
			if !ok {
				return evs
			}
			evs = append(evs, ev)
		case <-timeout:
			t.Fatalf("event channel still open after %v; got %v", limit, kinds(evs))
		}
	}
}

// waitExtended waits until l has emitted n Extended events, failing the
// test after limit or if the lease ends first. A failed round does not
// end a lease, which tries again: on a loaded machine one may time out.
func waitExtended(t *testing.T, l *Lease, n int, limit time.Duration) {
	t.Helper()
	timeout := time.After(limit)
	for seen := 0; seen < n; {
		select {
		case ev, ok := <-l.Events():
			if !ok || ev.Kind.Terminal() {
				t.Fatalf("lease %s: event %v before %d extensions: %v", l.Resource(), ev.Kind, n, l.Err())
			}
			if ev.Kind == Extended {
				seen++
			}
		case <-timeout:
			t.Fatalf("lease %s: %d of %d extensions after %v", l.Resource(), seen, n, limit)
		}
	}
}

func kinds(evs []Event) []EventKind {
	out := make([]EventKind, len(evs))
	for i, ev := range evs {
		out[i] = ev.Kind
	}
	return out
}

func TestAutoExtendKeepsLeaseAlive(t *testing.T) {
	t.Parallel() // it waits out TTLs on nodes of its own
	c := startNodes(t, 5)
	e := newEngine(t, c.Addrs())
	ctx := t.Context()
	l, err := e.Acquire(ctx, "keep", WithTTL(time.Second), WithAutoExtend(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	first := l.Until()
	// Three TTLs: the key of a lease that was not extended would be gone.
	const kept = 3 * time.Second
	time.Sleep(kept)
	select {
	case <-l.Done():
		t.Fatalf("auto-extended 1s lease ended after %v: %v", kept, l.Err())
	default:
	}
	if !l.Until().After(first.Add(2 * time.Second)) {
		t.Fatalf("Until moved from %v to %v in 3s", first, l.Until())
	}
	if got := count(values(t, c, "keep"), l.Value()); got < 3 {
		t.Fatalf("key on %d nodes after 3s", got)
	}
	for _, n := range c.Nodes {
		if pttl, err := n.PTTL(ctx, lockKey("keep")); err != nil || pttl > time.Second {
			t.Fatalf("PTTL %v, %v: want at most the 1s TTL", pttl, err)
		}
	}
	if err := l.Extend(ctx); err != nil {
		t.Fatalf("manual Extend: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, l, time.Second)
	ks := kinds(evs)
	if ks[0] != Acquired || ks[len(ks)-1] != Released || len(ks) < 6 {
		t.Fatalf("events %v: want Acquired, several Extended, Released", ks)
	}
	for i, ev := range evs[1 : len(evs)-1] {
		if ev.Kind != Extended || !ev.Until.After(evs[i].Until) || ev.Resource != "keep" {
			t.Fatalf("event %d %+v: want Extended with Until moving forward", i+1, ev)
		}
	}
}

// The holder learns of the loss no later than the validity deadline, with
// the events that led to it.
func TestPausedMajorityLosesLeaseByDeadline(t *testing.T) {
	c := startNodes(t, 5)
	e := newEngine(t, c.Addrs())
	l, err := e.Acquire(t.Context(), "fragile", WithTTL(time.Second), WithAutoExtend(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var evs []Event
	for ev := range l.Events() { // wait for one extension
		evs = append(evs, ev)
		if ev.Kind == Extended {
			break
		}
	}
	for _, i := range []int{0, 2, 4} {
		if err := c.Nodes[i].Pause(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, n := range c.Nodes {
			_ = n.Resume()
		}
	})
	<-l.Done()
	lag := time.Since(l.Until())
	// Armed lease.EndMargin before Until; never earlier. The upper bound is
	// only scheduling slack: `go run ./bench -workload held` measures how
	// often Done beats Until under load.
	if margin := lease.EndMargin(time.Second); lag < -margin || lag > 100*time.Millisecond {
		t.Fatalf("Done closed %v after Until, want from -%v (the end margin) to scheduling slack", lag, margin)
	}
	t.Logf("lost-signal lag: %v after the deadline", lag)
	if !errors.Is(l.Err(), ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", l.Err())
	}
	checkOnePrefix(t, l.Err())
	evs = append(evs, collect(t, l, time.Second)...)
	ks := kinds(evs)
	if ks[0] != Acquired || ks[1] != Extended || ks[len(ks)-1] != Lost {
		t.Fatalf("events %v: want Acquired, Extended…, ExtendFailed…, Lost", ks)
	}
	failed := 0
	for _, ev := range evs[2 : len(evs)-1] {
		if ev.Kind == ExtendFailed {
			failed++
			var xe *ExtendError
			if !errors.As(ev.Err, &xe) || len(xe.Nodes) != 5 {
				t.Fatalf("ExtendFailed Err %v: want an *ExtendError naming 5 nodes", ev.Err)
			}
		} else if ev.Kind != Extended {
			t.Fatalf("events %v: unexpected %v", ks, ev.Kind)
		}
	}
	if failed == 0 {
		t.Fatalf("events %v: no ExtendFailed before Lost", ks)
	}
}

func TestForeignOwnerMeansLost(t *testing.T) {
	c := startNodes(t, 5)
	e := newEngine(t, c.Addrs())
	ctx := t.Context()
	l, err := e.Acquire(ctx, "stolen", WithTTL(900*time.Millisecond), WithAutoExtend(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		if err := n.Set(ctx, lockKey("stolen"), "thief", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	stolen := time.Now()
	select {
	case <-l.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("lease not lost after its key was overwritten everywhere")
	}
	// At the next extension (at a third of the TTL), not at the deadline.
	if took := time.Since(stolen); took > 600*time.Millisecond {
		t.Fatalf("lost after %v: want it at the next extension, ~300ms", took)
	}
	var xe *ExtendError
	if !errors.Is(l.Err(), ErrLeaseLost) || !errors.As(l.Err(), &xe) {
		t.Fatalf("Err = %v, want ErrLeaseLost with node outcomes", l.Err())
	}
	checkOnePrefix(t, l.Err())
	if got := count(values(t, c, "stolen"), "thief"); got != 5 {
		t.Fatalf("the other owner's key is on %d nodes, want 5", got)
	}
	if ks := kinds(collect(t, l, time.Second)); ks[len(ks)-1] != Lost {
		t.Fatalf("events %v: want Lost last", ks)
	}
	if err := l.Extend(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Extend after loss = %v, want ErrLeaseLost", err)
	}
}

func TestMaxHoldThenExpired(t *testing.T) {
	c := startNodes(t, 3)
	e := newEngine(t, c.Addrs())
	const ttl, maxHold = 600 * time.Millisecond, 1500 * time.Millisecond
	start := time.Now()
	l, err := e.Acquire(t.Context(), "bounded", WithTTL(ttl), WithAutoExtend(maxHold))
	if err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	held := time.Since(start)
	if held < maxHold || held > maxHold+ttl+100*time.Millisecond {
		t.Fatalf("held %v, want between maxHold %v and maxHold+TTL", held, maxHold)
	}
	if !errors.Is(l.Err(), ErrExpired) {
		t.Fatalf("Err = %v, want ErrExpired", l.Err())
	}
	ks := kinds(collect(t, l, time.Second))
	if ks[len(ks)-1] != Expired || len(ks) < 4 {
		t.Fatalf("events %v: want Acquired, Extended…, Expired", ks)
	}
	if _, err := e.Acquire(t.Context(), "x", WithAutoExtend(0)); err == nil {
		t.Fatal("WithAutoExtend(0) accepted: an unbounded lease")
	}
}

// Lease.Extend on a lease without WithAutoExtend works until Config.MaxHold
// has passed since the acquire, then fails with ErrMaxHold (which says
// nothing of a loss) and the lease expires at its deadline.
func TestManualExtendStopsAtMaxHold(t *testing.T) {
	const ttl, maxHold = time.Second, 400 * time.Millisecond
	c := startNodes(t, 3)
	e := newEngine(t, c.Addrs(), func(cfg *Config) { cfg.MaxHold = maxHold })
	ctx := t.Context()
	before := time.Now()
	l, err := e.Acquire(ctx, "manual", WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	// The winning round started between before and after; the bound runs
	// from its start.
	// pace: the extensions come this far apart, so that at most 5 fit in
	// the max hold and their events in the lease's buffer.
	const pace = maxHold / 4
	extends := 0
	for {
		called := time.Now()
		err := l.Extend(ctx)
		if err == nil {
			if !called.Before(after.Add(maxHold)) {
				t.Fatalf("Extend called %v after the acquire returned succeeded: past the %v max hold", called.Sub(after), maxHold)
			}
			extends++
			time.Sleep(pace)
			continue
		}
		if !errors.Is(err, ErrMaxHold) {
			t.Fatalf("Extend = %v, want nil or ErrMaxHold", err)
		}
		if got := time.Since(before); got < maxHold {
			t.Fatalf("ErrMaxHold %v after the acquire, before the %v max hold", got, maxHold)
		}
		for _, not := range []error{ErrLeaseLost, ErrExpired, ErrReleased, ErrNotAcquired, ErrClosed} {
			if errors.Is(err, not) {
				t.Fatalf("ErrMaxHold matches %v", not)
			}
		}
		break
	}
	if extends == 0 {
		t.Fatal("no Extend succeeded within the max hold")
	}
	// Refused again, and no round runs: Until stays put.
	until := l.Until()
	if err := l.Extend(ctx); !errors.Is(err, ErrMaxHold) && !errors.Is(err, ErrExpired) {
		t.Fatalf("second Extend past the max hold = %v", err)
	}
	if !l.Until().Equal(until) {
		t.Fatalf("Until moved from %v to %v past the max hold", until, l.Until())
	}
	if bound := after.Add(maxHold + ttl); l.Until().After(bound) {
		t.Fatalf("Until %v beyond acquire + max hold + TTL %v", l.Until(), bound)
	}
	<-l.Done()
	if !errors.Is(l.Err(), ErrExpired) {
		t.Fatalf("Err = %v, want ErrExpired", l.Err())
	}
	ks := kinds(collect(t, l, time.Second))
	if ks[0] != Acquired || ks[len(ks)-1] != Expired || len(ks) != extends+2 {
		t.Fatalf("events %v: want Acquired, %d × Extended, Expired", ks, extends)
	}
}

// WithAutoExtend's maxHold bounds Lease.Extend on that lease too.
func TestAutoExtendMaxHoldBoundsExtend(t *testing.T) {
	const ttl, maxHold = time.Second, 500 * time.Millisecond
	c := startNodes(t, 3)
	e := newEngine(t, c.Addrs()) // Config.MaxHold (10 TTLs) does not apply
	ctx := t.Context()
	l, err := e.Acquire(ctx, "auto", WithTTL(ttl), WithAutoExtend(maxHold))
	if err != nil {
		t.Fatal(err)
	}
	// The max hold counts from the winning round's start, which is before
	// Acquire returned: past returned+maxHold it has surely passed.
	// past: a moment beyond the max hold, so that it has surely passed.
	const past = 10 * time.Millisecond
	returned := time.Now()
	time.Sleep(time.Until(returned.Add(maxHold + past)))
	// The last automatic extension started before maxHold, so the lease
	// holds until well after it.
	if err := l.Extend(ctx); !errors.Is(err, ErrMaxHold) {
		t.Fatalf("Extend past WithAutoExtend's max hold = %v, want ErrMaxHold", err)
	}
	<-l.Done()
	if !errors.Is(l.Err(), ErrExpired) {
		t.Fatalf("Err = %v, want ErrExpired", l.Err())
	}
}

func TestReleaseStopsExtension(t *testing.T) {
	c := startNodes(t, 3)
	e := newEngine(t, c.Addrs())
	ctx := t.Context()
	l, err := e.Acquire(ctx, "stop", WithTTL(300*time.Millisecond), WithAutoExtend(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	waitExtended(t, l, 1, 5*time.Second) // release while extension is under way
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	cause := context.Cause(l.Context())
	if !errors.Is(cause, ErrReleased) {
		t.Fatalf("Context cause = %v, want ErrReleased", cause)
	}
	waitGone(t, c, "stop")
	// An extension under way at the Release would land within a node
	// round trip; this is many.
	const quiet = 500 * time.Millisecond
	testwait.Never(t, quiet, "the key came back after Release", func() bool { return count(values(t, c, "stop"), "") != 3 })
}

// A subscriber that never reads costs drops, not delays.
func TestStuckSubscriberDelaysNothing(t *testing.T) {
	c := startNodes(t, 3)
	e := newEngine(t, c.Addrs())
	ctx := t.Context()
	stuck, cancelStuck := e.Subscribe(0) // never read
	defer cancelStuck()
	events, cancel := e.Subscribe(1000)

	var leases []*Lease
	for i := range 20 {
		l, err := e.Acquire(ctx, fmt.Sprintf("s%d", i), WithTTL(300*time.Millisecond), WithAutoExtend(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	for _, l := range leases {
		waitExtended(t, l, 3, 5*time.Second)
	}
	for _, l := range leases {
		if l.Err() != nil {
			t.Fatalf("lease %s ended: %v", l.Resource(), l.Err())
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	seen := map[string][]EventKind{}
	for ev := range events {
		seen[ev.Resource] = append(seen[ev.Resource], ev.Kind)
	}
	for _, l := range leases {
		ks := seen[l.Resource()]
		if len(ks) < 4 || ks[0] != Acquired || ks[len(ks)-1] != Released {
			t.Fatalf("subscriber saw %v for %s: want Acquired, Extended…, Released", ks, l.Resource())
		}
	}
	if e.Stats().EventsDropped == 0 {
		t.Fatal("the stuck subscriber's losses were not counted")
	}
	select {
	case _, ok := <-stuck:
		if ok {
			t.Fatal("an unbuffered subscriber that never read got an event")
		}
	default:
	}
}

// Engine.Subscribe sees every lease's events; cancelling closes it; Close
// closes the rest after the leases' last events.
func TestSubscribeAndClose(t *testing.T) {
	c := startNodes(t, 3)
	e, err := New(Config{Nodes: c.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	events, _ := e.Subscribe(100)
	cancelled, cancel := e.Subscribe(100)
	cancel()
	cancel() // idempotent
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			if _, err := e.Acquire(ctx, fmt.Sprintf("c%d", i)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	for range cancelled {
		// drained: it must be closed
	}
	got := map[string][]EventKind{}
	for ev := range events {
		got[ev.Resource] = append(got[ev.Resource], ev.Kind)
		if ev.Kind == Released && !errors.Is(ev.Err, ErrClosed) {
			t.Fatalf("Released by Close with Err %v", ev.Err)
		}
	}
	for i := range 5 {
		if ks := got[fmt.Sprintf("c%d", i)]; fmt.Sprint(ks) != "[Acquired Released]" {
			t.Fatalf("lease c%d events %v, want [Acquired Released]", i, ks)
		}
	}
	after, _ := e.Subscribe(1)
	if _, ok := <-after; ok {
		t.Fatal("Subscribe after Close returned an open channel")
	}
}

// A subscription made once Acquire returned sees none of what came before
// it: the lease's Acquired was published before the caller had the lease
// (a CI run once found one at the head of a later subscription). Each
// round starts a subscription the moment Acquire returns; its first event
// must be the lease's Released.
func TestSubscribeAfterAcquireSeesNoAcquired(t *testing.T) {
	c := startNodes(t, 1)
	e := newEngine(t, c.Addrs())
	for i := range 300 {
		l, err := e.Acquire(t.Context(), "after")
		if err != nil {
			t.Fatal(err)
		}
		events, stop := e.Subscribe(8)
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		if ev := <-events; ev.Kind != Released {
			t.Fatalf("round %d: first event %v after Acquire returned, want Released", i, ev)
		}
		stop()
	}
}

func TestEventKindString(t *testing.T) {
	want := map[EventKind]string{Acquired: "Acquired", Extended: "Extended", ExtendFailed: "ExtendFailed",
		Lost: "Lost", Released: "Released", Expired: "Expired", Detached: "Detached", 0: "EventKind(0)", 42: "EventKind(42)"}
	for k, s := range want {
		if k.String() != s {
			t.Errorf("%d.String() = %q, want %q", int(k), k.String(), s)
		}
	}
}

// Close does not wait for a node that is down: a release still kept for
// it (sent again once the node answers) is dropped, and the key there
// expires by its TTL, as Close's doc says (issue 27, 11).
func TestCloseDropsReleasesForADownNode(t *testing.T) {
	c := startNodes(t, 3)
	e, err := New(Config{Nodes: c.Addrs(), TTL: 5 * time.Second, NodeTimeout: 100 * time.Millisecond,
		HealthInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l, err := e.TryAcquire(t.Context(), "dropped")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Nodes[2].Pause(); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 5*time.Second, "node 3 down", func() bool { return e.Stats().Nodes[2].Down })
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Close took %v with a node down, want it not to wait for the node", d)
	}
	if err := c.Nodes[2].Resume(); err != nil {
		t.Fatal(err)
	}
	pttl, err := c.Nodes[2].PTTL(t.Context(), lockKey("dropped"))
	if err != nil {
		t.Fatal(err)
	}
	if pttl <= 0 || pttl > 5*time.Second {
		t.Fatalf("the key on the node that was down lives %v more, want its TTL's rest (the release dropped)", pttl)
	}
}

// A held lease's resource actor and turn cost no more than the line and
// turn of the version before the resource actor (192 and 112 bytes, Go's
// size classes): what `go run ./bench -workload held` measures per lease.
// A field that must be added goes in watch, which only waited-for
// resources have, or pays for itself in the commit that adds it.
func TestHeldResourceFootprint(t *testing.T) {
	if n := unsafe.Sizeof(resource{}); n > 192 {
		t.Errorf("a resource actor is %d bytes, want at most 192", n)
	}
	if n := unsafe.Sizeof(turn{}); n > 112 {
		t.Errorf("a turn is %d bytes, want at most 112", n)
	}
}
