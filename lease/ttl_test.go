package lease

import (
	"errors"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/redlease/redlease/node"
)

// holdOn3 acquires a lease of cfg on three fake nodes that all grant it,
// on a fake clock, and returns it held.
func holdOn3(t *testing.T, cfg Config) (*fakeNodes, *fakeClock, Ref, *State) {
	t.Helper()
	f := newFakeNodes(t, 3)
	clock := newFakeClock()
	f.clock = clock
	reply := make(chan Result, 1)
	cfg.Resource, cfg.Key, cfg.Value, cfg.Reply, cfg.Attempts = "r", "k", "v", reply, 1
	ref, st := start(NewPool(f.system, nil, 0, f.shared()), cfg)
	r, to := round[*node.Acquire](t, f)
	for n := range f.pids {
		f.vote(to, n, r, node.Granted)
	}
	if res := result(t, reply); res.Err != nil {
		t.Fatal(res.Err)
	}
	return f, clock, ref, st
}

// roundTTL collects one extension round's commands, one per node, and
// returns its TTL, round and lease actor.
func roundTTL(t *testing.T, f *fakeNodes) (time.Duration, uint64, *actor.PID) {
	t.Helper()
	var ttl time.Duration
	for i := range f.pids {
		got := f.next(t)
		c, ok := got.cmd.(*node.Extend)
		if !ok {
			t.Fatalf("node %d got %T, want *node.Extend", got.node, got.cmd)
		}
		if i > 0 && c.TTL != ttl {
			t.Fatalf("TTLs %v and %v in one round", ttl, c.TTL)
		}
		ttl = c.TTL
		if i == len(f.pids)-1 {
			return ttl, c.Round, c.ReplyTo
		}
	}
	return 0, 0, nil
}

func (f *fakeNodes) voteAll(to *actor.PID, r uint64, o node.Outcome) {
	for n := range f.pids {
		f.vote(to, n, r, o)
	}
}

func extended(t *testing.T, c chan ExtendResult) error {
	t.Helper()
	select {
	case r := <-c:
		return r.Err
	case <-time.After(5 * time.Second):
		t.Fatal("Extend not answered")
		return nil
	}
}

func noCommand(t *testing.T, f *fakeNodes, what string) {
	t.Helper()
	select {
	case got := <-f.cmds:
		t.Fatalf("%s: node %d got %T", what, got.node, got.cmd)
	case <-time.After(50 * time.Millisecond):
	}
}

// An Extend with a TTL sets it on the nodes and makes it the lease's:
// Until follows it, shorter at once (the round may shorten the keys
// whatever its outcome), and later rounds carry it, a failed one's too.
func TestExtendToANewTTL(t *testing.T) {
	f, clock, ref, st := holdOn3(t, Config{TTL: 10 * time.Second, NodeTimeout: time.Second, MaxHold: time.Minute})
	drift := func(ttl time.Duration) time.Duration { return Drift(ttl, 0.01) }

	clock.Advance(time.Second)
	ext := make(chan ExtendResult, 1)
	ref.Post(&Extend{State: st, TTL: 2 * time.Second, Reply: ext})
	ttl, r, to := roundTTL(t, f)
	started := clock.Now()
	want := started.Add(2*time.Second - drift(2*time.Second))
	if ttl != 2*time.Second || !st.Until().Equal(want) {
		t.Fatalf("round sent with TTL %v, Until %v after it; want 2s, %v (brought forward)", ttl, st.Until().Sub(started), want.Sub(started))
	}
	f.voteAll(to, r, node.Granted)
	if err := extended(t, ext); err != nil || !st.Until().Equal(want) {
		t.Fatalf("Extend(2s): %v, Until %v after the round's start; want nil, %v", err, st.Until().Sub(started), want.Sub(started))
	}

	// A failed round to a shorter TTL: Until comes forward all the same.
	clock.Advance(500 * time.Millisecond)
	ref.Post(&Extend{State: st, TTL: time.Second, Reply: ext})
	ttl, r, to = roundTTL(t, f)
	started = clock.Now()
	f.voteAll(to, r, node.Failed)
	var ee *ExtendError
	if err := extended(t, ext); ttl != time.Second || !errors.As(err, &ee) {
		t.Fatalf("failed round of TTL %v: %v; want 1s, an *ExtendError", ttl, err)
	}
	if want := started.Add(time.Second - drift(time.Second)); !st.Until().Equal(want) || st.Err() != nil {
		t.Fatalf("after a failed round to 1s: Until %v after its start, Err %v; want %v, held", st.Until().Sub(started), st.Err(), want.Sub(started))
	}

	// The TTL is the lease's now: an Extend without one carries it.
	ref.Post(&Extend{State: st, Reply: ext})
	if ttl, r, to = roundTTL(t, f); ttl != time.Second {
		t.Fatalf("Extend without a TTL after Extend(1s): round of %v, want 1s", ttl)
	}
	f.voteAll(to, r, node.Granted)
	if err := extended(t, ext); err != nil {
		t.Fatal(err)
	}
}

