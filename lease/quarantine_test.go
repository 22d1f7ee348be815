package lease

import (
	"errors"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cenkalti/backoff/v4"

	"github.com/redlease/redlease/node"
)

// quarantined votes as a node in restart quarantine does: Failed with
// ErrQuarantined and the end of its quarantine.
func (f *fakeNodes) quarantined(to *actor.PID, n int, round uint64, until time.Time) {
	f.system.Root.Send(to, &node.Vote{Node: n, Round: round, Outcome: node.Failed, Err: node.ErrQuarantined, Until: until})
}

// A round that only a quarantined node kept from a quorum is retried once
// that node is back, not before: the attempts are not spent on rounds that
// cannot win.
func TestQuarantineWaitedOut(t *testing.T) {
	f := newFakeNodes(t, 3)
	reply, _ := spawn(f, Config{
		TTL: 10 * time.Second, NodeTimeout: 10 * time.Second, Attempts: 2,
		NewBackOff: func() backoff.BackOff { return backoff.NewConstantBackOff(time.Millisecond) },
	})
	r1, to := round[*node.Acquire](t, f)
	back := time.Now().Add(200 * time.Millisecond)
	f.quarantined(to, 0, r1, back)
	f.vote(to, 1, r1, node.Taken) // node 2 still out: with node 0 a quorum
	round[*node.Cleanup](t, f)
	r2, _ := round[*node.Acquire](t, f)
	if now := time.Now(); now.Before(back) {
		t.Fatalf("retried %v before the quarantine ends", back.Sub(now))
	}
	f.vote(to, 0, r2, node.Granted)
	f.vote(to, 2, r2, node.Granted)
	if res := result(t, reply); res.Err != nil || res.Attempts != 2 {
		t.Fatalf("result %+v, want held at the second attempt", res)
	}
}

// Refusals that make a quorum impossible whatever the quarantined node
// does are retried on the backoff, without waiting for it.
func TestQuarantineNotWaitedWhenNoHelp(t *testing.T) {
	f := newFakeNodes(t, 3)
	reply, _ := spawn(f, Config{
		TTL: 10 * time.Second, NodeTimeout: 10 * time.Second, Attempts: 2,
		NewBackOff: func() backoff.BackOff { return backoff.NewConstantBackOff(time.Millisecond) },
	})
	r1, to := round[*node.Acquire](t, f)
	f.vote(to, 1, r1, node.Taken)
	f.vote(to, 2, r1, node.Taken)
	rr1, _ := round[*node.Cleanup](t, f)
	f.quarantined(to, 0, r1, time.Now().Add(time.Hour)) // late, and no help
	r2, _ := round[*node.Acquire](t, f)                 // within next's 5s: not after the hour
	f.vote(to, 1, r2, node.Taken)
	f.vote(to, 2, r2, node.Taken)
	rr, _ := round[*node.Cleanup](t, f)
	f.vote(to, 0, r2, node.Taken)
	for n := range 3 {
		f.vote(to, n, rr1, node.Granted)
		f.vote(to, n, rr, node.Granted)
	}
	if res := result(t, reply); !errors.Is(res.Err, errRefused) {
		t.Fatalf("result %v, want refused", res.Err)
	}
}

// One attempt (TryAcquire) fails at once, saying which node sits out until
// when; so does a wait that would end after the caller's deadline.
func TestQuarantineNotWaitedPastBudget(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want error
	}{
		{"one attempt", Config{Attempts: 1}, errQuarantine},
		{"past the deadline", Config{Attempts: 5, NewBackOff: func() backoff.BackOff { return backoff.NewConstantBackOff(time.Millisecond) },
			Deadline: time.Now().Add(time.Minute)}, errQuarantinePastDeadline},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeNodes(t, 3)
			tt.cfg.TTL, tt.cfg.NodeTimeout = 10*time.Second, 10*time.Second
			reply, _ := spawn(f, tt.cfg)
			r, to := round[*node.Acquire](t, f)
			back := time.Now().Add(time.Hour)
			f.quarantined(to, 0, r, back)
			f.vote(to, 1, r, node.Taken)
			rr, _ := round[*node.Cleanup](t, f)
			f.vote(to, 2, r, node.Granted)
			for n := range 3 {
				f.vote(to, n, rr, node.Granted)
			}
			res := result(t, reply)
			if !errors.Is(res.Err, tt.want) || res.Attempts != 1 {
				t.Fatalf("result %+v, want %v after 1 attempt", res, tt.want)
			}
			if v := res.Votes[0]; !v.Until.Equal(back) || !errors.Is(v.Err, node.ErrQuarantined) {
				t.Fatalf("node 0's vote %+v, want ErrQuarantined until %v", v, back)
			}
		})
	}
}

func TestQuarantineEnd(t *testing.T) {
	now := time.Now()
	q := func(d time.Duration) node.Vote {
		return node.Vote{Outcome: node.Failed, Err: node.ErrQuarantined, Until: now.Add(d)}
	}
	g, x, out := node.Vote{Outcome: node.Granted}, node.Vote{Outcome: node.Taken}, node.Vote{}
	tests := []struct {
		name  string
		votes []node.Vote
		want  time.Duration // -1: no wait
	}{
		{"one needed of one", []node.Vote{q(time.Second), x, g}, time.Second},
		{"one needed, pending counts", []node.Vote{q(time.Second), x, out}, time.Second},
		{"refused anyway", []node.Vote{q(time.Second), x, x}, -1},
		{"no quarantine", []node.Vote{x, x, g}, -1},
		{"quorum without it", []node.Vote{q(time.Second), g, g}, -1},
		{"one needed of two, pending counts", []node.Vote{q(2 * time.Second), q(time.Second), x, g, out}, time.Second},
		{"two needed of two: the later", []node.Vote{q(2 * time.Second), q(time.Second), x, x, g}, 2 * time.Second},
		{"one needed of two: the earlier", []node.Vote{q(2 * time.Second), q(time.Second), g, g, x}, time.Second},
		{"one needed of three", []node.Vote{q(3 * time.Second), q(time.Second), q(2 * time.Second), g, g}, time.Second},
		{"two needed of three", []node.Vote{q(3 * time.Second), q(time.Second), q(2 * time.Second), g, x}, 2 * time.Second},
		{"other refusals too many", []node.Vote{q(time.Second), q(time.Second), x, x, x}, -1},
	}
	for _, tt := range tests {
		got := quarantineEnd(tt.votes)
		switch {
		case tt.want < 0 && !got.IsZero():
			t.Errorf("%s: waits until +%v, want no wait", tt.name, got.Sub(now))
		case tt.want >= 0 && !got.Equal(now.Add(tt.want)):
			t.Errorf("%s: waits until %v, want +%v", tt.name, got, tt.want)
		}
	}
}
