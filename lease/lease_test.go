package lease

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cenkalti/backoff/v4"

	"github.com/redlease/redlease/actors"
	"github.com/redlease/redlease/node"
)

// These tests drive one lease actor against node actors that the test
// answers by hand, to pin down the vote protocol: round numbers, early
// decisions, cleanup. Behaviour on real Redis is tested in engine.

type fakeNodes struct {
	system *actor.ActorSystem
	pids   []*actor.PID
	cmds   chan received
	held   []received // taken from cmds out of turn (commands), for next
	clock  Clock      // the leases' (nil: the system's)
}

type received struct {
	node int
	cmd  node.Command
}

func newFakeNodes(t *testing.T, n int) *fakeNodes {
	f := &fakeNodes{system: actors.NewSystem(nil), cmds: make(chan received, 100)}
	for i := range n {
		f.pids = append(f.pids, f.system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
			if c, ok := ctx.Message().(node.Command); ok {
				f.cmds <- received{i, c}
			}
		})))
	}
	t.Cleanup(f.system.Shutdown)
	return f
}

// next returns the next command any node received.
func (f *fakeNodes) next(t *testing.T) received {
	t.Helper()
	if len(f.held) > 0 {
		r := f.held[0]
		f.held = f.held[1:]
		return r
	}
	select {
	case r := <-f.cmds:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no command reached the nodes")
		return received{}
	}
}

// round collects one command per node and checks they are all of type T
// and of one round.
func round[T node.Command](t *testing.T, f *fakeNodes) (uint64, *actor.PID) {
	t.Helper()
	var r uint64
	var reply *actor.PID
	_, cmds := commands[T](t, f, len(f.pids))
	for _, c := range cmds {
		rq := requestOf(c)
		if r != 0 && rq.Round != r {
			t.Fatalf("round %d and %d in one send", r, rq.Round)
		}
		r, reply = rq.Round, rq.ReplyTo
	}
	return r, reply
}

// commands collects the next n commands the nodes received, which must
// all be Ts, and the nodes they went to, in the order they came. Each
// fake node forwards on its own goroutine, so a node already counted may
// pass its next command (another round's) before the others pass this
// one: it is held back for next, in its node's order, which is all the
// lease may count on.
func commands[T node.Command](t *testing.T, f *fakeNodes, n int) (nodes []int, cmds []T) {
	t.Helper()
	var later []received
	for len(cmds) < n {
		got := f.next(t)
		c, ok := got.cmd.(T)
		if !ok && slices.Contains(nodes, got.node) {
			later = append(later, got)
			continue
		}
		if !ok {
			var want T
			t.Fatalf("node %d got %T, want %T", got.node, got.cmd, want)
		}
		nodes, cmds = append(nodes, got.node), append(cmds, c)
	}
	f.held = append(later, f.held...)
	return nodes, cmds
}

func requestOf(c node.Command) node.Request {
	switch c := c.(type) {
	case *node.Acquire:
		return c.Request
	case *node.Extend:
		return c.Request
	case *node.Release:
		return c.Request
	case *node.Cleanup:
		return c.Request
	case *node.HandOff:
		return c.Request
	case *node.Leave:
		return c.Request
	case *node.Heal:
		return c.Request
	}
	panic("unknown command")
}

func (f *fakeNodes) vote(to *actor.PID, n int, round uint64, o node.Outcome) {
	f.system.Root.Send(to, &node.Vote{Node: n, Round: round, Outcome: o, RTT: time.Millisecond})
}

// shared is what the leases of a pool over these nodes share.
func (f *fakeNodes) shared() Shared { return Shared{Nodes: f.pids, DriftFactor: 0.01, Clock: f.clock} }

func spawn(f *fakeNodes, cfg Config) (chan Result, *State) {
	reply := make(chan Result, 1)
	cfg.Key, cfg.Value, cfg.Resource = "k", "v", "r"
	cfg.Reply = reply
	_, st := start(NewPool(f.system, nil, 0, f.shared()), cfg) // keeps no actor: one per lease
	return reply, st
}

// start starts cfg's lease on pool, as the engine does.
func start(pool *Pool, cfg Config) (Ref, *State) {
	r, st, run := pool.Start(cfg)
	if run {
		r.Run()
	}
	return r, st
}

// pid is the actor running r's lease now (nil: parked, or done).
func (r Ref) pid() *actor.PID {
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	if r.b.actor == nil {
		return nil
	}
	return r.b.actor.self
}

