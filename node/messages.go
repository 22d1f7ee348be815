package node

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/redlease/redlease/actors"
)

// Request is what every command to a node carries: whose key, for which
// round of the sender, and where the Vote goes.
type Request struct {
	Key string
	// Grants, if set, is Key's grants key, whose start is its queue key
	// (LockKeys makes all three in one string); unset, the node makes
	// them, for the commands that touch the queue.
	Grants  string
	Value   string     // the lease owner's random value
	Round   uint64     // echoed in the Vote so the sender can drop stale ones
	ReplyTo *actor.PID // receives exactly one *Vote; nil: nobody waits for it
	// Inbox, if set, is ReplyTo's mailbox: the votes of a batch go to
	// it together (actors.Batch), waking fewer dispatcher workers.
	Inbox *actors.Mailbox
	// Sent is when the sender sent it (zero: when it reaches the node
	// actor). The command's timeout and its vote's RTT count from it: one
	// clock reading for a round's commands to every node, not one each.
	Sent time.Time
}

func (r *Request) request() *Request { return r }

// Command is sealed: *Acquire, *Fence, *Queue, *Extend, *Heal, the
// releases *Release, *HandOff, *Cleanup and *Leave, and *Check. A node
// actor only reads a command, so one message may go to every node of a
// round.
type Command interface{ request() *Request }

// Acquire asks the node to set Key to Value with TTL unless another owner
// holds it. Granted if the key was free or already Value's. With a
// FenceKey, a grant also reports the node's fence counter (Vote.Counter).
type Acquire struct {
	Request
	TTL      time.Duration
	FenceKey string
	// Since, if set, is when the caller began to wait, in Unix
	// microseconds: a refusal puts the caller in the resource's queue of
	// waiters by it (and a grant takes it out), the same on every node,
	// so that release announcements name the same next waiter everywhere.
	Since string
	// Contended: the caller expects a refusal (it waited, or its resource
	// was contended lately), so the acquire goes through the script at
	// once rather than as a plain SET first (see plain.go), whose refusal
	// costs a round trip more.
	Contended bool
}

// Fence writes a lease's fencing token back to the node's fence counter,
// raising it to Token, only while Value holds Key: Granted if written.
// Each fenced grant and each write-back gives the counter FenceIdle more to
// live: an idle counter expires (see the lease package's doc, Fencing
// tokens, for why tokens still grow once it is gone).
type Fence struct {
	Request
	FenceKey string
	Token    uint64
}

// FenceIdle is how long a fence counter outlives the last fenced grant or
// write-back of its resource (batch.lua's fenceIdle, in milliseconds).
const FenceIdle = time.Hour

// Queue puts Value in Key's queue of waiters, by Since, as a refused
// Acquire with Since does, without asking for the key: Granted. TTL is
// the lease's, which the queue outlives twice.
type Queue struct {
	Request
	Since string
	TTL   time.Duration
}

// Extend asks the node to reset Key's TTL if Value still holds it:
// Granted; Taken when another owner holds it, Absent when nobody does.
type Extend struct {
	Request
	TTL time.Duration
}

// Heal sets Key to Value with TTL where no key is, as an Acquire would
// (Granted; Taken where a key is), and like an Acquire it is refused
// where the node sits out a quarantine, may evict lock keys, or lost the
// epoch marker. A lease sends it, with the time its keys have left, to
// the nodes that answered Absent to an extension round it won (see the
// lease package's doc, Healing).
type Heal struct {
	Request
	TTL time.Duration
}

// The release commands. Each deletes Key where Value holds it (but
// Cleanup where it keeps a grant, and Leave with KeepGrant), and each that
// the node did not answer (its Vote says Timeout or Failed) is sent again,
// in order, as soon as the node answers again, until TTL (the longest
// the key may live from now) has passed since it reached the actor (the
// key cannot outlive that) or the actor stops, which drops it. A
// release sent again is silent: it queues no successor, who may be done
// waiting by then.
//
// Announced, a deletion is published on Key+ReleasedSuffix while the
// key has a queue of waiters (it was contended lately), so that waiters
// for the key wake at once: see Announcement.

// Release is a lease's final release: announced, and, with Queued, it
// takes the owner out of the queues of waiters too (where the key is
// free, it names the next waiter in its stead: it may have been named
// next).
type Release struct {
	Request
	TTL time.Duration
	// Queued: the owner acquired with Since, so it may be in the queue of
	// waiters.
	Queued bool
}

