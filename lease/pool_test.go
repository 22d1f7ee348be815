package lease

import (
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/redlease/redlease/internal/testwait"
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
	refA, stA := start(pool, cfg(replyA))
	rA, to := round[*node.Acquire](t, f)
	for n := range 5 {
		f.vote(to, n, rA, node.Granted)
	}
	if res := result(t, replyA); res.Err != nil {
		t.Fatalf("A: %v", res.Err)
	}
	released := make(chan ReleaseResult, 1)
	refA.Post(&Release{State: stA, Reply: released})
	rAr, pidA := round[*node.Release](t, f)
	for n := range 5 {
		f.vote(to, n, rAr, node.Granted)
	}
	<-released
	waitClosed(t, stA.Stopped(), "A's actor done")

	// Lease B gets an actor of A's: the one that released it, or the one
	// that acquired it, should that have parked only after the release
	// bound another (a loaded machine).
	replyB := make(chan Result, 1)
	_, stB := start(pool, cfg(replyB))
	rB, pidB := round[*node.Acquire](t, f)
	if pidB != pidA && pidB != to {
		t.Fatalf("B runs on %v, not on A's idle actor %v (or %v)", pidB, pidA, to)
	}
	if rB <= rAr {
		t.Fatalf("B's round %d does not follow A's last %d", rB, rAr)
	}
	// Late about A: its votes and calls on its handle.
	for n := range 3 {
		f.vote(to, n, rAr, node.Granted)
	}
	extended := make(chan ExtendResult, 1)
	refA.Post(&Extend{State: stA, Reply: extended})
	if r := <-extended; !errors.Is(r.Err, ErrReleased) {
		t.Fatalf("Extend on A while B runs: %v, want A's ErrReleased", r.Err)
	}
	refA.Post(&Release{State: stA, Reply: released})
	if r := <-released; !errors.Is(r.Err, ErrReleased) {
		t.Fatalf("Release on A while B runs: %v, want A's ErrReleased", r.Err)
	}

	// B is refused: its cleanup goes out, and B is done only once all
	// five cleanup votes are in, A's late votes not counted among them.
	for n := range 5 {
		f.vote(to, n, rB, node.Taken)
	}
	rBr, _ := round[*node.Cleanup](t, f)
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

// A held lease parks once its round's votes are all in: its actor goes
// back to the pool. A call, its alarm and its deadline each bind it an
// actor again, which runs the lease as before.
func TestHeldLeaseParksAndWakes(t *testing.T) {
	f := newFakeNodes(t, 5)
	pool := NewPool(f.system, nil, 1, f.shared())
	reply := make(chan Result, 1)
	ttl := 600 * time.Millisecond
	ref, st := start(pool, Config{Resource: "r", Key: "k", Value: "v", Reply: reply,
		TTL: ttl, NodeTimeout: time.Second, Attempts: 1, MaxHold: ttl, AutoExtend: true})
	r, to := round[*node.Acquire](t, f)
	for n := range 5 {
		f.vote(to, n, r, node.Granted)
	}
	if res := result(t, reply); res.Err != nil {
		t.Fatal(res.Err)
	}
	waitParked(t, ref)
	pool.mu.Lock()
	idle := len(pool.idle)
	pool.mu.Unlock()
	if idle != 1 {
		t.Fatalf("%d idle actors with the lease parked, want its actor back", idle)
	}

	// A call: Extend.
	ext := make(chan ExtendResult, 1)
	ref.Ask(&Extend{State: st, Reply: ext})
	r, to = round[*node.Extend](t, f)
	for n := range 5 {
		f.vote(to, n, r, node.Granted)
	}
	if e := <-ext; e.Err != nil {
		t.Fatalf("Extend on a parked lease: %v", e.Err)
	}
	waitParked(t, ref)

	// The alarm: automatic extensions at TTL/3, until MaxHold stops
	// them; then the deadline, and the lease expires, with Done and
	// Stopped closed as ever.
	auto := 0
	for {
		select {
		case got := <-f.cmds:
			f.cmds <- got // the round's first command, for round to read
			r, to = round[*node.Extend](t, f)
			for n := range 5 {
				f.vote(to, n, r, node.Granted)
			}
			auto++
			continue
		case <-st.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("neither an extension round nor the end")
		}
		break
	}
	if auto == 0 {
		t.Fatal("the parked lease's alarm started no extension")
	}
	waitClosed(t, st.Stopped(), "the expired lease done")
	if !errors.Is(st.Err(), ErrExpired) {
		t.Fatalf("Err %v, want ErrExpired", st.Err())
	}
	// A call on the lease that is done is answered without an actor.
	released := make(chan ReleaseResult, 1)
	ref.Ask(&Release{State: st, Reply: released})
	if r := <-released; !errors.Is(r.Err, ErrExpired) {
		t.Fatalf("Release after the end: %v, want ErrExpired", r.Err)
	}
	pool.Close()
}

// waitParked waits until r's lease has no actor.
func waitParked(t *testing.T, r Ref) {
	t.Helper()
	testwait.Eventually(t, 5*time.Second, "the held lease parks", func() bool { return r.pid() == nil })
}

// A parked lease keeps its body alone, so the body's size is most of a
// held lease's heap. Go rounds a heap object up to a size class: at most
// 384 bytes take the 384-byte class, 8 more the 416-byte one.
func TestBodyFitsItsSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(body{}); n > 384 {
		t.Fatalf("body is %d bytes: over 384, each held lease costs a 416-byte allocation or more", n)
	}
}

// An actor stopped while it acquires still answers the acquirer, who waits
// on the reply alone; and is done with the lease.
func TestStoppedActorStillAnswers(t *testing.T) {
	f := newFakeNodes(t, 5)
	pool := NewPool(f.system, nil, 1, f.shared())
	reply := make(chan Result, 1)
	_, st := start(pool, Config{Resource: "r", Key: "k", Value: "v",
		TTL: 10 * time.Second, NodeTimeout: 10 * time.Second, Attempts: 1, Reply: reply})
	_, pid := round[*node.Acquire](t, f) // the round is out, no vote will come
	f.system.Root.Stop(pid)
	if res := result(t, reply); !errors.Is(res.Err, errStoppedUnanswered) {
		t.Fatalf("acquire of a stopped actor: %v, want errStoppedUnanswered", res.Err)
	}
	waitClosed(t, st.Stopped(), "the stopped actor done with the lease")
}
