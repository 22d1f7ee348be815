package lease

import (
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cenkalti/backoff/v4"

	"github.com/redlease/redlease/node"
)

// waitLine is a Line that can always wake its lease (see Line.Wait).
type waitLine struct{ f *fakeNodes }

func (waitLine) Wait(string, time.Time) bool { return true }
func (waitLine) Woke(WakeCause)              {}
func (waitLine) Len() int                    { return 1 }
func (waitLine) Done(bool)                   {}
func (l waitLine) HandOff(c *node.HandOff, _ bool) {
	for _, pid := range l.f.pids {
		l.f.system.Root.Send(pid, c)
	}
}

// waiter is a lease that startWaiting left waiting.
type waiter struct {
	ref      Ref
	st       *State
	reply    chan Result
	cleanups []*node.Cleanup // its failed round's, by node
}

// startWaiting starts a lease that waits on the fake nodes: its first
// round finds another owner holding the key on every node but those in
// late, whose grants of the round come after the refusals decided it.
func startWaiting(t *testing.T, f *fakeNodes, cfg Config, late ...int) waiter {
	t.Helper()
	w := waiter{reply: make(chan Result, 1), cleanups: make([]*node.Cleanup, len(f.pids))}
	cfg.Key, cfg.Value, cfg.Resource, cfg.Reply = "k", "v", "r", w.reply
	cfg.TTL, cfg.NodeTimeout, cfg.Attempts, cfg.Line = 10*time.Second, 10*time.Second, 1, waitLine{f}
	cfg.NewBackOff = func() backoff.BackOff { return backoff.NewConstantBackOff(time.Hour) }
	w.ref, w.st = start(NewPool(f.system, nil, 0, f.shared()), cfg)
	r, to := round[*node.Acquire](t, f)
	for i := range f.pids {
		if !slices.Contains(late, i) {
			f.system.Root.Send(to, &node.Vote{Node: i, Round: r, Outcome: node.Taken, Holder: node.Digest("h"),
				Until: time.Now().Add(time.Hour)})
		}
	}
	for _, i := range late {
		f.vote(to, i, r, node.Granted)
	}
	for range f.pids {
		got := f.next(t)
		rel, ok := got.cmd.(*node.Cleanup)
		if !ok {
			t.Fatalf("node %d got %T, want the failed round's cleanup", got.node, got.cmd)
		}
		w.cleanups[got.node] = rel
	}
	return w
}

// grantFrom is node i's announcement that it granted the key to the
// lease valued "v".
func grantFrom(st *State, i int) *Wake {
	return &Wake{State: st, Cause: WakeRelease, Holder: node.Digest("h"), Node: i, Next: node.Digest("v"), Granted: true}
}

// quiet fails if a node gets a command within a moment.
func (f *fakeNodes) quiet(t *testing.T) {
	t.Helper()
	select {
	case got := <-f.cmds:
		t.Fatalf("node %d got %T", got.node, got.cmd)
	case <-time.After(quietPeriod):
	}
}

// quietPeriod bounds the waits that prove something does not happen: long
// enough that a message already sent would have arrived.
const quietPeriod = 50 * time.Millisecond

// On one node, a grant is the lease: held without a round, its validity
// counted from when the caller began to wait (the grant's announcement
// may come late; the key's TTL runs from the grant, which came after).
func TestGrantHoldsWithoutARound(t *testing.T) {
	f := newFakeNodes(t, 1)
	since := time.Now().Add(-100 * time.Millisecond)
	w := startWaiting(t, f, Config{Since: since})
	w.ref.Post(grantFrom(w.st, 0))
	if r := result(t, w.reply); r.Err != nil {
		t.Fatalf("not held: %v", r.Err)
	}
	f.quiet(t)
	if want := since.Add(10*time.Second - Drift(10*time.Second, 0.01)); !w.st.Until().Equal(want) {
		t.Fatalf("held until %v, want %v: from since", w.st.Until(), want)
	}
}

// On three nodes, a grant asks the other two alone; another node's grant
// while they answer makes the quorum, and their answers come too late to
// count twice. (The waiting round failed at nodes 0 and 1's refusals.)
func TestGrantsMakeAQuorum(t *testing.T) {
	f := newFakeNodes(t, 3)
	since := time.Now().Add(-100 * time.Millisecond)
	w := startWaiting(t, f, Config{Since: since})
	ref, st, reply := w.ref, w.st, w.reply
	ref.Post(grantFrom(st, 1))
	var r uint64
	var to *actor.PID
	asked := map[int]bool{}
	for range 2 {
		got := f.next(t)
		if _, ok := got.cmd.(*node.Acquire); !ok {
			t.Fatalf("node %d got %T, want *node.Acquire", got.node, got.cmd)
		}
		asked[got.node] = true
		r, to = requestOf(got.cmd).Round, requestOf(got.cmd).ReplyTo
	}
	if asked[1] || len(asked) != 2 {
		t.Fatalf("asked nodes %v, want 0 and 2: node 1 granted", asked)
	}
	ref.Post(grantFrom(st, 0))
	if res := result(t, reply); res.Err != nil {
		t.Fatalf("not held: %v", res.Err)
	}
	f.vote(to, 0, r, node.Taken) // late: node 0's grant counted
	f.vote(to, 2, r, node.Taken)
	if want := since.Add(10*time.Second - Drift(10*time.Second, 0.01)); !st.Until().Equal(want) {
		t.Fatalf("held until %v, want %v: from since", st.Until(), want)
	}
	if err := st.Err(); err != nil {
		t.Fatalf("the lease ended: %v", err)
	}
}

