package engine

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/testwait"
)

// TestReleaseFailsOnlyWhileAQuorumMayHoldIt: Release returns nil once so
// many nodes answered that they no longer hold the lease's key (deleted
// it, or had none) that no quorum of nodes can, whatever the others,
// stopped (SIGSTOP), did not answer; and an error, not matching
// ErrLeaseLost, while a quorum of them may still hold it.
func TestReleaseFailsOnlyWhileAQuorumMayHoldIt(t *testing.T) {
	for _, tc := range []struct {
		name          string
		nodes         int
		stopped, gone []int
		fails         bool
	}{
		{"one of three stopped", 3, []int{2}, nil, false},
		{"one of three stopped, one had no key", 3, []int{2}, []int{1}, false},
		{"two of four stopped", 4, []int{2, 3}, nil, false},
		{"two of three stopped", 3, []int{1, 2}, nil, true},
		{"two of five stopped, one had no key", 5, []int{3, 4}, []int{2}, false},
		{"three of five stopped, one had no key", 5, []int{2, 3, 4}, []int{1}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startNodes(t, tc.nodes)
			e := newEngine(t, c.Addrs())
			l, err := e.TryAcquire(t.Context(), "r")
			if err != nil {
				t.Fatal(err)
			}
			// The acquire answered at a quorum: wait for its command to the
			// rest, which would set the key again after the DEL below.
			testwait.Eventually(t, 2*time.Second, "every node holds the key", func() bool {
				return count(values(t, c, "r"), l.Value()) == tc.nodes
			})
			for _, i := range tc.gone {
				if _, err := c.Nodes[i].Do(t.Context(), "DEL", lockKey("r")); err != nil {
					t.Fatal(err)
				}
			}
			for _, i := range tc.stopped {
				if err := c.Nodes[i].Pause(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Nodes[i].Resume() })
			}
			err = l.Release(t.Context())
			if !tc.fails {
				if err != nil {
					t.Fatalf("Release = %v, want nil: no quorum can hold the key", err)
				}
				return
			}
			var re *ReleaseError
			if !errors.As(err, &re) || errors.Is(err, ErrLeaseLost) {
				t.Fatalf("Release = %v, want a *ReleaseError, not matching ErrLeaseLost", err)
			}
			for i, n := range re.Nodes {
				if slices.Contains(tc.stopped, i) == (n.Outcome == Granted || n.Outcome == Absent) {
					t.Errorf("node %d: %v (stopped: %t)", i, n, slices.Contains(tc.stopped, i))
				}
			}
		})
	}
}
