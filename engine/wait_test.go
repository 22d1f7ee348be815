package engine

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/internal/testwait"
	"github.com/redlease/redlease/node"
)

// slowNodes gives an engine a node timeout of 500ms: a waiter that stands
// in for the next one yields that long, which a test of who goes first
// needs to outlast the next one's round on a loaded machine.
func slowNodes(cfg *Config) { cfg.NodeTimeout = 500 * time.Millisecond }

// noPolling is a retry schedule that makes polling useless: a waiter that
// acquires within a second did not poll.
func noPolling() backoff.BackOff { return backoff.NewConstantBackOff(10 * time.Second) }

// acquireAsync runs Acquire in the background and reports when it
// returned.
type acquired struct {
	l   *Lease
	err error
	at  time.Time
}

func acquireAsync(ctx context.Context, e *Engine, resource string, opts ...Option) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		l, err := e.Acquire(ctx, resource, opts...)
		ch <- acquired{l, err, time.Now()}
	}()
	return ch
}

func await(t *testing.T, ch <-chan acquired, limit time.Duration) acquired {
	t.Helper()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatalf("Acquire: %v", a.err)
		}
		return a
	case <-time.After(limit):
		t.Fatalf("Acquire still waiting after %v", limit)
		return acquired{}
	}
}

// holdAndWait has a take resource, and b's Acquire wait for it, with a
// retry schedule that makes polling useless. It returns once b's caller
// waits quietly, its recheck refused (waitRechecked): b's line for
// resource must not have been watched before.
func holdAndWait(t *testing.T, a, b *Engine, resource string) (*Lease, <-chan acquired) {
	t.Helper()
	held, err := a.Acquire(t.Context(), resource)
	if err != nil {
		t.Fatal(err)
	}
	events, stop := b.Subscribe(64)
	defer stop()
	got := acquireAsync(t.Context(), b, resource, WithRetry(noPolling))
	waitRechecked(t, events)
	if n := b.Stats().Waiters[resource]; n != 1 {
		t.Fatalf("%d callers wait for %q, want 1", n, resource)
	}
	return held, got
}

// apart: how long after one waiter the next comes, where a test wants
// their times in the nodes' queues to differ by milliseconds, as callers'
// usually do.
const apart = 5 * time.Millisecond

// releaseWakes releases held and checks that the waiter got acquires
// within a second of it.
func releaseWakes(t *testing.T, held *Lease, got <-chan acquired) acquired {
	t.Helper()
	released := time.Now()
	if err := held.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	w := await(t, got, 5*time.Second)
	if d := w.at.Sub(released); d > time.Second {
		t.Fatalf("acquired %v after the release, want within 1s", d)
	}
	return w
}

// A waiter on another engine acquires within a second of the holder's
// release, with a retry schedule that would have it wait ten.
func TestWaiterWakesOnRelease(t *testing.T) {
	c := startNodes(t, 5)
	a, b := newEngine(t, c.Addrs()), newEngine(t, c.Addrs())
	events, stop := b.Subscribe(16)
	defer stop()
	held, got := holdAndWait(t, a, b, "wake")
	w := releaseWakes(t, held, got)
	if s := b.Stats(); s.Wakeups.Release < 1 || s.Waiters != nil {
		t.Fatalf("stats %+v: want a wake-up by release and nobody waiting", s)
	}
	var kinds []string
	for ev := range events {
		kinds = append(kinds, ev.Kind.String()+":"+ev.Wake.String())
		if ev.Kind == Acquired {
			break
		}
	}
	// After the last wait, the release wakes the waiter. On a loaded
	// machine its round may reach a node before that node's release, and
	// fail: then it looks again at once (a recheck), still no polling.
	seen := strings.Join(kinds, " ")
	last := strings.LastIndex(seen, "Waiting:")
	if !strings.HasPrefix(seen, "Waiting:") || last < 0 ||
		!regexp.MustCompile(`^Waiting:\S* Woken:release( Woken:recheck)* Acquired:`).MatchString(seen[last:]) {
		t.Fatalf("events %s: want Waiting, then Woken by the release (and rechecks) before Acquired", seen)
	}
	_ = w.l.Release(t.Context())
}

// writeForeign writes another owner's key by hand on the nodes idx: a
// holder that vanished without releasing.
func writeForeign(t *testing.T, c *redisproc.Cluster, resource string, ttl time.Duration, idx ...int) {
	t.Helper()
	for _, i := range idx {
		if err := c.Nodes[i].Set(t.Context(), lockKey(resource), "vanished", ttl); err != nil {
			t.Fatal(err)
		}
	}
}

