package lease

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redlease/redlease/internal/errtext"
	"github.com/redlease/redlease/node"
)

// NodeOutcome is what one node answered in a round. The engine re-exports
// it, with ExtendError.
type NodeOutcome struct {
	Addr    string
	Outcome node.Outcome
	RTT     time.Duration // zero when the node did not answer
	Err     error         // for Timeout and Failed
	// QuarantinedUntil: when a node that refused with ErrQuarantined ends
	// its restart quarantine; zero otherwise.
	QuarantinedUntil time.Time
}

// Outcomes names a round's votes, by node (addrs in node order); a node
// that did not answer in time is a Timeout.
func Outcomes(votes []node.Vote, addrs []string) []NodeOutcome {
	out := make([]NodeOutcome, len(addrs))
	for i, addr := range addrs {
		out[i] = NodeOutcome{Addr: addr, Outcome: node.Timeout, Err: errNoAnswer}
		if i < len(votes) && votes[i].Outcome != 0 {
			v := votes[i]
			out[i] = NodeOutcome{Addr: addr, Outcome: v.Outcome, RTT: v.RTT, Err: v.Err, QuarantinedUntil: v.Until}
		}
	}
	return out
}

var errNoAnswer = errors.New("no answer before the round ended")

// ExtendError is the error of a failed extension round (Extend, and the
// Err of ExtendFailed and Lost events), with each node's outcome. A lost
// lease's error matches ErrLeaseLost and wraps an ExtendError.
type ExtendError struct {
	Nodes []NodeOutcome // in node order
	Cause error
}

func (e *ExtendError) Error() string {
	return fmt.Sprintf("%sextension failed: %s [%s]", errtext.Prefix, errtext.Bare(e.Cause), FormatOutcomes(e.Nodes))
}

// Unwrap returns the Cause.
func (e *ExtendError) Unwrap() error { return e.Cause }

// FormatOutcomes lists the nodes' outcomes for an error text.
func FormatOutcomes(nodes []NodeOutcome) string {
	var b strings.Builder
	for i, n := range nodes {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %v", n.Addr, n.Outcome)
		if n.Err != nil {
			fmt.Fprintf(&b, " (%s", errtext.Bare(n.Err))
			if !n.QuarantinedUntil.IsZero() {
				fmt.Fprintf(&b, " until %s", n.QuarantinedUntil.Format(untilLayout))
			}
			b.WriteString(")")
		}
	}
	return b.String()
}

// untilLayout shows a quarantine's end in error texts: local wall-clock
// time to the millisecond (quarantines last about a TTL, so no date).
const untilLayout = "15:04:05.000"
