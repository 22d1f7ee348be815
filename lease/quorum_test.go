package lease

import (
	"fmt"
	"testing"
	"time"

	"github.com/redlease/redlease/node"
)

func TestQuorum(t *testing.T) {
	tests := []struct {
		n, want int
	}{
		{1, 1},
		{2, 2},
		{3, 2},
		{4, 3},
		{5, 3},
		{6, 4},
		{7, 4},
	}
	for _, tt := range tests {
		if got := Quorum(tt.n); got != tt.want {
			t.Errorf("Quorum(%d) = %d, want %d", tt.n, got, tt.want)
		}
	}
}

// TestTallyEveryMask feeds a 5-node tally every assignment of the four
// outcomes to the nodes, one vote at a time, and checks won and lost
// against counts kept here.
func TestTallyEveryMask(t *testing.T) {
	const nodes = 5
	const need = 3 // a quorum of 5, written out rather than computed
	outcomes := []node.Outcome{node.Granted, node.Taken, node.Timeout, node.Failed}

	cases := 1
	for range nodes {
		cases *= len(outcomes)
	}
	if cases != 1024 {
		t.Fatalf("enumerating %d cases, want 1024", cases)
	}

	wonTotal, lostTotal := 0, 0
	for mask := range cases {
		votes := make([]node.Outcome, nodes)
		m := mask
		for i := range votes {
			votes[i] = outcomes[m%len(outcomes)]
			m /= len(outcomes)
		}
		name := fmt.Sprint(votes)

		tl := tally{n: nodes}
		granted, refused := 0, 0
		for k, v := range votes {
			tl.add(v)
			if v == node.Granted {
				granted++
			} else {
				refused++
			}
			wantWon, wantLost := granted >= need, refused >= need
			won, lost := tl.won(), tl.lost()
			if won != wantWon {
				t.Errorf("%s after vote %d (%d granted): won() = %v, want %v", name, k+1, granted, won, wantWon)
			}
			if lost != wantLost {
				t.Errorf("%s after vote %d (%d refused): lost() = %v, want %v", name, k+1, refused, lost, wantLost)
			}
			if won && lost {
				t.Errorf("%s after vote %d: both won() and lost()", name, k+1)
			}
		}
		won, lost := tl.won(), tl.lost()
		if won == lost {
			t.Errorf("%s after all votes: won() = %v, lost() = %v, want exactly one true", name, won, lost)
		}
		if won {
			wonTotal++
		}
		if lost {
			lostTotal++
		}
	}
	// Assignments with at least 3 grants out of 5, a grant being 1 of 4
	// outcomes: C(5,3)·3² + C(5,4)·3 + C(5,5) = 90 + 15 + 1 = 106.
	if wonTotal != 106 || lostTotal != 1024-106 {
		t.Errorf("won %d and lost %d of 1024 assignments, want 106 and 918", wonTotal, lostTotal)
	}
}

// heldBy finds one other owner holding a quorum among a failed round's
// votes, and when enough keys in the way expire; a split has none.
func TestHeldBy(t *testing.T) {
	now := time.Now()
	at := func(ms int) time.Time { return now.Add(time.Duration(ms) * time.Millisecond) }
	taken := func(holder string, ms int) node.Vote {
		v := node.Vote{Outcome: node.Taken, Holder: holder}
		if ms >= 0 {
			v.Until = at(ms)
		}
		return v
	}
	granted := node.Vote{Outcome: node.Granted}
	tests := []struct {
		name   string
		votes  []node.Vote
		holder string
		free   time.Time
	}{
		{"one holder on all", []node.Vote{taken("x", 50), taken("x", 10), taken("x", 30), taken("x", 40), taken("x", 20)}, "x", at(30)},
		{"quorum and a stray key", []node.Vote{taken("x", 50), taken("y", 10), taken("x", 30), taken("x", 40), granted}, "x", at(30)},
		{"the holder counted once per node", []node.Vote{taken("y", 1), taken("x", 1), taken("x", 1), granted, granted}, "", time.Time{}},
		{"the larger holder found second", []node.Vote{taken("y", 5), taken("x", 10), taken("x", 20), taken("x", 30), {}}, "x", at(10)},
		{"split", []node.Vote{taken("x", 5), taken("x", 5), taken("y", 5), taken("y", 5), granted}, "", time.Time{}},
		{"a key without TTL may stay", []node.Vote{taken("x", -1), taken("x", 10), taken("x", 20)}, "x", at(20)},
		{"keys without TTL never expire", []node.Vote{taken("x", -1), taken("x", 10), taken("x", -1)}, "x", time.Time{}},
		{"votes still out may be free", []node.Vote{taken("x", -1), taken("x", 10), taken("x", 20), {}, {}}, "x", at(10)},
		{"no answers", make([]node.Vote, 3), "", time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			holder, free := heldBy(tt.votes)
			if holder != tt.holder || !free.Equal(tt.free) {
				t.Fatalf("heldBy = %q, %v; want %q, %v", holder, free.Sub(now), tt.holder, tt.free.Sub(now))
			}
		})
	}
}
