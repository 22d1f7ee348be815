package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/testwait"
	"github.com/redlease/redlease/node"
)

// Every pattern of answers on five nodes, against an oracle written
// apart: Read counts the nodes holding the value and takes what a quorum
// guarantees; Resumes holds only on a quorum with validity left, says
// "lost" exactly when no quorum can hold the value (as a release would),
// and otherwise refuses; HeldBy names the owner of a quorum of refusals.
func TestReadEveryPattern(t *testing.T) {
	const n, q = 5, 3
	answers := []node.Vote{
		{Outcome: node.Granted}, // TTL: its node's own, below
		{Outcome: node.Taken, Holder: node.Digest("h"), Meta: "web-2", TTL: time.Second},
		{Outcome: node.Absent}, // no key
		{Outcome: node.Timeout, Err: errors.New("timeout")},
		{Outcome: node.Failed, Err: node.ErrQuarantined, Until: time.Now().Add(time.Minute)},
		{}, // not answered
	}
	start := time.Now()
	ttl := 10 * time.Second
	for m := 0; m < pow(len(answers), n); m++ {
		votes := make([]node.Vote, n)
		var granted []time.Duration
		taken, byH := 0, 0
		for i, k := 0, m; i < n; i, k = i+1, k/len(answers) {
			votes[i] = answers[k%len(answers)]
			switch {
			case votes[i].Outcome == node.Granted:
				votes[i].TTL = time.Duration(i+1) * time.Second
				granted = append(granted, votes[i].TTL)
			case votes[i].Outcome == node.Taken, votes[i].Outcome == node.Absent:
				taken++
				if votes[i].Holder != "" {
					byH++
				}
			}
		}
		// The oracle: the longest TTL that at least q holding nodes reach.
		var want time.Duration
		for _, d := range granted {
			reach := 0
			for _, e := range granted {
				if e >= d {
					reach++
				}
			}
			if reach >= q && d > want {
				want = d
			}
		}
		r := Read(votes, start, 0.01)
		if r.Holding != len(granted) || r.Quorum() != (len(granted) >= q) || r.TTL != want {
			t.Fatalf("%v: Read = %d holding, quorum %t, TTL %v; want %d, %v", votes, r.Holding, r.Quorum(), r.TTL, len(granted), want)
		}
		if want > 0 && r.Until != start.Add(want-Drift(want, 0.01)) || want == 0 && !r.Until.IsZero() {
			t.Fatalf("%v: Until %v after the start, want %v less the drift", votes, r.Until.Sub(start), want)
		}

		err := r.Resumes(start, ttl)
		lostNow := n-taken < q
		switch {
		case len(granted) >= q && err != nil:
			t.Fatalf("%v: a quorum holds the value, Resumes = %v", votes, err)
		case len(granted) < q && (err == nil || !errors.Is(err, errRefused)):
			t.Fatalf("%v: Resumes = %v, want a refusal", votes, err)
		case errors.Is(err, ErrLeaseLost) != lostNow:
			t.Fatalf("%v: Resumes = %v: lost %t, want %t", votes, err, errors.Is(err, ErrLeaseLost), lostNow)
		}
		if len(granted) >= q {
			// The deadline a quorum gives, less the end margin, is too late.
			if err := r.Resumes(r.Until.Add(-EndMargin(ttl)), ttl); !errors.Is(err, errExpiresSoon) {
				t.Fatalf("%v: Resumes at the end margin = %v, want errExpiresSoon", votes, err)
			}
		}
		if got, want := HeldBy(votes), map[bool]string{true: "web-2"}[byH >= q]; got != want {
			t.Fatalf("%v: HeldBy = %q, want %q", votes, got, want)
		}
	}
}

func pow(b, e int) int {
	p := 1
	for range e {
		p *= b
	}
	return p
}

