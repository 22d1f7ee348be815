package lease

import (
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/redlease/redlease/node"
)

// An actor the pool takes back runs the next lease, and nothing that
// arrives late about the first (votes, calls on its handle) counts for the
// second.
func TestPoolReusesActorsAndKeepsLeasesApart(t *testing.T) {
	f := newFakeNodes(t, 5)
	pool := NewPool(f.system, nil, 1, f.shared())
	cfg := func(reply chan Result) Config {
		return Config{Resource: "r", Key: "k", Value: "v",
			TTL: 10 * time.Second, NodeTimeout: 10 * time.Second, Attempts: 1, Reply: reply}
	}

	// Lease A: held, released, every vote in.
	replyA := make(chan Result, 1)
	pidA, stA := start(pool, cfg(replyA))
	rA, to := round[*node.Acquire](t, f)
	for n := range 5 {
		f.vote(to, n, rA, node.Granted)
	}
	if res := result(t, replyA); res.Err != nil {
		t.Fatalf("A: %v", res.Err)
	}
	released := make(chan ReleaseResult, 1)
	f.system.Root.Send(pidA, &Release{State: stA, Reply: released})
	rAr, _ := round[*node.Release](t, f)
	for n := range 5 {
		f.vote(to, n, rAr, node.Granted)
	}
	<-released
	waitClosed(t, stA.Stopped(), "A's actor done")

	// Lease B gets A's actor.
	replyB := make(chan Result, 1)
	pidB, stB := start(pool, cfg(replyB))
	if pidB != pidA {
		t.Fatalf("B runs on %v, not on A's idle actor %v", pidB, pidA)
	}
	rB, _ := round[*node.Acquire](t, f)
	if rB <= rAr {
		t.Fatalf("B's round %d does not follow A's last %d", rB, rAr)
	}
	// Late about A: its votes and calls on its handle.
	for n := range 3 {
		f.vote(to, n, rAr, node.Granted)
	}
	extended := make(chan ExtendResult, 1)
	f.system.Root.Send(pidA, &Extend{State: stA, Reply: extended})
	if r := <-extended; !errors.Is(r.Err, ErrReleased) {
		t.Fatalf("Extend on A while B runs: %v, want A's ErrReleased", r.Err)
	}
	f.system.Root.Send(pidA, &Release{State: stA, Reply: released})
	if r := <-released; !errors.Is(r.Err, ErrReleased) {
		t.Fatalf("Release on A while B runs: %v, want A's ErrReleased", r.Err)
	}

	// B is refused: its cleanup goes out, and B is done only once all
	// five cleanup votes are in, A's late votes not counted among them.
	for n := range 5 {
		f.vote(to, n, rB, node.Taken)
	}
	rBr, _ := round[*node.Release](t, f)
	for n := range 4 {
		f.vote(to, n, rBr, node.Taken)
	}
	select {
	case <-stB.Stopped():
		t.Fatal("B done with a cleanup vote still owed")
	case res := <-replyB:
		t.Fatalf("B answered %v with a cleanup vote still owed", res.Err)
	case <-time.After(50 * time.Millisecond):
	}
	f.vote(to, 4, rBr, node.Taken)
	if res := result(t, replyB); res.Err == nil {
		t.Fatal("B acquired on refusals")
	}
	waitClosed(t, stB.Stopped(), "B's actor done")
	if err := stB.Err(); err != nil {
		t.Fatalf("B, never held, has Err %v", err)
	}
	pool.Close()
}

func waitClosed(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(5 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// A held lease keeps its actor, so the actor's size is most of a held
// lease's heap. Go puts an 8-byte header before a heap object over 512
// bytes that has pointers, and rounds up to a size class: at most 632
// bytes take the 640-byte class, 8 more take the 704-byte one.
func TestLeaseActorFitsItsSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(leaseActor{}); n > 632 {
		t.Fatalf("leaseActor is %d bytes: over 632, each held lease costs a 704-byte allocation instead of 640", n)
	}
}

// An actor stopped while it acquires still answers the acquirer, who waits
// on the reply alone; and is done with the lease.
func TestStoppedActorStillAnswers(t *testing.T) {
	f := newFakeNodes(t, 5)
	pool := NewPool(f.system, nil, 1, f.shared())
	reply := make(chan Result, 1)
	pid, st := start(pool, Config{Resource: "r", Key: "k", Value: "v",
		TTL: 10 * time.Second, NodeTimeout: 10 * time.Second, Attempts: 1, Reply: reply})
	round[*node.Acquire](t, f) // the round is out, no vote will come
	f.system.Root.Stop(pid)
	if res := result(t, reply); !errors.Is(res.Err, errStoppedUnanswered) {
		t.Fatalf("acquire of a stopped actor: %v, want errStoppedUnanswered", res.Err)
	}
	waitClosed(t, st.Stopped(), "the stopped actor done with the lease")
}
