package lease

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/redlease/redlease/node"
)

// fenceRound collects the Fence commands of one write-back and returns the
// nodes they went to, their token and round.
func fenceRound(t *testing.T, f *fakeNodes, want int) (nodes []int, token, round uint64, to *actor.PID) {
	t.Helper()
	nodes, fences := commands[*node.Fence](t, f, want)
	for _, fc := range fences {
		if token != 0 && fc.Token != token {
			t.Fatalf("tokens %d and %d in one write-back", token, fc.Token)
		}
		token, round, to = fc.Token, fc.Round, fc.ReplyTo
	}
	slices.Sort(nodes)
	return nodes, token, round, to
}

func (f *fakeNodes) grant(to *actor.PID, n int, round, counter uint64) {
	f.system.Root.Send(to, &node.Vote{Node: n, Round: round, Outcome: node.Granted, Counter: counter})
}

// The token is one more than the largest counter among the granting nodes,
// and it is written back to exactly those nodes; the lease is held once a
// quorum of them stored it.
func TestFenceTokenFromGrantingNodes(t *testing.T) {
	f := newFakeNodes(t, 5)
	reply, st := spawn(f, Config{TTL: 10 * time.Second, NodeTimeout: 10 * time.Second, Attempts: 1, FenceKey: "k:fence"})
	r, to := round[*node.Acquire](t, f)
	f.grant(to, 0, r, 5)
	f.vote(to, 1, r, node.Taken) // a refusal's counter would not count
	f.grant(to, 2, r, 9)
	f.grant(to, 3, r, 7)
	nodes, token, fr, _ := fenceRound(t, f, 3)
	if fmt.Sprint(nodes) != "[0 2 3]" || token != 10 {
		t.Fatalf("write-back of token %d to nodes %v, want 10 to [0 2 3]", token, nodes)
	}
	select {
	case res := <-reply:
		t.Fatalf("answered %+v before the token was stored", res)
	case <-time.After(30 * time.Millisecond):
	}
	for _, n := range []int{0, 2, 3} {
		f.vote(to, n, fr, node.Granted)
	}
	if res := result(t, reply); res.Err != nil {
		t.Fatal(res.Err)
	}
	if st.Token() != 10 {
		t.Fatalf("Token %d, want 10", st.Token())
	}
}

// A write-back that a quorum of the granting nodes does not confirm (here
// one node's key expired, another timed out) fails the round: the lease is
// never reported held with a token a later holder might not see.
func TestFenceWithoutQuorumFails(t *testing.T) {
	f := newFakeNodes(t, 5)
	reply, _ := spawn(f, Config{TTL: 10 * time.Second, NodeTimeout: 10 * time.Second, Attempts: 1, FenceKey: "k:fence"})
	r, to := round[*node.Acquire](t, f)
	for _, n := range []int{0, 1, 2} {
		f.grant(to, n, r, uint64(n))
	}
	_, _, fr, _ := fenceRound(t, f, 3)
	f.vote(to, 3, r, node.Granted) // a late grant of the acquire round changes nothing
	f.vote(to, 4, r, node.Taken)
	f.vote(to, 0, fr, node.Granted)
	f.vote(to, 1, fr, node.Taken)
	f.vote(to, 2, fr, node.Timeout)
	rr, _ := round[*node.Cleanup](t, f)
	for n := range 5 {
		f.vote(to, n, rr, node.Granted)
	}
	if res := result(t, reply); res.Err == nil || !errors.Is(res.Err, errFenceRefused) {
		t.Fatalf("result %v, want the write-back refused", res.Err)
	}
}