// A check round asks every node once, for the value, with the round's
// start as its Sent, and gives back each node's vote by node; a caller
// who gives up is answered at once.
func TestCheckRound(t *testing.T) {
	f := newFakeNodes(t, 3)
	pool := NewPool(f.system, nil, 0, f.shared())
	type checked struct {
		votes []node.Vote
		start time.Time
		ok    bool
	}
	done := make(chan checked, 1)
	go func() {
		v, s, ok := pool.Check(context.Background(), nil, "k", "v")
		done <- checked{v, s, ok}
	}()
	var sent time.Time
	for range f.pids {
		got := f.next(t)
		c, ok := got.cmd.(*node.Check)
		if !ok || c.Key != "k" || c.Value != "v" || c.ReplyTo == nil || (!sent.IsZero() && c.Sent != sent) {
			t.Fatalf("node %d got %T %+v, want one Check of k, v", got.node, got.cmd, got.cmd)
		}
		sent = c.Sent
		f.system.Root.Send(c.ReplyTo, &node.Vote{Node: got.node, Round: c.Round, Outcome: node.Granted, TTL: time.Duration(got.node+1) * time.Second})
	}
	res := <-done
	if !res.ok || res.start != sent {
		t.Fatalf("check: ok %t, start %v; want the requests' Sent %v", res.ok, res.start, sent)
	}
	for i, v := range res.votes {
		if v.Node != i || v.TTL != time.Duration(i+1)*time.Second {
			t.Fatalf("vote %d: %+v", i, v)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		v, s, ok := pool.Check(ctx, nil, "k", "v")
		done <- checked{v, s, ok}
	}()
	for range f.pids {
		f.next(t) // never answered
	}
	cancel()
	select {
	case res := <-done:
		if res.ok {
			t.Fatal("a cancelled check reports ok")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled check did not return")
	}
}

// A resumed lease is held at once, without a round, with the validity and
// token it was given; Acquired is its first event; and an auto-extended
// one extends at a third of what is left of that validity, not of its TTL.
func TestResumedLease(t *testing.T) {
	clock := newFakeClock()
	f := newFakeNodes(t, 3)
	f.clock = clock
	reply := make(chan Result, 1)
	begun := clock.Now().Add(-100 * time.Millisecond) // the check round's start
	until := begun.Add(3 * time.Second)
	ref, st := start(NewPool(f.system, nil, 0, f.shared()), Config{Resource: "r", Key: "k", Value: "v", Reply: reply,
		TTL: 30 * time.Second, NodeTimeout: time.Second, Attempts: 1, MaxHold: time.Hour, AutoExtend: true,
		Resumed: &Resumed{Start: begun, Until: until, Token: 7}})
	if res := result(t, reply); res.Err != nil || res.Attempts != 0 {
		t.Fatalf("resume: %+v", res)
	}
	if !st.Until().Equal(until) || st.Token() != 7 || st.Err() != nil {
		t.Fatalf("resumed lease: until %v, token %d, err %v; want %v, 7, held", st.Until().Sub(begun), st.Token(), st.Err(), until.Sub(begun))
	}
	if ev := <-st.Events(); ev.Kind != Acquired || !ev.Until.Equal(until) || ev.Token != 7 {
		t.Fatalf("first event %+v, want Acquired until %v", ev, until)
	}
	f.quiet(t) // no round: held on the check's word
	clock.Advance(900*time.Millisecond - time.Millisecond)
	f.quiet(t)
	clock.Advance(time.Millisecond) // a third of the 3s it had, from the check's start
	r, to := round[*node.Extend](t, f)
	for i := range f.pids {
		f.vote(to, i, r, node.Granted)
	}
	testwait.Eventually(t, 5*time.Second, "the extension moves Until", func() bool { return st.Until().After(until) })
	rel := make(chan ReleaseResult, 1)
	ref.Post(&Release{State: st, Reply: rel})
	r, to = round[*node.Release](t, f)
	for i := range f.pids {
		f.vote(to, i, r, node.Granted)
	}
	if res := <-rel; res.Err != nil || res.Deleted < 2 {
		t.Fatalf("release: %+v", res)
	}
}

// A resumed lease whose keys have longer left than its own TTL: its first
// extension round sets the keys it reaches to the TTL, so a round that
// fails brings Until forward to where a won one would put it, not past
// what the shortened keys live.
func TestResumedLeaseFailedRoundShortensUntil(t *testing.T) {
	clock := newFakeClock()
	f := newFakeNodes(t, 3)
	f.clock = clock
	reply := make(chan Result, 1)
	begun := clock.Now()
	until := begun.Add(60 * time.Second) // keys acquired with a 60s TTL
	ttl := 3 * time.Second               // resumed with 3s
	ref, st := start(NewPool(f.system, nil, 0, f.shared()), Config{Resource: "r", Key: "k", Value: "v", Reply: reply,
		TTL: ttl, NodeTimeout: time.Second, Attempts: 1, MaxHold: time.Hour,
		Resumed: &Resumed{Start: begun, Until: until}})
	if res := result(t, reply); res.Err != nil {
		t.Fatalf("resume: %+v", res)
	}
	ext := make(chan ExtendResult, 1)
	ref.Post(&Extend{State: st, Reply: ext})
	r, to := round[*node.Extend](t, f)
	started := clock.Now()
	f.vote(to, 0, r, node.Granted)
	f.vote(to, 1, r, node.Failed)
	f.vote(to, 2, r, node.Failed)
	var ee *ExtendError
	if err := extended(t, ext); !errors.As(err, &ee) {
		t.Fatalf("extension with one node: %v, want an *ExtendError", err)
	}
	if want := started.Add(ttl - Drift(ttl, 0.01)); st.Until().After(want) || st.Err() != nil {
		t.Fatalf("after a failed round: Until %v after its start, Err %v; want at most %v, held",
			st.Until().Sub(started), st.Err(), want.Sub(started))
	}
}
