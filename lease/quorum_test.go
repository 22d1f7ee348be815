package lease

import (
	"fmt"
	"testing"

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
