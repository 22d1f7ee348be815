// Package engine is redlease's public API: leases over N independent Redis
// masters, decided by the Redlock algorithm.
//
//	e, err := engine.New(engine.Config{Nodes: []string{"a:6379", "b:6379", "c:6379"}})
//	lease, err := e.Acquire(ctx, "invoice:42")
//	defer lease.Release(ctx)
//
// An Engine runs one node actor per Redis address (batching the commands
// of all leases to that node into pipelined round trips), one resource
// actor per resource in use (its line of callers, what the nodes announce
// of it: engine/resource.go) and one lease actor per lease (votes,
// validity, retry, extension, events: package lease). Acquire asks every
// node at once and holds the lease when N/2+1 granted with validity beyond
// an end margin, TTL − elapsed − (TTL·DriftFactor + 2ms); a failed
// round is cleaned up on every node. A round refused by another owner
// waits for that owner's release (announced by every node, which names the
// next waiter) or its keys' expiry, behind the engine's earlier callers
// for the resource (see Engine.Acquire); other failed rounds are retried
// after a randomized backoff.
//
// A Lease tells its holder when it ends, and why, no later than its
// validity deadline: Done closes and Err says ErrReleased, ErrExpired or
// ErrLeaseLost; Context is cancelled with that cause; Events carries
// Acquired, Extended, ExtendFailed and one terminal event. Done and Err are
// the source of truth: events can be dropped for a slow reader, the end of
// a lease never is.
//
// WithAutoExtend keeps a lease alive up to a maximum hold, and an
// extension that a quorum confirmed sets the lease's key again on the
// healthy nodes that had lost it (see Lease.Extend); WithFencing
// gives it a token that strictly increases across successive holders (the
// argument is in package lease). Nodes that restarted without their data,
// failed over to a replica or evicted keys sit out until every lease they
// may have held has expired, nodes that may evict lock keys (a memory limit with a
// maxmemory-policy other than noeviction) refuse acquires, nodes that
// stop answering are not waited on, and nothing is logged unless
// Config.Logger is set.
//
// WithMeta stores who holds a lease (a host, a leader's address) in its
// owner value, which refusals name (AcquireError.HeldBy); Lease.Check
// reads on every node, without extending, whether a quorum still holds a
// lease and for how long; Detach lets a lease go without a release, and
// Resume takes it up, by its Handle, in another process (lock in one
// request, release in another).
//
// Metrics and spans go to OpenTelemetry (Config.MeterProvider and
// TracerProvider, the global providers by default; telemetry.go lists the
// instruments). For operators, InspectNodes tells how an engine would
// judge each node now, InspectLocks lists the lock keys, and MarkNew
// marks new nodes; the redlease command (cmd/redlease) runs them.
//
// All methods of Engine and Lease are safe for concurrent use.
//
// # Resource actors
//
// Each resource in use has a resource actor in the engine: it keeps the
// line of the engine's callers for the resource (first come, first served;
// only the first runs rounds), the watch on its release announcements, and
// the place a release kept for the next caller, and answers a TryAcquire
// on a resource held here without a round. Its states:
//
//	(none) -- a caller joins (Acquire, TryAcquire, Resume) --> active
//	active -- the last caller leaves, the line unwatched --> gone
//	active -- the last caller leaves, the line watched --> lingering
//	lingering -- a caller joins --> active
//	lingering -- a second passes (lineLinger) --> gone: its watch dropped, its kept place left
//
// A lease's own states are drawn in package lease.
//
// # Locks
//
// Two kinds of mutex remain beside the actors, each taken before the
// locks of package lease and of the mailboxes, never the other way:
// Engine.mu (the live leases, Close) and the lock of each shard of the map
// from resource to resource actor (lines.shards); no code holds two of
// them.
package engine