// A grant is only named next for a lease that began to wait too long ago
// (its validity from then would be short) and for a fenced one (a grant
// brings no token): each runs its round, which the granting node answers
// as to the key's owner.
func TestGrantNotCounted(t *testing.T) {
	for name, c := range map[string]Config{
		"waited long": {Since: time.Now().Add(-5 * time.Second)},
		"fenced":      {Since: time.Now(), FenceKey: "k:fence"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakeNodes(t, 1)
			notCounted(t, f, startWaiting(t, f, c), 0)
		})
	}
}

// A grant counts while the lease began to wait less than
// TTL/GrantFreshDivisor ago, and not from then on: on one node, a fresh
// grant is the lease, a stale one only names it.
func TestGrantFreshness(t *testing.T) {
	fresh := 10 * time.Second / GrantFreshDivisor
	for name, waited := range map[string]time.Duration{"fresh": fresh - time.Nanosecond, "stale": fresh} {
		t.Run(name, func(t *testing.T) {
			f := newFakeNodes(t, 1)
			clock := newFakeClock()
			f.clock = clock
			w := startWaiting(t, f, Config{Since: clock.Now()})
			clock.Advance(waited)
			if name == "stale" {
				notCounted(t, f, w, 0)
				return
			}
			w.ref.Post(grantFrom(w.st, 0))
			if r := result(t, w.reply); r.Err != nil {
				t.Fatalf("a grant %v after the wait began: not held: %v", waited, r.Err)
			}
		})
	}
}

// A failed round's cleanup keeps a grant on the nodes that refused the
// round (a key of the lease there can only be a grant) and deletes the
// lease's key elsewhere; a grant from those nodes no longer counts, since
// the cleanup may have deleted it before its announcement came.
func TestCleanupKeepsGrants(t *testing.T) {
	f := newFakeNodes(t, 3)
	w := startWaiting(t, f, Config{Since: time.Now()}, 1) // node 1's grant comes too late
	for i, rel := range w.cleanups {
		if rel.Keep&0b111 != 0b101 {
			t.Fatalf("node %d: the cleanup keeps grants on nodes %b, want 101: the refusing ones", i, rel.Keep)
		}
	}
	notCounted(t, f, w, 1)
}

// notCounted checks that node i's grant to w only names it: w runs a
// round on every node, and is not answered before it.
func notCounted(t *testing.T, f *fakeNodes, w waiter, i int) {
	t.Helper()
	w.ref.Post(grantFrom(w.st, i))
	round[*node.Acquire](t, f)
	select {
	case res := <-w.reply:
		t.Fatalf("answered %+v before its round", res)
	default:
	}
}

// A node whose grant counted answers the round too: its answer does not
// count a second time.
func TestGrantCountsOnce(t *testing.T) {
	f := newFakeNodes(t, 5)
	w := startWaiting(t, f, Config{Since: time.Now()})
	ref, st, reply := w.ref, w.st, w.reply
	ref.Post(grantFrom(st, 0))
	var r uint64
	var to *actor.PID
	for range 4 {
		got := f.next(t)
		r, to = requestOf(got.cmd).Round, requestOf(got.cmd).ReplyTo
	}
	ref.Post(grantFrom(st, 1))
	f.vote(to, 1, r, node.Granted) // counted already
	f.vote(to, 2, r, node.Taken)
	select {
	case res := <-reply:
		t.Fatalf("answered %+v with two grants of five", res)
	case <-time.After(50 * time.Millisecond):
	}
	f.vote(to, 3, r, node.Granted)
	if res := result(t, reply); res.Err != nil {
		t.Fatalf("not held: %v", res.Err)
	}
}

// A node that refused the round before the holder's release reached it
// then grants the key and names the lease next: too late to count, the
// grant makes the lease look again at once when the round fails, rather
// than wait for the holder's keys to expire (or to hear its release from
// nodes that cannot announce).
func TestLateGrantLooksAgain(t *testing.T) {
	f := newFakeNodes(t, 3)
	w := startWaiting(t, f, Config{Since: time.Now()})
	w.ref.Post(grantFrom(w.st, 0))
	var r uint64
	var to *actor.PID
	for range 2 {
		got := f.next(t)
		r, to = requestOf(got.cmd).Round, requestOf(got.cmd).ReplyTo
	}
	taken := func(i int) {
		f.system.Root.Send(to, &node.Vote{Node: i, Round: r, Outcome: node.Taken, Holder: node.Digest("h"),
			Until: time.Now().Add(time.Hour)})
	}
	// One mailbox, one sender: the actor handles these in this order.
	taken(1)                       // node 1's refusal counted first,
	w.ref.Post(grantFrom(w.st, 1)) // then its grant, too late to count;
	taken(2)                       // the round is lost
	releases, acquires := 0, 0
	for range 2 * len(f.pids) { // the cleanup, and a round at once
		switch f.next(t).cmd.(type) {
		case *node.Cleanup:
			releases++
		case *node.Acquire:
			acquires++
		}
	}
	if releases != 3 || acquires != 3 {
		t.Fatalf("%d releases and %d acquires, want the cleanup and a round on each node", releases, acquires)
	}
}
