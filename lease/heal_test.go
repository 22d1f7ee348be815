package lease

import (
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/redlease/redlease/node"
)

// These tests pin down when an extension heals (see Healing in the
// package doc): only once a quorum of nodes extended the lease's own key,
// only on the nodes that answered Absent, with what the TTL has left since
// the round started, on the lease's clock.

const healTTL = 10 * time.Second

// clocked is n fake nodes whose leases run on a fake clock.
func clocked(t *testing.T, n int) (*fakeNodes, *fakeClock) {
	f := newFakeNodes(t, n)
	clock := newFakeClock()
	f.clock = clock
	return f, clock
}

// heldOn acquires a lease on every node of f, on f's clock, without
// auto-extension: its extension rounds are the test's (extendRound).
func heldOn(t *testing.T, f *fakeNodes) (Ref, *State) {
	t.Helper()
	reply := make(chan Result, 1)
	ref, st := start(NewPool(f.system, nil, 0, f.shared()), Config{Resource: "r", Key: "k", Value: "v", Reply: reply,
		TTL: healTTL, NodeTimeout: time.Second, Attempts: 1, MaxHold: time.Hour})
	r, to := round[*node.Acquire](t, f)
	for n := range f.pids {
		f.vote(to, n, r, node.Granted)
	}
	if res := result(t, reply); res.Err != nil {
		t.Fatal(res.Err)
	}
	return ref, st
}

// extendRound asks the lease for an extension round and returns it, with
// where its votes go and where the Extend is answered.
func extendRound(t *testing.T, f *fakeNodes, ref Ref, st *State) (uint64, *actor.PID, chan ExtendResult) {
	t.Helper()
	ext := make(chan ExtendResult, 1)
	ref.Post(&Extend{State: st, Reply: ext})
	r, to := round[*node.Extend](t, f)
	return r, to, ext
}

// heals collects n commands, which must be heals nobody waits for, and
// returns the nodes they went to, in order, and their TTL.
func heals(t *testing.T, f *fakeNodes, n int) (nodes []int, ttl time.Duration) {
	t.Helper()
	nodes, cmds := commands[*node.Heal](t, f, n)
	for _, h := range cmds {
		if h.Key != "k" || h.Value != "v" || h.ReplyTo != nil {
			t.Fatalf("heal %+v: want the lease's key and value, and nobody waiting for its answer", h)
		}
		if ttl != 0 && h.TTL != ttl {
			t.Fatalf("heals with TTLs %v and %v after one decision", ttl, h.TTL)
		}
		ttl = h.TTL
	}
	slices.Sort(nodes)
	return nodes, ttl
}

// wonOnTwo holds a lease on three nodes, on a fake clock, and wins an
// extension round on nodes 0 and 1: node 2 has not answered it yet.
func wonOnTwo(t *testing.T) (f *fakeNodes, clock *fakeClock, st *State, r uint64, to *actor.PID) {
	t.Helper()
	f, clock = clocked(t, 3)
	ref, st := heldOn(t, f)
	r, to, ext := extendRound(t, f, ref, st)
	f.vote(to, 0, r, node.Granted)
	f.vote(to, 1, r, node.Granted)
	extendedOK(t, ext)
	return f, clock, st, r, to
}

// Nodes that answer Absent are healed once the round is won, not before,
// for the TTL less the time since the round started.
func TestHealAfterTheQuorum(t *testing.T) {
	f, clock := clocked(t, 5)
	ref, st := heldOn(t, f)
	r, to, ext := extendRound(t, f, ref, st)
	clock.Advance(30 * time.Millisecond)
	f.vote(to, 3, r, node.Absent)
	f.vote(to, 4, r, node.Absent)
	f.vote(to, 0, r, node.Granted)
	f.vote(to, 1, r, node.Granted)
	f.quiet(t) // two grants of five: nothing is decided, nothing healed
	clock.Advance(10 * time.Millisecond)
	f.vote(to, 2, r, node.Granted)
	extendedOK(t, ext)
	nodes, ttl := heals(t, f, 2)
	if !slices.Equal(nodes, []int{3, 4}) || ttl != healTTL-40*time.Millisecond {
		t.Fatalf("healed nodes %v for %v, want [3 4] for %v", nodes, ttl, healTTL-40*time.Millisecond)
	}
	f.quiet(t)
}

// A node that answers Absent after the round was won is healed when its
// vote comes, for what the TTL has left then.
func TestHealALateAbsentNode(t *testing.T) {
	f, clock, _, r, to := wonOnTwo(t)
	f.quiet(t)
	clock.Advance(25 * time.Millisecond)
	f.vote(to, 2, r, node.Absent)
	if nodes, ttl := heals(t, f, 1); nodes[0] != 2 || ttl != healTTL-25*time.Millisecond {
		t.Fatalf("healed node %v for %v, want node 2 for %v", nodes, ttl, healTTL-25*time.Millisecond)
	}
}

// A round that is not won heals nothing, nor do its votes that come after
// it failed: where its keys are absent, the lease may have lost them to
// another owner meanwhile, and must learn so rather than set them again. A
// quorum of Absent loses the lease: its release goes to every node, and no
// heal.
func TestNoHealWithoutAQuorum(t *testing.T) {
	for name, votes := range map[string][]node.Outcome{
		"failed": {node.Granted, node.Absent, node.Failed, node.Timeout, node.Absent}, // the last after it failed
		"lost":   {node.Granted, node.Granted, node.Absent, node.Absent, node.Absent},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakeNodes(t, 5)
			ref, st := heldOn(t, f)
			r, to, ext := extendRound(t, f, ref, st)
			for n, o := range votes {
				f.vote(to, n, r, o)
			}
			if e := <-ext; e.Err == nil {
				t.Fatalf("extended with votes %v", votes)
			}
			if name == "lost" {
				round[*node.Release](t, f)
			} else if st.Err() != nil {
				t.Fatalf("lease ended: %v", st.Err())
			}
			f.quiet(t)
		})
	}
}

// A lease that ended (here, at its deadline) heals nothing, though a vote
// of its last round asks for it.
func TestNoHealOnceEnded(t *testing.T) {
	f, clock, st, r, to := wonOnTwo(t)
	clock.Advance(healTTL)
	if st.Err() == nil {
		t.Fatal("held past its deadline")
	}
	f.vote(to, 2, r, node.Absent)
	f.quiet(t)
}
