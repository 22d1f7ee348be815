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
	// TTL: the remaining TTL of the node's lock key, as the node answered
	// a check (whoever holds it), or an acquire it refused as Taken; zero
	// otherwise.
	TTL time.Duration
	// HeldBy: the meta (engine.WithMeta) of the owner whose key the node
	// holds, when it answered Taken because of it; "" otherwise, or for an
	// owner without one.
	HeldBy string
	// Shard, for a Redis Cluster node, is the master of the shard that
	// answered, and Slot the resource's slot there; "" (and 0) for other
	// nodes, and when no shard answered.
	Shard string
	Slot  int
}

// Outcomes names a round's votes, by node (addrs in node order), given
// the cause the round failed with (nil: it did not). A node whose answer
// had not come when the round ended is a Timeout: with errNoAnswer when
// the round ended at the node timeout, otherwise with ErrNotAnswered (the
// round was decided without it). Nil votes (no round) name no node.
func Outcomes(votes []node.Vote, addrs []string, cause error) []NodeOutcome {
	if votes == nil {
		return nil
	}
	unanswered := ErrNotAnswered
	if errors.Is(cause, errRoundTimeout) {
		unanswered = errNoAnswer
	}
	out := make([]NodeOutcome, len(addrs))
	for i, addr := range addrs {
		out[i] = NodeOutcome{Addr: addr, Outcome: node.Timeout, Err: unanswered}
		if i < len(votes) && votes[i].Outcome != 0 {
			v := votes[i]
			out[i] = NodeOutcome{Addr: addr, Outcome: v.Outcome, RTT: v.RTT, Err: v.Err, TTL: v.TTL, HeldBy: v.Meta}
			if v.Shard != "" {
				out[i].Shard, out[i].Slot = v.Shard, int(v.Slot)
			}
			if errors.Is(v.Err, node.ErrQuarantined) { // a Taken vote's Until is when the holder's key expires
				out[i].QuarantinedUntil = v.Until
			}
		}
	}
	return out
}

// HeldBy is the meta (engine.WithMeta) of the one owner whose key a
// quorum of votes answered Taken, or "": none holds a quorum, or it has
// no meta.
func HeldBy(votes []node.Vote) string {
	holder, _ := heldBy(votes)
	for _, v := range votes {
		if holder != "" && v.Holder == holder {
			return v.Meta
		}
	}
	return ""
}

// ErrNotAnswered is the Err of a node whose answer had not come when its
// round ended before the node timeout: the others decided it, or its
// caller gave up. The node may be well.
var ErrNotAnswered = errors.New("not waited for: the round was decided without its answer")

// errNoAnswer is the Err of a node whose answer had not come when its
// round ended at the node timeout.
var errNoAnswer = errors.New("no answer within the node timeout")

// refusal says why a round failed that no single cause ended: what its
// nodes answered, counted, and only what is true of a quorum. It matches
// errRefused.
type refusal struct {
	n, taken, failed, quarantined, unanswered int
	extend                                    bool // an extension round: taken counts "not the lease's key" (Taken, Absent)
}

// refused counts votes, a failed round's.
func refused(votes []node.Vote, extend bool) error {
	r := refusal{n: len(votes), extend: extend}
	for _, v := range votes {
		switch {
		case v.Outcome == node.Taken, v.Outcome == node.Absent:
			r.taken++
		case v.Outcome == node.Failed && !v.Until.IsZero():
			r.quarantined++
		case v.Outcome == node.Failed, v.Outcome == node.Timeout:
			r.failed++
		case v.Outcome == 0:
			r.unanswered++
		}
	}
	return r
}

func (r refusal) Error() string {
	q := Quorum(r.n)
	switch {
	case r.taken >= q && r.extend:
		return errtext.Prefix + "the lease's key is not on a quorum of nodes (another owner's, or gone)"
	case r.taken >= q:
		return errtext.Prefix + "another owner holds the resource on a quorum of nodes"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%sno quorum (%d of %d nodes): %d granted", errtext.Prefix, q, r.n, r.n-r.taken-r.failed-r.quarantined-r.unanswered)
	taken := "held by another owner"
	if r.extend {
		taken = "without the lease's key"
	}
	for _, c := range []struct {
		k    int
		what string
	}{{r.taken, taken}, {r.quarantined, "quarantined"}, {r.failed, "failed"}, {r.unanswered, "not answered"}} {
		if c.k > 0 {
			fmt.Fprintf(&b, ", %d %s", c.k, c.what)
		}
	}
	return b.String()
}

// Is reports whether target is errRefused.
func (r refusal) Is(target error) bool { return target == errRefused }

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

// FormatOutcomes lists the nodes' outcomes for an error text, each as
// what the node answered: granted, taken, quarantined until a time (with
// how to end it for a node met without an epoch marker), down, not
// waited for (the round was decided without its answer), timeout or
// failed (with why).
func FormatOutcomes(nodes []NodeOutcome) string {
	var b strings.Builder
	for i, n := range nodes {
		if i > 0 {
			b.WriteString(", ")
		}
		if n.Shard != "" {
			fmt.Fprintf(&b, "%s (shard %s, slot %d): ", n.Addr, n.Shard, n.Slot)
		} else {
			fmt.Fprintf(&b, "%s: ", n.Addr)
		}
		switch {
		case !n.QuarantinedUntil.IsZero() && errors.Is(n.Err, node.ErrNoMarker):
			fmt.Fprintf(&b, "quarantined until %s (met without an epoch marker: if it is new and empty, engine.MarkNew or redlease mark-new ends that)",
				n.QuarantinedUntil.Format(untilLayout))
		case !n.QuarantinedUntil.IsZero():
			fmt.Fprintf(&b, "quarantined until %s (it may have lost lock keys)", n.QuarantinedUntil.Format(untilLayout))
		case errors.Is(n.Err, node.ErrNodeDown):
			fmt.Fprintf(&b, "down (%s)", errtext.Bare(n.Err))
		case errors.Is(n.Err, ErrNotAnswered):
			b.WriteString("not waited for (decided without it)")
		case n.Err != nil:
			fmt.Fprintf(&b, "%v (%s)", n.Outcome, errtext.Bare(n.Err))
		default:
			fmt.Fprint(&b, n.Outcome)
		}
	}
	return b.String()
}

// untilLayout shows a quarantine's end in error texts: local wall-clock
// time to the millisecond (quarantines last about a TTL, so no date).
const untilLayout = "15:04:05.000"
