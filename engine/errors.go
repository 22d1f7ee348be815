package engine

import (
	"errors"
	"fmt"

	"github.com/redlease/redlease/internal/errtext"
	"github.com/redlease/redlease/lease"
	"github.com/redlease/redlease/node"
)

// Errors of the engine and its leases. Compare with errors.Is.
var (
	// ErrNotAcquired: Acquire or TryAcquire did not get the lease. The
	// error is an *AcquireError with each node's outcome.
	ErrNotAcquired = errors.New("redlease: not acquired")
	// ErrReleased: the lease was released.
	ErrReleased = lease.ErrReleased
	// ErrExpired: the lease reached its validity deadline.
	ErrExpired = lease.ErrExpired
	// ErrLeaseLost: the lease ended before its deadline without a release
	// by its holder.
	ErrLeaseLost = lease.ErrLeaseLost
	// ErrDetached: the lease was let go without a release (Lease.Detach),
	// for another engine to take up (Resume).
	ErrDetached = lease.ErrDetached
	// ErrMaxHold: Lease.Extend was called after the lease's maximum hold
	// (Config.MaxHold, or WithAutoExtend's maxHold) had passed. The lease
	// was not extended; it is still held until Until and then expires
	// (ErrExpired). It matches none of the errors a lease ends with.
	ErrMaxHold = lease.ErrMaxHold
	// ErrBeyondMaxHold: Lease.Extend with ExtendTTL asked for a TTL that
	// would hold the lease beyond its maximum hold plus the TTL it was
	// acquired with. The lease was not extended, and is still held; a
	// shorter TTL may fit (the error says what does).
	ErrBeyondMaxHold = lease.ErrBeyondMaxHold
	// ErrQuarantined: a node's answer (NodeOutcome.Err) while it sits out
	// a quarantine after it may have lost lock keys (a restart without its
	// data, a flush, evicted keys); NodeOutcome.QuarantinedUntil says until
	// when.
	ErrQuarantined = node.ErrQuarantined
	// ErrNoMarker: the ErrQuarantined of a node that this engine first met
	// without any epoch marker wraps it too: a new node (MarkNew, or
	// redlease mark-new, ends its quarantine when it is empty), or one
	// that lost all its data. A node met with another dataset's marker
	// (restarted, failed over) does not: it held leases before.
	ErrNoMarker = node.ErrNoMarker
	// ErrEvicting: a node's answer (NodeOutcome.Err) to an acquire while
	// it may evict lock keys (see Config.UnsafeEviction); New fails with
	// it for such a node.
	ErrEvicting = node.ErrEvicting
	// ErrClusterMaster: an entry of Config.Nodes given as host:port
	// reaches a master of a Redis Cluster (a server in cluster mode). It
	// serves part of the slots only, and votes as a shard of its cluster:
	// name the cluster as cluster://host:port[,host:port...]. New fails
	// with it; InspectNodes reports it as the node's Err, and MarkNew
	// does not mark the node.
	ErrClusterMaster = errors.New("redlease: a master of a Redis Cluster, which votes as a shard of its cluster, never as a node of its own")
	// ErrClosed: the engine is closed. Leases it held end with an error
	// matching both ErrReleased and ErrClosed.
	ErrClosed = errors.New("redlease: engine closed")

	// errHeldHere: TryAcquire on a resource that this engine holds, or
	// that a caller of Acquire waits for, fails without a round.
	errHeldHere = errors.New("redlease: this engine holds the resource, or a caller of it waits for it")
	// errCrashed: the resource actor panicked on a caller's join (a bug,
	// which the engine's logger reports with the panic's value).
	errCrashed = errors.New("redlease: resource actor panicked (the logger says why)")
	// ErrLiveLocks: MarkNew marked nothing, as a node holds a lock key, so
	// leases may be live, and a node without their keys may have lost
	// them.
	ErrLiveLocks = errors.New("redlease: a node holds lock keys: leases may be live")
)

// Outcome is one node's answer in a round.
type Outcome = node.Outcome

// The outcomes of a node in a round.
const (
	Granted = node.Granted // did what was asked
	Taken   = node.Taken   // another owner holds the key
	Timeout = node.Timeout // no answer within Config.NodeTimeout
	Failed  = node.Failed  // an error or no connection
	Absent  = node.Absent  // extension, release, check: no owner holds the key (lost, released, or expired)
)

