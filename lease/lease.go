package lease

import (
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cenkalti/backoff/v4"
)

// Shared is what the leases of one engine (one Pool) have in common.
// Each lease's Config points to the pool's rather than carry a copy: a
// lease actor keeps its Config for as long as the lease is held.
type Shared struct {
	Nodes       []*actor.PID
	Addrs       []string // the nodes' addresses, in Nodes order, for errors
	DriftFactor float64
	EventBuffer int // capacity of a lease's event channel (≥ 2)
	Logger      *slog.Logger
	Owner       Owner // nil: nobody is told
	Clock       Clock // nil: the system's
}

// Config describes one lease.
type Config struct {
	*Shared     // set by Pool.Start: its pool's
	Resource    string
	Key         string
	Grants      string // Key's grants key, if known (node.Request.Grants)
	Value       string // the owner's random value
	TTL         time.Duration
	NodeTimeout time.Duration // bounds each round
	Attempts    int           // acquire rounds at most (≥ 1)
	// NewBackOff makes the schedule of waits between acquire rounds, at
	// the first wait (most acquires need none); nil: one round.
	NewBackOff func() backoff.BackOff
	// Deadline is the caller's, if any: a round that only quarantined
	// nodes kept from a quorum gives up at once when their quarantine
	// outlasts it, rather than wait for nothing.
	Deadline time.Time
	// MaxHold bounds extension: no round (automatic or Extend) starts
	// later than MaxHold after the winning acquire round started; the
	// lease then expires at its deadline. 0: no extension at all.
	MaxHold  time.Duration
	FenceKey string        // non-empty: issue fencing tokens (see doc.go)
	Reply    chan<- Result // buffered 1; receives exactly one Result

	// Line, if set, lets the actor wait for its resource instead of
	// polling: after a round that found one other owner holding a quorum,
	// it waits for that owner's release (a *Wake) or its keys' expiry.
	// Rounds it was woken for do not count against Attempts.
	Line Line
	// Since is when the caller began to wait (with a Line): nodes queue a
	// refused waiter by it (node.Acquire.Since, in Unix microseconds:
	// callers a few hundred µs apart are in order), and release
	// announcements name the next waiter. Rounds carry it from the first
	// refusal on, or from the first round with QueueAtOnce (the resource
	// is known to be contended). A grant (Wake.Granted) counts from it:
	// no node could grant the lease before. Zero: none.
	Since       time.Time
	QueueAtOnce bool
	// WaitFirst: begin by waiting, for a *Wake or at most
	// NodeTimeout/YieldDivisor,
	// before the first round (queued on the nodes at once with
	// QueueAtOnce) (the engine's next local waiter, when others
	// wait on the nodes too: all wake to the same announcement).
	WaitFirst bool
	// Queued: the previous lease's release put this one in the nodes'
	// queues of waiters already (Line.HandOff): it need not queue itself.
	Queued bool
	// WinningVotes: the Result of a lease held carries its winning round's
	// votes too (a copy: for tracing, off by default).
	WinningVotes bool
	AutoExtend   bool // extend at a third of the TTL until MaxHold
	// Resumed, if set, starts the lease held, on a check round's word
	// (see Resumed): it runs no acquire round, and MaxHold counts from
	// Resumed.Start.
	Resumed *Resumed
}

// Owner is told what a lease actor does that concerns more than its
// lease: the engine implements it. Its methods run on the actor and must
// not block.
type Owner interface {
	// Publish gets every event of the lease, as its channel does.
	Publish(Event)
	// Dropped: a non-terminal event did not fit in the lease's channel.
	Dropped()
	// ExtendLate: an automatic extension round started late after its
	// plan (the alarm fired late, or the actor was busy).
	ExtendLate(late time.Duration)
	// Ended: a held lease ended with err, its Err, held after the start
	// of its winning round.
	Ended(held time.Duration, err error)
	// Done is called once the actor is done with the lease: it ended or
	// failed, and every vote it was owed is in (or the linger bound
	// passed). State.Stopped is closed just before.
	Done(*State)
}