// A holder that vanished without releasing: the waiter wakes when its keys
// expire, as the refusing nodes said, not at the next poll.
func TestWaiterWakesAtExpiry(t *testing.T) {
	c := startNodes(t, 5)
	e := newEngine(t, c.Addrs())
	const ttl = 1500 * time.Millisecond
	// Every key expires between first+ttl and last+ttl: writing them can
	// take a while on a loaded machine.
	first := time.Now()
	writeForeign(t, c, "vanished", ttl, 0, 1, 2, 3, 4)
	last := time.Now()
	w := await(t, acquireAsync(t.Context(), e, "vanished", WithRetry(noPolling)), 5*time.Second)
	if d := w.at.Sub(first.Add(ttl)); d < -5*time.Millisecond {
		t.Fatalf("acquired %v before the first key could expire", -d)
	}
	if d := w.at.Sub(last.Add(ttl)); d > time.Second {
		t.Fatalf("acquired %v after the last key expired, want within 1s", d)
	}
	if s := e.Stats(); s.Wakeups.Expiry < 1 {
		t.Fatalf("wake-ups %+v: want one at expiry", s.Wakeups)
	}
	_ = w.l.Release(t.Context())
}

// A release between the refused round and the watchers' subscription is
// not lost: once they listen, the waiter looks again.
func TestReleaseBeforeSubscriptionNotLost(t *testing.T) {
	c := startNodes(t, 3)
	a, b := newEngine(t, c.Addrs()), newEngine(t, c.Addrs())
	held, err := a.Acquire(t.Context(), "race")
	if err != nil {
		t.Fatal(err)
	}
	var released time.Time
	testHookBeforeWatch = func() { // on b's lease actor, refused, before any watcher listens
		released = time.Now()
		if err := held.Release(context.Background()); err != nil {
			t.Error(err)
		}
		waitGone(t, c, "race") // announced on every node, heard by nobody
	}
	t.Cleanup(func() { testHookBeforeWatch = nil })
	w := await(t, acquireAsync(t.Context(), b, "race", WithRetry(noPolling)), 5*time.Second)
	if d := w.at.Sub(released); d > time.Second {
		t.Fatalf("acquired %v after the release, want within 1s", d)
	}
	_ = w.l.Release(t.Context())
}