// NodeOutcome is what one node answered in a round. Its fields:
//
//	Addr             string        // the node, as in Config.Nodes
//	Outcome          Outcome       // what it answered: Granted, Taken, Timeout, Failed, Absent
//	RTT              time.Duration // its round trip; zero when it did not answer
//	Err              error         // why, for Timeout and Failed (ErrQuarantined, ErrEvicting, a node down, a server's error)
//	QuarantinedUntil time.Time     // for a node that refused with ErrQuarantined: when its quarantine ends
//	TTL              time.Duration // the remaining TTL of its lock key, for a check, or an acquire it refused as Taken
//	HeldBy           string        // for Taken: the meta (WithMeta) of the owner whose key it holds
//	Shard            string        // on a Redis Cluster node: the master of the shard that answered ("" elsewhere)
//	Slot             int           // with Shard: the resource's slot
type NodeOutcome = lease.NodeOutcome

// AcquireError is the error of a failed Acquire, TryAcquire or Resume. It
// matches ErrNotAcquired, and its Cause (a context's error, ErrClosed,
// ErrLeaseLost for a Resume) through errors.Is.
type AcquireError struct {
	Resource string
	Attempts int           // rounds tried
	Nodes    []NodeOutcome // of the last round, in Config.Nodes order; none without a round
	Cause    error         // what ended the attempts
	// HeldBy is the meta (WithMeta) of the owner that held the resource on
	// a quorum of the nodes in the last round, which the error's text
	// names ("held by"); "" when none did, or it has no meta.
	HeldBy string

	resumed bool // of a Resume
}

func (e *AcquireError) Error() string {
	var text string
	if e.resumed {
		text = fmt.Sprintf("%s%q not resumed: %s", errtext.Prefix, e.Resource, errtext.Bare(e.Cause))
	} else {
		text = fmt.Sprintf("%s%q not acquired after %d attempt(s): %s", errtext.Prefix, e.Resource, e.Attempts, errtext.Bare(e.Cause))
	}
	if e.HeldBy != "" {
		text += fmt.Sprintf("; held by %q", e.HeldBy)
	}
	if len(e.Nodes) == 0 { // no round
		return text
	}
	return text + " [" + lease.FormatOutcomes(e.Nodes) + "]"
}

// Is reports whether target is ErrNotAcquired.
func (e *AcquireError) Is(target error) bool { return target == ErrNotAcquired }

// Unwrap returns the Cause.
func (e *AcquireError) Unwrap() error { return e.Cause }

// ExtendError is the error of a failed extension round (Lease.Extend, and
// the Err of ExtendFailed and Lost events). A lost lease's error matches
// ErrLeaseLost and wraps an ExtendError. Its fields:
//
//	Nodes []NodeOutcome // each node's outcome, in Config.Nodes order
//	Cause error         // why the round failed (Unwrap returns it)
type ExtendError = lease.ExtendError

// ReleaseError is returned by Release when it cannot say that no quorum
// of nodes holds the lease's key any more; the lease has ended all the
// same. Lost: the key was not the lease's on so many nodes (another
// owner's, "taken", or gone, "absent") that no quorum could delete it, so the lease
// had been lost before its release; the error then matches ErrLeaseLost.
// Otherwise the nodes that did not answer are a quorum, and their keys
// may keep the resource held until the background release reaches them
// or they expire. Nodes is each node's answer.
type ReleaseError struct {
	Resource string
	Nodes    []NodeOutcome
	Lost     bool
}

func (e *ReleaseError) Error() string {
	if e.Lost {
		return fmt.Sprintf("%srelease of %q: %s: the lease's key was not on a quorum of nodes [%s]",
			errtext.Prefix, e.Resource, errtext.Bare(ErrLeaseLost), lease.FormatOutcomes(e.Nodes))
	}
	return fmt.Sprintf("%srelease of %q unconfirmed: the nodes that did not answer may hold its key on a quorum, "+
		"and keep the resource held until the release, retried, reaches them or the key expires [%s]",
		errtext.Prefix, e.Resource, lease.FormatOutcomes(e.Nodes))
}

// Is reports whether target is ErrLeaseLost, for a lease found lost.
func (e *ReleaseError) Is(target error) bool { return e.Lost && target == ErrLeaseLost }

// nodeOutcomes names the votes of a round that failed with cause (nil:
// it did not); a node that did not answer is a Timeout (lease.Outcomes).
func (e *Engine) nodeOutcomes(votes []node.Vote, cause error) []NodeOutcome {
	return lease.Outcomes(votes, e.cfg.Nodes, cause)
}