// extendedOK waits for ext's answer, which must be that the lease was
// extended.
func extendedOK(t *testing.T, ext chan ExtendResult) {
	t.Helper()
	select {
	case e := <-ext:
		if e.Err != nil {
			t.Fatalf("Extend: %v", e.Err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no answer to Extend")
	}
}

func result(t *testing.T, c chan Result) Result {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no result")
		return Result{}
	}
}

// A quorum of grants decides at once, without waiting on the others.
func TestQuorumDecidesEarly(t *testing.T) {
	f := newFakeNodes(t, 5)
	start := time.Now()
	reply, st := spawn(f, Config{TTL: 10 * time.Second, NodeTimeout: 10 * time.Second, Attempts: 1})
	r, to := round[*node.Acquire](t, f)
	for _, n := range []int{4, 0, 2} {
		f.vote(to, n, r, node.Granted)
	}
	res := result(t, reply)
	end := time.Now()
	if res.Err != nil {
		t.Fatalf("3 of 5 granted: %v", res.Err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("decided after %v: it waited for the node timeout", took)
	}
	// Until = round start + TTL − (TTL·0.01 + 2ms), the round starting
	// between spawn and answer.
	want := 10*time.Second - 102*time.Millisecond
	if u := st.Until(); u.Before(start.Add(want)) || u.After(end.Add(want)) {
		t.Fatalf("Until is start+%v, want start+%v at the earliest and end+%v at the latest", u.Sub(start), want, want)
	}
}

// A held lease keeps no votes between rounds (dropVotes): the acquire
// round's late votes find none and change nothing, and the next round
// counts its own.
func TestHeldLeaseVotesBetweenRounds(t *testing.T) {
	f := newFakeNodes(t, 5)
	reply := make(chan Result, 1)
	ref, st := start(NewPool(f.system, nil, 0, f.shared()), Config{Resource: "r", Key: "k", Value: "v", Reply: reply,
		TTL: 10 * time.Second, NodeTimeout: 10 * time.Second, Attempts: 1, MaxHold: time.Minute})
	r, to := round[*node.Acquire](t, f)
	for _, n := range []int{0, 1, 2} {
		f.vote(to, n, r, node.Granted)
	}
	if res := result(t, reply); res.Err != nil {
		t.Fatal(res.Err)
	}
	f.vote(to, 3, r, node.Granted) // late, after the lease let go of its votes
	f.vote(to, 4, r, node.Taken)
	ext := make(chan ExtendResult, 1)
	ref.Post(&Extend{State: st, Reply: ext}) // on another actor, if the lease parked
	r2, to2 := round[*node.Extend](t, f)
	if to2 == to && r2 <= r {
		t.Fatalf("extend round %d after acquire round %d, on one actor", r2, r)
	}
	to = to2
	for _, n := range []int{4, 3} {
		f.vote(to, n, r2, node.Granted)
	}
	f.vote(to, 2, r2, node.Taken)
	select {
	case e := <-ext:
		t.Fatalf("extended with 2 grants of 5: %v", e.Err)
	case <-time.After(50 * time.Millisecond):
	}
	f.vote(to, 0, r2, node.Granted)
	extendedOK(t, ext) // 3 grants of 5
	if err := st.Err(); err != nil {
		t.Fatalf("lease ended: %v", err)
	}
}

// Votes from an earlier round never count toward the current one.
func TestStaleVotesIgnored(t *testing.T) {
	f := newFakeNodes(t, 3)
	reply, _ := spawn(f, Config{
		TTL: 10 * time.Second, NodeTimeout: 100 * time.Millisecond, Attempts: 2,
		NewBackOff: func() backoff.BackOff { return backoff.NewConstantBackOff(time.Millisecond) },
	})
	r1, to := round[*node.Acquire](t, f)
	f.vote(to, 0, r1, node.Granted) // then nodes 1 and 2 stay silent: the round times out
	round[*node.Cleanup](t, f)      // cleanup of round 1 on all nodes
	r3, _ := round[*node.Acquire](t, f)
	if r3 <= r1 {
		t.Fatalf("round %d after round %d", r3, r1)
	}
	f.vote(to, 1, r1, node.Granted) // late grants of round 1
	f.vote(to, 2, r1, node.Granted)
	f.vote(to, 0, r3, node.Taken)
	f.vote(to, 1, r3, node.Taken)
	res := result(t, reply)
	if res.Err == nil {
		t.Fatal("held on votes of an earlier round")
	}
	if res.Attempts != 2 || res.Votes[0].Outcome != node.Taken || res.Votes[1].Outcome != node.Taken {
		t.Fatalf("result %+v: want 2 attempts and the last round's votes", res)
	}
}

// The retry schedule is made when a lease first waits, once: a lease won
// at its first round makes none.
func TestBackOffMadeAtFirstWait(t *testing.T) {
	f := newFakeNodes(t, 1)
	made := 0
	cfg := Config{TTL: 10 * time.Second, NodeTimeout: time.Second, Attempts: 3,
		NewBackOff: func() backoff.BackOff { made++; return backoff.NewConstantBackOff(time.Millisecond) }}

	reply, _ := spawn(f, cfg)
	r, to := round[*node.Acquire](t, f)
	f.vote(to, 0, r, node.Granted)
	if res := result(t, reply); res.Err != nil || made != 0 {
		t.Fatalf("won at once: err %v, %d schedules made; want none", res.Err, made)
	}

	reply, _ = spawn(f, cfg)
	for range 2 {
		r, to = round[*node.Acquire](t, f)
		f.vote(to, 0, r, node.Failed)
		round[*node.Cleanup](t, f) // the failed round's cleanup
	}
	r, to = round[*node.Acquire](t, f)
	f.vote(to, 0, r, node.Granted)
	if res := result(t, reply); res.Err != nil || res.Attempts != 3 || made != 1 {
		t.Fatalf("won at the third round: err %v, %d attempts, %d schedules made; want 1", res.Err, res.Attempts, made)
	}
}

// A wake before the alarm is due (one the timer sent as it was reset, or
// set for a lease the actor ran before) does not end the round.
func TestEarlyWakeIgnored(t *testing.T) {
	f := newFakeNodes(t, 3)
	reply, _ := spawn(f, Config{TTL: 10 * time.Second, NodeTimeout: 10 * time.Second, Attempts: 1})
	r, to := round[*node.Acquire](t, f)
	f.system.Root.Send(to, wakeUp)
	f.vote(to, 0, r, node.Granted)
	f.vote(to, 1, r, node.Granted)
	if res := result(t, reply); res.Err != nil {
		t.Fatalf("acquire failed after an early wake: %v", res.Err)
	}
}

// Once a quorum is out of reach the round fails at once and every node is
// told to release, then the failure is reported.
func TestImpossibleQuorumFailsAndCleansUp(t *testing.T) {
	f := newFakeNodes(t, 5)
	reply, st := spawn(f, Config{TTL: 10 * time.Second, NodeTimeout: 10 * time.Second, Attempts: 1})
	r, to := round[*node.Acquire](t, f)
	f.vote(to, 0, r, node.Granted)
	f.vote(to, 1, r, node.Taken)
	f.vote(to, 2, r, node.Failed)
	f.vote(to, 3, r, node.Timeout)
	rr, _ := round[*node.Cleanup](t, f) // sent before node 4 answered
	select {
	case res := <-reply:
		t.Fatalf("answered %+v before the cleanup was acknowledged", res)
	case <-time.After(50 * time.Millisecond):
	}
	f.vote(to, 4, r, node.Granted)
	for n := range 5 {
		f.vote(to, n, rr, node.Granted)
	}
	res := result(t, reply)
	if res.Err == nil || !errors.Is(res.Err, errRefused) {
		t.Fatalf("result %v, want refused", res.Err)
	}
	select {
	case <-st.Stopped():
	case <-time.After(5 * time.Second):
		t.Fatal("actor still running after its answer")
	}
}

// A quorum that arrives after the validity ran out does not count.
func TestQuorumTooLateFails(t *testing.T) {
	f := newFakeNodes(t, 3)
	clock := newFakeClock()
	f.clock = clock
	reply, _ := spawn(f, Config{TTL: 100 * time.Millisecond, NodeTimeout: 99 * time.Millisecond, Attempts: 1})
	r, to := round[*node.Acquire](t, f)
	clock.Advance(98 * time.Millisecond) // validity = 100 − 98 − 3 < 0
	for n := range 3 {
		f.vote(to, n, r, node.Granted)
	}
	r, to = round[*node.Cleanup](t, f)
	for n := range 3 {
		f.vote(to, n, r, node.Granted) // the cleanup's: the time stands still
	}
	if res := result(t, reply); res.Err == nil {
		t.Fatal("held although the quorum came after the validity ran out")
	}
}

// A held lease ends at its deadline with ErrExpired and releases eagerly.
func TestExpiry(t *testing.T) {
	f := newFakeNodes(t, 1)
	reply, st := spawn(f, Config{TTL: 200 * time.Millisecond, NodeTimeout: 50 * time.Millisecond, Attempts: 1})
	r, to := round[*node.Acquire](t, f)
	f.vote(to, 0, r, node.Granted)
	if res := result(t, reply); res.Err != nil {
		t.Fatal(res.Err)
	}
	<-st.Done()
	if now := time.Now(); now.Before(st.Until().Add(-EndMargin(200 * time.Millisecond))) {
		t.Fatalf("ended at %v, more than the end margin before Until %v", now, st.Until())
	}
	if !errors.Is(st.Err(), ErrExpired) {
		t.Fatalf("Err %v, want ErrExpired", st.Err())
	}
	// The lease ended early by the margin, but its keys must keep others
	// out until Until: nothing may delete them before (the random safety
	// run found overlaps when an eager release went out at the end).
	select {
	case got := <-f.cmds:
		t.Fatalf("node %d got %T at the end of an expired lease", got.node, got.cmd)
	case <-time.After(time.Until(st.Until()) + 20*time.Millisecond):
	}
}

// A failed round's cleanup puts a lease that queues back in the queues of
// waiters, at its own since: a node that granted it took it out, and the
// lease goes on waiting.
func TestCleanupKeepsThePlaceInTheQueue(t *testing.T) {
	f := newFakeNodes(t, 3)
	reply, _ := spawn(f, Config{TTL: 10 * time.Second, NodeTimeout: 10 * time.Second, Attempts: 2,
		NewBackOff: func() backoff.BackOff { return backoff.NewConstantBackOff(time.Hour) }, QueueAtOnce: true, Since: time.UnixMicro(123)})
	r, to := round[*node.Acquire](t, f)
	f.vote(to, 0, r, node.Granted)
	f.vote(to, 1, r, node.Taken)
	f.vote(to, 2, r, node.Taken)
	for range 3 {
		got := f.next(t)
		rel, ok := got.cmd.(*node.Cleanup)
		if !ok {
			t.Fatalf("node %d got %T, want the cleanup *node.Cleanup", got.node, got.cmd)
		}
		if rel.Value != "v" || rel.Since != "123" {
			t.Fatalf("node %d: cleanup queues %q since %q, want the lease itself (%q) since 123",
				got.node, rel.Value, rel.Since, "v")
		}
	}
	select {
	case res := <-reply:
		t.Fatalf("answered %+v while backing off", res)
	default:
	}
}

// A release ends its lease (Done closed, Err set) before it can reach a
// node, since it may grant the key to the next holder there, who must
// never see this lease still held: by release, through a line's hand-off,
// and by the engine's Close (issue 27, 8). The lease's end waits a
// moment: a release sent before it would reach a node meanwhile.
func TestReleaseEndsTheLeaseFirst(t *testing.T) {
	for _, how := range []string{"release", "hand-off", "close"} {
		t.Run(how, func(t *testing.T) {
			f := newFakeNodes(t, 3)
			reply := make(chan Result, 1)
			cfg := Config{Resource: "r", Key: "k", Value: "v", Reply: reply,
				TTL: 10 * time.Second, NodeTimeout: 10 * time.Second, Attempts: 1}
			if how == "hand-off" {
				cfg.Line = waitLine{f}
			}
			ref, st := start(NewPool(f.system, nil, 0, f.shared()), cfg)
			r, to := round[*node.Acquire](t, f)
			for n := range 3 {
				f.vote(to, n, r, node.Granted)
			}
			if res := result(t, reply); res.Err != nil {
				t.Fatal(res.Err)
			}
			sentBefore := make(chan int, 1)
			st.AfterEnd(func() {
				time.Sleep(quietPeriod) // a release sent before the end would be in by now
				sentBefore <- len(f.cmds)
			})
			if how == "close" {
				ref.Post(&Close{State: st, Err: ErrReleased, Abort: ErrReleased})
			} else {
				ref.Post(&Release{State: st, Reply: make(chan ReleaseResult, 1)})
			}
			if n := <-sentBefore; n > 0 {
				t.Fatalf("%d releases reached the nodes before the lease ended", n)
			}
			switch got := f.next(t).cmd.(type) {
			case *node.Release:
			case *node.HandOff:
				if how != "hand-off" {
					t.Fatalf("a %s sent %T", how, got)
				}
			default:
				t.Fatalf("no release after the lease ended: %T", got)
			}
		})
	}
}