// Local waiters acquire first come, first served; one whose context ends
// leaves the line at once and is skipped.
func TestLocalWaitersFIFO(t *testing.T) {
	c := startNodes(t, 3)
	e := newEngine(t, c.Addrs())
	held, err := e.Acquire(t.Context(), "fifo")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	const quitter = 3
	quit, cancel := context.WithCancel(t.Context())
	defer cancel()
	for i := range 8 {
		ctx := t.Context()
		if i == quitter {
			ctx = quit
		}
		wg.Go(func() {
			l, err := e.Acquire(ctx, "fifo", WithRetry(noPolling))
			if i == quitter {
				if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrNotAcquired) {
					t.Errorf("waiter %d: %v, want its context's end", i, err)
				}
				return
			}
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			_ = l.Release(context.Background())
		})
		testwait.Eventually(t, 5*time.Second, "the waiter in line", func() bool { return e.Stats().Waiters["fifo"] == i+1 })
	}
	cancel()
	testwait.Eventually(t, 5*time.Second, "the quitter gone", func() bool { return e.Stats().Waiters["fifo"] == 7 })
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if want := []int{0, 1, 2, 4, 5, 6, 7}; !equal(order, want) {
		t.Fatalf("acquired in order %v, want %v", order, want)
	}
	if s := e.Stats(); s.Waiters != nil || s.Wakeups != (Wakeups{}) {
		t.Fatalf("stats %+v: a local line needs no wake-ups", s)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// With 2 of 5 nodes unable to announce (their ACL denies every channel,
// as a managed Redis may), waiters still wake: on a release, by the other
// three; for a vanished holder, at its keys' expiry.
func TestWakeWithNodesUnableToNotify(t *testing.T) {
	c := startNodes(t, 5)
	for _, i := range []int{0, 1} {
		if _, err := c.Nodes[i].Do(t.Context(), "ACL", "SETUSER", "default", "resetchannels"); err != nil {
			t.Fatal(err)
		}
	}
	a, b := newEngine(t, c.Addrs()), newEngine(t, c.Addrs())
	held, got := holdAndWait(t, a, b, "deaf")
	for i, n := range c.Nodes { // b listens on nodes 2-4 only
		got, err := n.Do(t.Context(), "PUBSUB", "NUMSUB", lockKey("deaf")+node.ReleasedSuffix)
		if err != nil {
			t.Fatal(err)
		}
		want := map[bool]int64{true: 0, false: 1}[i < 2]
		if subs := got.([]any)[1]; subs != want {
			t.Fatalf("node %d: %v subscribers, want %d", i, subs, want)
		}
	}
	w := releaseWakes(t, held, got)
	_ = w.l.Release(t.Context())

	const ttl = 1500 * time.Millisecond
	writeForeign(t, c, "deaf", ttl, 0, 1, 2, 3, 4)
	expires := time.Now().Add(ttl)
	w = await(t, acquireAsync(t.Context(), b, "deaf", WithRetry(noPolling)), 5*time.Second)
	if d := w.at.Sub(expires); d > time.Second {
		t.Fatalf("acquired %v after the keys expired, want within 1s", d)
	}
	_ = w.l.Release(t.Context())
}

// Across engines, waiters go in the order they began to wait: every node
// queues them alike, and a release names the first, which goes at once
// while the others let it. Over several rounds, so luck would not pass it;
// with the second waiter a few milliseconds after the first, and
// microseconds after it: the nodes queue waiters by when they joined their
// lines to the microsecond, not by chance among those of one millisecond.
func TestWaitersAcrossEnginesInOrder(t *testing.T) {
	t.Parallel() // it waits out TTLs on nodes of its own
	t.Run("milliseconds apart", func(t *testing.T) { testWaitersInOrder(t, 5, true) })
	t.Run("microseconds apart", func(t *testing.T) { testWaitersInOrder(t, 12, false) })
}

func testWaitersInOrder(t *testing.T, rounds int, msApart bool) {
	c := startNodes(t, 3)
	es := []*Engine{newEngine(t, c.Addrs(), slowNodes), newEngine(t, c.Addrs(), slowNodes), newEngine(t, c.Addrs(), slowNodes)}
	for round := range rounds {
		holder, first, second := es[round%3], es[(round+1)%3], es[(round+2)%3]
		if round%2 == 1 {
			first, second = second, first
		}
		held, err := holder.Acquire(t.Context(), "order")
		if err != nil {
			t.Fatal(err)
		}
		ev1, stop1 := first.Subscribe(64)
		ev2, stop2 := second.Subscribe(64)
		got1 := acquireAsync(t.Context(), first, "order", WithRetry(noPolling))
		if msApart {
			waitRefused(t, ev1)
			time.Sleep(apart)
		} else {
			for first.Stats().Waiters["order"] == 0 { // in its line: its time taken
				runtime.Gosched()
			}
		}
		got2 := acquireAsync(t.Context(), second, "order", WithRetry(noPolling))
		if !msApart {
			waitRefused(t, ev1)
		}
		waitRefused(t, ev2)
		stop1()
		stop2()
		if err := held.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		var w acquired
		select {
		case w = <-got1:
		case a := <-got2:
			t.Fatalf("round %d: the later waiter went first (%v)", round, a.err)
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: nobody acquired within 5s", round)
		}
		if w.err != nil {
			t.Fatal(w.err)
		}
		if err := w.l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		_ = await(t, got2, 5*time.Second).l.Release(t.Context())
		// The places the releases kept for their engines' next callers,
		// left: a caller who came back for one would be queued as of its
		// release.
		waitQueuesEmpty(t, c, holder.cfg.lockKey("order"))
	}
}

// A caller waiting in its engine's line behind a holder keeps its place
// among the other engines' waiters: the holder's release queues it on the
// nodes before naming the next waiter, so it goes before a remote waiter
// who came later, and leaves nothing in the nodes' queues behind; whether
// its engine's line is watched (its heads waited for other engines
// lately) or not.
func TestLocalSuccessorKeepsItsPlace(t *testing.T) {
	for _, watched := range []bool{true, false} {
		t.Run(fmt.Sprintf("watched=%v", watched), func(t *testing.T) { testLocalSuccessor(t, watched) })
	}
}

func testLocalSuccessor(t *testing.T, watched bool) {
	c := startNodes(t, 3)
	// The remote waiter stands in for the local one: its yield, a node
	// timeout, must outlast the local one's round even on a loaded machine.
	a, b := newEngine(t, c.Addrs(), slowNodes), newEngine(t, c.Addrs(), slowNodes)
	var held *Lease
	if watched { // once its head waited for b's lease
		first, got := holdAndWait(t, b, a, "succ")
		held = releaseWakes(t, first, got).l
	} else {
		var err error
		if held, err = a.Acquire(t.Context(), "succ"); err != nil {
			t.Fatal(err)
		}
	}
	events, stop := a.Subscribe(64)
	defer stop()
	local := acquireAsync(t.Context(), a, "succ", WithRetry(noPolling))
	testwait.Eventually(t, 5*time.Second, "the local caller in line", func() bool { return a.Stats().Waiters["succ"] == 1 })
	time.Sleep(apart)
	evB, stopB := b.Subscribe(64)
	remote := acquireAsync(t.Context(), b, "succ", WithRetry(noPolling))
	waitRechecked(t, evB)
	stopB()
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	var w acquired
	select {
	case w = <-local:
	case r := <-remote:
		t.Fatalf("the remote waiter, who came later, went first (%v)", r.err)
	case <-time.After(5 * time.Second):
		t.Fatal("nobody acquired within 5s")
	}
	if w.err != nil {
		t.Fatal(w.err)
	}
	for ev := range events {
		if ev.Kind == Woken || ev.Kind == Acquired {
			if watched && ev.Wake != WakeRelease {
				t.Fatalf("the local caller: %v, want woken by the release", ev)
			}
			break
		}
	}
	if err := w.l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := await(t, remote, 5*time.Second).l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitQueuesEmpty(t, c, a.cfg.lockKey("succ"))
}

// waitQueuesEmpty waits until every node's queue of waiters for the lock
// key is empty but for its end mark: a release or leave may still be on its
// way to a node past a quorum, and a place a release kept for its engine's
// next caller is left once unclaimed (lines.keepFor).
func waitQueuesEmpty(t *testing.T, c *redisproc.Cluster, key string) {
	t.Helper()
	key += ":queue"
	var queues []string
	defer func() {
		if t.Failed() {
			t.Logf("queues of %s: %q", key, queues)
		}
	}()
	// A node where no waiter was ever refused has no queue at all.
	testwait.Eventually(t, 2*time.Second, "every queue of waiters empty but for its end mark", func() bool {
		queues = queues[:0]
		for _, n := range c.Nodes {
			got, err := n.Do(t.Context(), "ZRANGE", key, "0", "-1")
			if err != nil {
				t.Fatal(err)
			}
			queues = append(queues, fmt.Sprint(got))
		}
		return !slices.ContainsFunc(queues, func(q string) bool { return q != "[~]" && q != "[]" })
	})
}

// keptPlace runs the usual pattern of a busy resource up to the release
// that keeps a place: a's head waited for b's lease (a's line is watched
// from then on) and holds; b's next caller waits, queued; a releases, with
// nobody after it in its line. It returns b's waiter and the place a's
// release kept, as a's line has it, and as the nodes' queues name it.
func keptPlace(t *testing.T, a, b *Engine) (remote <-chan acquired, value string) {
	t.Helper()
	first, got := holdAndWait(t, b, a, "kept")
	held := releaseWakes(t, first, got).l
	evB, stopB := b.Subscribe(64)
	defer stopB()
	remote = acquireAsync(t.Context(), b, "kept", WithRetry(noPolling))
	waitRefused(t, evB)
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	a.lines.inspect(a.cfg.lockKey("kept"), func(r *resource) {
		if r.w != nil && r.w.kept != nil {
			value = r.w.kept.value
		}
	})
	return remote, value
}

// queuedOn counts the nodes whose queue of waiters for resource holds
// value.
func queuedOn(t *testing.T, c *redisproc.Cluster, e *Engine, resource, value string) int {
	t.Helper()
	n := 0
	for _, nd := range c.Nodes {
		rank, err := nd.Do(t.Context(), "ZRANK", e.cfg.lockKey(resource)+":queue", node.Digest(value))
		if err != nil {
			t.Fatal(err)
		}
		if rank != nil {
			n++
		}
	}
	return n
}

// A release of a busy resource with nobody after it in its engine's line
// keeps a place among the waiters for the engine's next caller: the
// worker that released, back at once, takes it, queued already (it sends
// nothing to queue itself), and goes after the remote waiter who came
// first, as soon as that one releases.
func TestReturningCallerTakesTheKeptPlace(t *testing.T) {
	c := startNodes(t, 3)
	a, b := newEngine(t, c.Addrs()), newEngine(t, c.Addrs())
	a.lines.keepFor = time.Minute // however slow the machine
	remote, value := keptPlace(t, a, b)
	if value == "" {
		t.Fatal("the release kept no place for a's next caller")
	}
	testwait.Eventually(t, 2*time.Second, "the kept place queued on a quorum", func() bool {
		return queuedOn(t, c, a, "kept", value) >= 2
	})
	back := acquireAsync(t.Context(), a, "kept", WithRetry(noPolling))
	r := await(t, remote, 5*time.Second)
	released := time.Now()
	if err := r.l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	w := await(t, back, 5*time.Second)
	if d := w.at.Sub(released); d > time.Second {
		t.Fatalf("acquired %v after the release, want within 1s", d)
	}
	if w.l.value != value {
		t.Fatal("the caller who came back did not take the place its release kept")
	}
	if err := w.l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// A kept place that no caller takes within keepFor is left: the waiters
// behind it are not held up for a caller who does not come.
func TestUnclaimedKeptPlaceIsLeft(t *testing.T) {
	c := startNodes(t, 3)
	a, b := newEngine(t, c.Addrs()), newEngine(t, c.Addrs())
	a.lines.keepFor = 200 * time.Millisecond // to see it queued first
	remote, value := keptPlace(t, a, b)
	if value == "" {
		t.Fatal("the release kept no place for a's next caller")
	}
	r := await(t, remote, 5*time.Second)
	if queuedOn(t, c, a, "kept", value) == 0 {
		t.Fatal("the kept place is queued on no node")
	}
	testwait.Eventually(t, 2*time.Second, "the unclaimed place out of every queue", func() bool {
		return queuedOn(t, c, a, "kept", value) == 0
	})
	if err := r.l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// A waiter that a release names leaves the queue: one that is gone (its
// engine died while it waited) is named once, and the others, who let it
// go first, are not held up again at every release after.
func TestGoneWaiterNamedOnce(t *testing.T) {
	c := startNodes(t, 3)
	a, b := newEngine(t, c.Addrs()), newEngine(t, c.Addrs())
	held, got := holdAndWait(t, a, b, "gone")
	key, gone := a.cfg.lockKey("gone")+":queue", strings.Repeat("f", 40)
	for _, n := range c.Nodes { // queued before everyone, then died
		if _, err := n.Do(t.Context(), "ZADD", key, "1", gone); err != nil {
			t.Fatal(err)
		}
	}
	w := releaseWakes(t, held, got)
	// Every node that deleted the holder's key (a quorum at least; a
	// release may still be on its way to the others) named it, and took
	// it out.
	testwait.Eventually(t, 2*time.Second, "the gone waiter out of a quorum of queues", func() bool {
		out := 0
		for _, n := range c.Nodes {
			rank, err := n.Do(t.Context(), "ZRANK", key, gone)
			if err != nil {
				t.Fatal(err)
			}
			if rank == nil {
				out++
			}
		}
		return out >= 2
	})
	if err := w.l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// Waiters that a release names neither next nor to stand in for the next
// wait to be named without a round, however long the holders hold (here
// 100ms: longer than a waiter used to yield, a tenth of the node timeout,
// and well within the node timeout the standby yields): each starts one
// round, when its turn comes.
func TestUnnamedWaitersWaitWithoutRounds(t *testing.T) {
	// One node: on several, a named waiter's round can outrun the release
	// on some of them and be refused there, and then it looks again when
	// their announcements come (a second round that is no polling).
	c := startNodes(t, 1)
	es := []*Engine{newEngine(t, c.Addrs(), slowNodes), newEngine(t, c.Addrs(), slowNodes), newEngine(t, c.Addrs(), slowNodes), newEngine(t, c.Addrs(), slowNodes)}
	held, err := es[0].Acquire(t.Context(), "quiet")
	if err != nil {
		t.Fatal(err)
	}
	var got []<-chan acquired
	for _, e := range es[1:] {
		time.Sleep(apart)
		ev, stop := e.Subscribe(64)
		got = append(got, acquireAsync(t.Context(), e, "quiet", WithRetry(noPolling)))
		waitRechecked(t, ev)
		stop()
	}
	// hold: how long each holder holds, longer than a waiter used to yield.
	const hold = 100 * time.Millisecond
	var before []Wakeups
	for _, e := range es[1:] {
		before = append(before, e.Stats().Wakeups)
	}
	for i, ch := range got {
		if err := held.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		held = await(t, ch, 5*time.Second).l
		if i < len(got)-1 {
			time.Sleep(hold)
		}
	}
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	for i, e := range es[1:] {
		w := e.Stats().Wakeups
		if rounds := w.Release - before[i].Release + w.Fallback - before[i].Fallback + w.Expiry - before[i].Expiry; rounds != 1 {
			t.Errorf("waiter %d started %d rounds after it was refused, want 1 (when named)", i+1, rounds)
		}
	}
}

// The waiter standing in for the next one gives it twice the time between
// the last two releases it heard (a hold and a hand-off, lately), at least
// a node timeout: named to stand by 150ms after the release before, it
// does not look within 200ms (a node timeout is 50ms), and does later.
// The announcements are published by hand.
func TestStandbyYieldsAsLongAsHoldsLast(t *testing.T) {
	c := startNodes(t, 3)
	a, b := newEngine(t, c.Addrs()), newEngine(t, c.Addrs())
	held, _ := holdAndWait(t, a, b, "long")
	channel := a.cfg.lockKey("long") + node.ReleasedSuffix
	holder, gone := node.Digest(held.value), strings.Repeat("f", 40)
	announce := func(msg string) {
		t.Helper()
		if _, err := c.Nodes[0].Do(t.Context(), "PUBLISH", channel, msg); err != nil {
			t.Fatal(err)
		}
	}
	rounds := func() uint64 { w := b.Stats().Wakeups; return w.Release + w.Expiry + w.Fallback }
	// between: the time between the two releases, which the yield follows;
	// yielded: less than twice that, and more than a node timeout.
	const between, yielded = 150 * time.Millisecond, 200 * time.Millisecond
	announce("another " + gone + " " + gone) // another owner's: b waits on
	time.Sleep(between)
	before := rounds()
	announce(holder + " " + gone + " " + node.Digest(mustValue(t, b, "long"))) // b stands in
	testwait.Never(t, yielded, "the waiter standing in looked: the releases came 150ms apart", func() bool { return rounds() != before })
	testwait.Eventually(t, 5*time.Second, "the waiter standing in to look", func() bool { return rounds() > before })
	_ = held.Release(t.Context())
}

// mustValue is the owner value of the head of e's line for resource name.
func mustValue(t *testing.T, e *Engine, name string) string {
	t.Helper()
	var value string
	e.lines.inspect(e.cfg.lockKey(name), func(r *resource) {
		if len(r.turns) > 0 {
			value = r.turns[0].value
		}
	})
	if value == "" {
		t.Fatalf("no caller waits for %q", name)
	}
	return value
}

// Should the two waiters a release names (the next, and the one standing
// in for it) both be gone, the others look again once no release came for
// SilenceTimeouts node timeouts: the resource does not stay idle until
// the keys they saw would expire.
func TestGoneNamedWaitersDoNotStallTheLine(t *testing.T) {
	c := startNodes(t, 3)
	a, b := newEngine(t, c.Addrs()), newEngine(t, c.Addrs())
	held, got := holdAndWait(t, a, b, "stall")
	key := a.cfg.lockKey("stall") + ":queue"
	for i, n := range c.Nodes { // two waiters that came first, then died
		for j, gone := range []string{strings.Repeat("e", 40), strings.Repeat("f", 40)} {
			if _, err := n.Do(t.Context(), "ZADD", key, fmt.Sprint(j+1), gone); err != nil {
				t.Fatalf("node %d: %v", i, err)
			}
		}
	}
	released := time.Now()
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	w := await(t, got, 5*time.Second)
	silence := SilenceTimeouts * b.cfg.NodeTimeout
	if d := w.at.Sub(released); d > silence+time.Second {
		t.Fatalf("acquired %v after the release, want within %v of it", d, silence+time.Second)
	}
	if err := w.l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// Every waiter of three engines gives up at once (their contexts end, as
// when a service stops its workers), while the holders release; the
// callers that come right after must not wait on what the lines, the
// queues and the announcements still say of those that left. Each of
// them acquires within 2s (a wait of the TTL, 10s, would be a stall).
func TestWaitersRecoverFromMassCancellation(t *testing.T) {
	c := startNodes(t, 1)
	es := []*Engine{newEngine(t, c.Addrs()), newEngine(t, c.Addrs()), newEngine(t, c.Addrs())}
	work := func(ctx context.Context, workers int, longest *atomic.Int64) {
		var wg sync.WaitGroup
		for w := range workers {
			e, resource := es[w%len(es)], fmt.Sprint("mass-", w%2)
			wg.Go(func() {
				for ctx.Err() == nil {
					start := time.Now()
					l, err := e.Acquire(ctx, resource)
					// A caller stuck until its context ended counts too.
					if d := int64(time.Since(start)); longest != nil && d > longest.Load() {
						longest.Store(d)
					}
					if err == nil {
						_ = l.Release(context.Background())
					}
				}
			})
		}
		wg.Wait()
	}
	first, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	work(first, 48, nil)
	var longest atomic.Int64
	then, cancel2 := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel2()
	work(then, 48, &longest)
	if d := time.Duration(longest.Load()); d > 2*time.Second || d == 0 {
		t.Fatalf("after the mass cancellation, the longest Acquire took %v, want (0, 2s]", d)
	}
}

// A caller that becomes its line's head after the last announcement named
// a waiter who is gone is told what it said, and does not wait on it: the
// resource is free, and it acquires at once.
func TestHeadAfterAStaleAnnouncement(t *testing.T) {
	c := startNodes(t, 3)
	a, b := newEngine(t, c.Addrs()), newEngine(t, c.Addrs())
	held, got := holdAndWait(t, a, b, "stale") // b's line is watched
	w := releaseWakes(t, held, got)
	key := a.cfg.lockKey("stale") + ":queue"
	for _, n := range c.Nodes { // a waiter that came first, then died
		if _, err := n.Do(t.Context(), "ZADD", key, "1", strings.Repeat("f", 40)); err != nil {
			t.Fatal(err)
		}
	}
	events, stop := b.Subscribe(16)
	defer stop()
	if err := w.l.Release(t.Context()); err != nil { // names the dead waiter
		t.Fatal(err)
	}
	waitEvent(t, events, "the release", func(ev Event) bool { return ev.Kind == Released })
	testwait.Eventually(t, 5*time.Second, "the release's announcement heard", func() bool {
		heard := ""
		found := b.lines.inspect(b.cfg.lockKey("stale"), func(r *resource) { heard = r.heard })
		// Not found: the emptied line lingered out (lineLinger) before
		// this look, on a loaded machine; the head then comes to a new
		// actor, which must acquire at once all the same.
		return !found || heard == node.Digest(w.l.value)
	})
	start := time.Now()
	l, err := b.Acquire(t.Context(), "stale", WithRetry(noPolling))
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("acquired a free resource after %v, want within 1s", d)
	}
	_ = l.Release(t.Context())
}

// waitRechecked waits until a caller whose line was not watched yet is
// waiting quietly: refused, then refused again by the round that looks
// once the watchers listen. Only then is no round of its own in flight.
func waitRechecked(t *testing.T, events <-chan Event) {
	t.Helper()
	waitEvent(t, events, "a recheck", func(ev Event) bool { return ev.Kind == Woken && ev.Wake == WakeRecheck })
	waitEvent(t, events, "a refused recheck", refused)
}

// waitRefused waits until a caller's round was refused by the holder, and
// then for the round that looks again once the watchers listen, if there
// is one: it starts within moments of the refusal, well within
// recheckWithin.
func waitRefused(t *testing.T, events <-chan Event) {
	t.Helper()
	const recheckWithin = 150 * time.Millisecond
	waitEvent(t, events, "a refused round", refused)
	select {
	case ev := <-events:
		if ev.Kind == Woken && ev.Wake == WakeRecheck {
			waitEvent(t, events, "a refused recheck", refused)
		}
	case <-time.After(recheckWithin):
	}
}

// refused: a Waiting event of a round refused by the holder, which knows
// when its keys expire.
func refused(ev Event) bool { return ev.Kind == Waiting && !ev.Until.IsZero() }

// waitEvent waits up to 5s for an event that is.
func waitEvent(t *testing.T, events <-chan Event, what string, is func(Event) bool) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev := <-events:
			if is(ev) {
				return
			}
		case <-timeout:
			t.Fatalf("no %s after 5s", what)
		}
	}
}

// A watcher whose connection drops subscribes again, and the waiter looks
// once more (announcements may have been missed meanwhile); a release
// after that wakes it as before.
func TestWaiterWakesAfterWatchersReconnect(t *testing.T) {
	c := startNodes(t, 3)
	a, b := newEngine(t, c.Addrs()), newEngine(t, c.Addrs())
	held, got := holdAndWait(t, a, b, "reconnect")
	events, stop := b.Subscribe(64)
	defer stop()
	for _, n := range c.Nodes {
		if _, err := n.Do(t.Context(), "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
			t.Fatal(err)
		}
	}
	waitRechecked(t, events) // the watchers back
	w := releaseWakes(t, held, got)
	_ = w.l.Release(t.Context())
}

// Close ends every wait at once: the head waiting on the nodes and the
// caller behind it in the engine's line both fail with ErrClosed.
func TestCloseWhileWaiting(t *testing.T) {
	c := startNodes(t, 3)
	a := newEngine(t, c.Addrs())
	b, err := New(Config{Nodes: c.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	_, head := holdAndWait(t, a, b, "closing")
	behind := acquireAsync(t.Context(), b, "closing", WithRetry(noPolling))
	testwait.Eventually(t, 5*time.Second, "the second caller in line", func() bool { return b.Stats().Waiters["closing"] == 2 })
	closed := time.Now()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for _, got := range []<-chan acquired{head, behind} {
		select {
		case w := <-got:
			if !errors.Is(w.err, ErrClosed) {
				t.Fatalf("Acquire after Close: %v, want ErrClosed", w.err)
			}
			if d := w.at.Sub(closed); d > time.Second {
				t.Fatalf("Acquire returned %v after Close", d)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Acquire still waiting 5s after Close")
		}
	}
}

// A release grants the key to the waiter it names next (another engine's,
// listening): on one node the waiter holds without a round of its own,
// and its validity counts from when it began to wait, not from the
// release. On three, it makes one round at most: a grant from a node
// where its failed rounds were cleaned up before that node answered them
// does not count (lease.TestCleanupKeepsGrants), and the round then goes
// to every node.
func TestGrantedHandOff(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("nodes=%d", n), func(t *testing.T) {
			c := startNodes(t, n)
			a, b := newEngine(t, c.Addrs()), newEngine(t, c.Addrs())
			called := time.Now()
			held, got := holdAndWait(t, a, b, "grant")
			// Longer than the drift: a validity counted from the release shows.
			const waited = 200 * time.Millisecond
			time.Sleep(waited)
			before := commandsSent(b)
			w := releaseWakes(t, held, got)
			if sent := commandsSent(b) - before; n == 1 && sent != 0 || sent > uint64(n) {
				t.Fatalf("the waiter sent %d commands to %d nodes after the release, want one round at most (none on one)", sent, n)
			}
			if late := called.Add(b.cfg.TTL); n == 1 && w.l.Until().After(late) {
				t.Fatalf("held until %v, after %v: its validity counts from later than the call", w.l.Until(), late)
			}
			if err := w.l.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// commandsSent is how many commands e sent to its nodes, all together.
func commandsSent(e *Engine) uint64 {
	var n uint64
	for _, s := range e.Stats().Nodes {
		n += s.Commands
	}
	return n
}

// A waiter whose engine no longer listens on its channel (its process
// died, and its connections with it) is named next but not granted the
// key: the waiter after it goes as it did before grants, instead of
// waiting out a grant that nobody would use.
func TestGoneWaiterNotGranted(t *testing.T) {
	c := startNodes(t, 1)
	a, b := newEngine(t, c.Addrs()), newEngine(t, c.Addrs())
	held, got := holdAndWait(t, a, b, "dead")
	key := a.cfg.lockKey("dead") + ":queue"
	gone := strings.Repeat("f", 40)
	n := c.Nodes[0]
	if _, err := n.Do(t.Context(), "ZADD", key, "1", gone); err != nil { // came first, then died
		t.Fatal(err)
	}
	if _, err := n.Do(t.Context(), "HSET", key+":grants", gone, "10000 "+a.cfg.KeyPrefix+"engine:gone x"); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	w := await(t, got, 5*time.Second)
	if d := w.at.Sub(released); d > 3*time.Second {
		t.Fatalf("acquired %v after the release: the gone waiter was granted the key", d)
	}
	if err := w.l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// A worker that releases to a caller of its engine already waiting, and
// comes back at once, waits as of its release, as it would in the place a
// release keeps when nobody waits in its engine (TestReturningCallerTakesTheKeptPlace):
// otherwise the workers alone in their engines, queued as of their
// releases, go before it every time. Only the first caller to come does:
// the next waits as of its call.
func TestReturningCallerWaitsAsOfItsRelease(t *testing.T) {
	c := startNodes(t, 1)
	e := newEngine(t, c.Addrs())
	ls, key := e.lines, e.cfg.lockKey("back")
	ttl := e.cfg.TTL
	join := func(value string) *turn {
		t := new(turn)
		ls.join(t, key, value, ttl, false)
		return t
	}
	holder := join("h")
	waiter := join("w")
	ls.inspect(key, func(r *resource) { r.w = &watch{on: make([]bool, len(ls.watchers))} }) // contended across engines lately
	before := time.Now()
	release := &node.HandOff{Request: node.Request{Key: key, Value: "h"}, TTL: ttl}
	holder.HandOff(release, true)
	ls.inspect(key, func(*resource) {}) // handed off, and left
	released := time.Now()
	if want := fmt.Sprint(waiter.since.UnixMicro()); release.SuccessorSince != want {
		t.Fatalf("the release queued a caller waiting since %v, want the waiter's %v", release.SuccessorSince, want)
	}
	back := join("h2")
	ls.inspect(key, func(*resource) {}) // joined
	if back.since.After(released) || back.since.Before(before) {
		t.Fatalf("the returning caller waits as of %v, want as of the release, %v to %v", back.since, before, released)
	}
	later := join("h3")
	ls.inspect(key, func(*resource) {})
	if !later.since.After(released) {
		t.Fatalf("a second caller waits as of %v, want as of its call, after the release at %v", later.since, released)
	}
	for _, tu := range []*turn{waiter, back, later} {
		tu.Done(false)
	}
}

// A release that keeps a place for its engine's next caller names the
// place but never grants it the key: the process may die right after its
// release (killed, or gone without Close), and nobody would then release
// a key granted to the place, leaving a free resource blocked for a TTL
// (issue 27, 7). Here a's engine never acts again after its release (its
// kept place waits an hour, as a dead process's would for ever): b must
// take the resource at once.
func TestKeptPlaceNotGranted(t *testing.T) {
	c := startNodes(t, 3)
	a, b := newEngine(t, c.Addrs()), newEngine(t, c.Addrs())
	a.lines.keepFor = time.Hour
	first, got := holdAndWait(t, b, a, "kept") // a's line is watched from now on
	held := releaseWakes(t, first, got).l
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	var k *kept
	a.lines.inspect(a.cfg.lockKey("kept"), func(r *resource) {
		if r.w != nil {
			k = r.w.kept
		}
	})
	if k == nil {
		t.Fatal("setup: the release kept no place for a's next caller")
	}
	l, err := b.TryAcquire(t.Context(), "kept")
	if err != nil {
		t.Fatalf("a free resource is blocked after its holder's release: %v", err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// A waiter that wins on a quorum while another owner's key still refuses
// it on the others leaves the queues of those too: its place there would
// outlive its lease, and a later release would name it and grant it the
// key, a holder that is no more (issue 27, 11).
func TestWinnerLeavesEveryQueue(t *testing.T) {
	c := startNodes(t, 3)
	e := newEngine(t, c.Addrs())
	writeForeign(t, c, "won", 500*time.Millisecond, 0, 1)
	writeForeign(t, c, "won", time.Minute, 2)
	w := await(t, acquireAsync(t.Context(), e, "won", WithRetry(noPolling)), 5*time.Second)
	testwait.Eventually(t, 2*time.Second, "the winner out of every queue", func() bool {
		return queuedOn(t, c, e, "won", w.l.value) == 0
	})
	if err := w.l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}