// An Extend that asks for another TTL than the round in flight waits for
// that round, then runs its own; one asking for the same TTL joins.
func TestExtendWithAnotherTTLWaitsForTheRoundInFlight(t *testing.T) {
	f, _, ref, st := holdOn3(t, Config{TTL: 10 * time.Second, NodeTimeout: time.Second, MaxHold: time.Minute})
	plain, five, seven, fiveAgain := make(chan ExtendResult, 1), make(chan ExtendResult, 1), make(chan ExtendResult, 1), make(chan ExtendResult, 1)
	ref.Post(&Extend{State: st, Reply: plain})
	ttl1, r1, to := roundTTL(t, f)
	ref.Post(&Extend{State: st, TTL: 5 * time.Second, Reply: five})
	ref.Post(&Extend{State: st, TTL: 7 * time.Second, Reply: seven})
	ref.Post(&Extend{State: st, TTL: 5 * time.Second, Reply: fiveAgain})
	noCommand(t, f, "Extend calls for other TTLs while a round is in flight")
	f.voteAll(to, r1, node.Granted)
	if err := extended(t, plain); err != nil || ttl1 != 10*time.Second {
		t.Fatalf("first round of TTL %v: %v; want 10s, extended", ttl1, err)
	}

	ttl2, r2, to := roundTTL(t, f)
	if ttl2 != 5*time.Second {
		t.Fatalf("second round of TTL %v, want 5s", ttl2)
	}
	f.voteAll(to, r2, node.Granted)
	for _, c := range []chan ExtendResult{five, fiveAgain} {
		if err := extended(t, c); err != nil {
			t.Fatalf("Extend(5s): %v", err)
		}
	}
	ttl3, r3, to := roundTTL(t, f)
	if ttl3 != 7*time.Second {
		t.Fatalf("third round of TTL %v, want 7s", ttl3)
	}
	f.voteAll(to, r3, node.Granted)
	if err := extended(t, seven); err != nil {
		t.Fatalf("Extend(7s): %v", err)
	}
	noCommand(t, f, "after the last Extend was answered")
}

// A TTL that would hold the lease past its maximum hold plus its first
// TTL is refused without a round, and changes nothing; Extend calls that
// wait for a round get the lease's end.
func TestExtendTTLBoundedByTheHold(t *testing.T) {
	f, clock, ref, st := holdOn3(t, Config{TTL: 10 * time.Second, NodeTimeout: time.Second, MaxHold: 5 * time.Second})
	clock.Advance(time.Second) // the hold ends 15s after acquiring: 14s from now

	ext := make(chan ExtendResult, 1)
	ref.Post(&Extend{State: st, TTL: 14 * time.Second, Reply: ext})
	if err := extended(t, ext); !errors.Is(err, ErrBeyondMaxHold) || st.Err() != nil {
		t.Fatalf("Extend(14s) 1s after acquiring, hold ending at 15s: %v, lease Err %v; want ErrBeyondMaxHold, held", err, st.Err())
	}
	ref.Post(&Extend{State: st, TTL: 13 * time.Second, Reply: ext})
	ttl, r, to := roundTTL(t, f) // no round went out for 14s
	if ttl != 13*time.Second {
		t.Fatalf("Extend(13s) sent a round of %v", ttl)
	}
	waiting := make(chan ExtendResult, 1)
	ref.Post(&Extend{State: st, TTL: 3 * time.Second, Reply: waiting})
	released := make(chan ReleaseResult, 1)
	ref.Post(&Release{State: st, Reply: released})
	for _, c := range []chan ExtendResult{ext, waiting} {
		if err := extended(t, c); !errors.Is(err, ErrReleased) {
			t.Fatalf("Extend pending when the lease was released: %v, want ErrReleased", err)
		}
	}
	f.voteAll(to, r, node.Granted) // the extension round's votes, late
}