// HandOff is a Release that also queues the caller next in the owner's
// engine's line for Key, or a place kept for the engine's next caller:
// the release puts Successor in the queue of waiters, as its refused
// Acquire would, before naming the next waiter, so that it is named in
// its turn without a command of its own. Only while the key has a queue.
// Without a Successor it is a Release.
type HandOff struct {
	Request
	TTL    time.Duration
	Queued bool // as Release's
	// Successor is the successor's owner value, waiting since
	// SuccessorSince (Unix microseconds).
	Successor, SuccessorSince string
	// SuccessorTTL is the successor's lease TTL (0: TTL): a release that
	// grants it the key sets that TTL (which its validity counts on), and
	// its place in the queue outlives it twice.
	SuccessorTTL time.Duration
	// Ungranted: the Successor is a place kept for a caller not come
	// yet, which a release may name but never grant the key: its process
	// may die before the caller comes, and nobody would release it then
	// (a free resource blocked for a TTL).
	Ungranted bool
}

// Cleanup is a failed acquire round's release. It keeps the owner's place
// in the queue of waiters: with Since, it puts Value back there (at
// Since, with TTL), where a grant or a naming took it out, since the
// lease goes on acquiring.
type Cleanup struct {
	Request
	TTL      time.Duration
	Since    string // Acquire's Since; "": the owner does not queue
	Announce bool   // announce the deletions (see Release)
	// Keep has bit i (i < 63; bit 63 for the rest) set for the nodes,
	// by Config.Index, where the key is not deleted when Value holds it:
	// a node that refused the round, where a key of Value can only be a
	// release's grant (see batch.lua, Grants).
	Keep uint64
}

// Leave takes Value out of Key's queue of waiters, releasing the key if
// Value holds it, announced: where the key is free, it names the next
// waiter in Value's stead, since a release may have named Value next.
type Leave struct {
	Request
	TTL time.Duration
	// KeepGrant: a key Value holds stays (a grant), and nothing is
	// announced: a lease that won elsewhere only leaves the queue.
	KeepGrant bool
}

// Check reads whether Value holds Key, and for how long, and changes
// nothing: Granted when it does, with the key's remaining TTL (Vote.TTL);
// Taken when it does not, with the holder's Digest, MetaOf and TTL when
// another owner's key is there. Like an Acquire, it is answered Failed
// with ErrQuarantined while the node may have lost lock keys, and with
// ErrEvicting while it may evict them: what it answers decides whether a
// lease is held (engine.Resume).
type Check struct{ Request }

// Digest names an owner value as a refused Acquire's Vote.Holder and a
// release announcement do: its SHA1, in hex.
func Digest(value string) string {
	sum := sha1.Sum([]byte(value))
	return hex.EncodeToString(sum[:])
}

// Outcome is a node's answer to one command.
type Outcome uint8

const (
	// Granted: the node did what was asked (set, extended or deleted).
	Granted Outcome = iota + 1
	// Taken: another owner holds the key.
	Taken
	// Timeout: no answer within the node timeout.
	Timeout
	// Failed: the node answered with an error or could not be reached.
	Failed
	// Absent: no owner holds the key (it was lost, released, or
	// expired), for an extend, a release or a check: not this owner's,
	// as Taken, but for an extend free to heal.
	Absent
)

func (o Outcome) String() string {
	switch o {
	case Granted:
		return "granted"
	case Taken:
		return "taken"
	case Timeout:
		return "timeout"
	case Failed:
		return "failed"
	case Absent:
		return "absent"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Vote is a node's answer to one command.
type Vote struct {
	actors.Late               // may arrive after the lease actor ended
	Node        int           // index of the node in the engine's list
	Round       uint64        // the command's Round
	Outcome     Outcome       // what the node did
	RTT         time.Duration // from the command's Request.Sent (or its reaching the node actor) to the answer
	Err         error         // set for Timeout and Failed
	Counter     uint64        // a fenced acquire's grant: the node's fence counter
	// Until: for an acquire refused with ErrQuarantined, when the node's
	// quarantine ends (for a restart the acquire itself found, an estimate
	// until a probe tells when the node restarted); for an acquire refused
	// as Taken, when the holder's key expires on the node unless extended
	// (zero: it has no TTL).
	Until time.Time
	// Holder: for an acquire refused as Taken, the holder's value as
	// Digest gives it, so that a round can tell one owner holding a quorum
	// from a split vote; for a Check answered Taken, the same, when
	// another owner's key is there.
	Holder string
	// Meta: with Holder, the holder's meta (MetaOf its value; "" for none).
	Meta string
	// TTL: for a Check, and with Holder, the key's remaining TTL as the
	// node answered (its PTTL; 0 for a key without one).
	TTL time.Duration
	// Shard, on a Redis Cluster node, is the master of the shard that
	// answered, and Slot the key's slot there; "" for other nodes.
	Shard string
	Slot  uint16
}

// votes recycles Votes: ten go out per acquire and release on five
// nodes, each read once by the lease actor it answers.
var votes = sync.Pool{New: func() any { return new(Vote) }}

// Free returns v for reuse by a later answer. Call it once done with v,
// only as the one receiver of v, and never read v after.
func (v *Vote) Free() {
	*v = Vote{}
	votes.Put(v)
}

// ErrStopped answers commands still queued when the node actor stops.
var ErrStopped = errors.New("redlease: node actor stopped")
