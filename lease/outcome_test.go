package lease

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redlease/redlease/node"
)

// The texts of a failed round say what each node answered and, of the
// round, only what is true of a quorum: over every mask of answers on
// three nodes, "quorum" is claimed only when a quorum answered so, and
// each node's label is what it answered (issue 29, 3).
func TestRefusalTexts(t *testing.T) {
	back := time.Date(2026, 1, 1, 12, 0, 0, 0, time.Local)
	answers := []struct {
		label string
		vote  node.Vote
	}{
		{"granted", node.Vote{Outcome: node.Granted}},
		{"taken", node.Vote{Outcome: node.Taken, Until: back, Holder: "h", Meta: "web-1"}}, // when its key expires
		{"absent", node.Vote{Outcome: node.Absent}},                                        // an extension's: not the lease's key either
		{"down (node down)", node.Vote{Outcome: node.Failed, Err: node.ErrNodeDown}},
		{"quarantined until 12:00:00.000 (it may have lost", node.Vote{Outcome: node.Failed, Err: node.ErrQuarantined, Until: back}},
		{"quarantined until 12:00:00.000 (met without an epoch marker", node.Vote{Outcome: node.Failed, Err: fmt.Errorf("%w: %w", node.ErrQuarantined, node.ErrNoMarker), Until: back}},
		{"timeout (node timeout)", node.Vote{Outcome: node.Timeout, Err: errors.New("redlease: node timeout")}},
		{"not waited for (decided without it)", node.Vote{}},
	}
	addrs := []string{"a:1", "b:2", "c:3"}
	for m := range len(answers) * len(answers) * len(answers) {
		votes := make([]node.Vote, 3)
		var want []string
		taken := 0
		for i, k := 0, m; i < 3; i, k = i+1, k/len(answers) {
			a := answers[k%len(answers)]
			votes[i] = a.vote
			want = append(want, addrs[i]+": "+a.label)
			if a.vote.Outcome == node.Taken || a.vote.Outcome == node.Absent {
				taken++
			}
		}
		list := FormatOutcomes(Outcomes(votes, addrs, nil))
		for _, w := range want {
			if !strings.Contains(list, w) {
				t.Errorf("%v: %q lacks %q", votes, list, w)
			}
		}
		if strings.Contains(list, "without an epoch marker") != strings.Contains(list, "MarkNew") {
			t.Errorf("%q: a node met without an epoch marker without the hint of MarkNew, or the hint for another", list)
		}
		for _, extend := range []bool{false, true} {
			err := refused(votes, extend)
			text := err.Error()
			if quorum := strings.Contains(text, "on a quorum"); quorum != (taken >= 2) {
				t.Errorf("%v (extend %t): %q claims a quorum: %t, want %t", votes, extend, text, quorum, taken >= 2)
			}
			if !errors.Is(err, errRefused) {
				t.Errorf("%q does not match errRefused", text)
			}
			if taken < 2 && !strings.Contains(text, fmt.Sprintf("%d granted", countOf(votes, node.Granted))) {
				t.Errorf("%v: %q does not count the grants", votes, text)
			}
		}
	}
	if Outcomes(nil, addrs, nil) != nil {
		t.Error("no round names nodes")
	}
	// A cluster's answer names its shard and the resource's slot.
	out := Outcomes([]node.Vote{{Outcome: node.Taken, Shard: "m:1", Slot: 7}}, []string{"cluster://a:1"}, nil)
	if o := out[0]; o.Shard != "m:1" || o.Slot != 7 || FormatOutcomes(out) != "cluster://a:1 (shard m:1, slot 7): taken" {
		t.Errorf("cluster outcome %+v: %q; want shard m:1, slot 7 named", o, FormatOutcomes(out))
	}
	// A node that had not answered when its round ended at the node
	// timeout timed out; not so one the others decided the round without.
	votes := []node.Vote{{Outcome: node.Granted}, {}, {}}
	if got, want := FormatOutcomes(Outcomes(votes, addrs, errRoundTimeout)), "b:2: timeout (no answer within the node timeout)"; !strings.Contains(got, want) {
		t.Errorf("a round that timed out: %q, want %q", got, want)
	}
}

func countOf(votes []node.Vote, o node.Outcome) int {
	n := 0
	for _, v := range votes {
		if v.Outcome == o {
			n++
		}
	}
	return n
}
