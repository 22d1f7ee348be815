// Package safety checks redlease's guarantees on real Redis nodes while it
// breaks them. Several engines with many goroutines each contend for a few
// resources; every holder records its holding (resource, owner value,
// acquired-at, Until, token) on this process's monotonic clock, and the
// holders of the even resources write to a fenced in-memory store (those
// of the odd ones are not fenced: a release grants the key to the next
// waiter only when its lease is not). Meanwhile Run injects faults, one at a
// time, each kind once per round in random order (see Kinds):
//
//   - kill+restart: a node killed with -9 and restarted without its data;
//   - pause: a node stopped (SIGSTOP) and resumed;
//   - slow link: a node's link slowed through a TCP proxy;
//   - majority pause: three nodes paused for longer than a TTL;
//   - restart under a bare majority: two nodes dead, a third restarted
//     empty, the two back empty (the Redlock critique's case);
//   - script flush: SCRIPT FLUSH while leases come and go;
//   - debug sleep: a node stalled (CLIENT PAUSE ALL, 50-300ms, from a
//     connection of its own; named for DEBUG SLEEP, which it used until
//     engines counted DEBUG as a possible reload) with batches in flight;
//   - snapshot restart: a node snapshotted, then restarted from that
//     snapshot after some leases came and went: it keeps the epoch key
//     but loses the writes after the snapshot;
//   - idle engine: an engine that stayed idle longer than the restart
//     quarantine (the first ones met the nodes fresh, so their restore of
//     the epoch key is still pending) acquires right after a node
//     restarted empty;
//   - new engine: an engine created mid-run joins the contention;
//   - client kill: CLIENT KILL TYPE normal cuts every engine's connection
//     to a node, batches in flight included;
//   - clock jump: a node's wall clock steps ahead by more than a TTL while
//     it serves leases (the first time, the node restarts with its clock
//     ahead too), so the keys on it expire early;
//   - failover: a spare process that has run for a while replicates a
//     node, is cut off (promoted) while leases come and go on the node,
//     and takes its place behind its address when the node dies, lacking
//     its latest lock keys, as a managed Redis's replica does;
//   - eviction: a node given a memory limit with maxmemory-policy
//     volatile-ttl and filled by another tenant's cache entries until it
//     evicted keys (lock keys first, their TTLs being the shortest), then
//     set back to noeviction;
//   - flush: a node emptied in place (FLUSHALL, FLUSHDB, FLUSHALL ASYNC or
//     SWAPDB 0 1), half the time right before a new engine joins;
//   - repromote: the spare copies a node and is cut off; the node, after
//     more leases, resyncs from the spare (older data, its own marker) and
//     is promoted again;
//   - writable replica: the spare replicates a node over a slow link; the
//     node, made writable as a replica, resyncs from the lagging spare
//     under its own replication id (marker unchanged, newest keys gone)
//     and is promoted again;
//   - failover behind one address: the spare and a node swap roles
//     (FAILOVER) while the node's address keeps the engines' connections
//     to the demoted node; the engines must use the new master within a
//     quarantine and a few seconds (Report.Stranded);
//   - failback: a node's address moves to the spare, cut off from it a
//     moment before, while leases come and go, then back to the node, a
//     stale former primary with its own marker;
//   - reload: SAVE, leases come and go, DEBUG RELOAD NOSAVE (the same
//     process rolled back);
//   - proxy switch: behind a proxy that keeps client connections, a
//     node's process changes under the engines (restarted from a
//     snapshot, or replaced by a lagging replica);
//   - clock step: a node restarted empty whose wall clock then steps
//     ahead by more than the quarantine, so its uptime looks long;
//   - heal: a held lease loses its key on one node (its next extension
//     heals it there), then on every node at once, as a clock step on
//     every node would expire it, and another owner takes and releases
//     the resource in the gap: the lease's next extension must lose it,
//     not make it again;
//   - sentinel failover: a Sentinel master set's replica is cut off from
//     its master while leases come and go, then promoted, while a laggard
//     engine that probes every 2s keeps acquiring on the former master
//     until Sentinel demotes it (only on the master sets of
//     Config.Topology, Sentinel or SentinelDefault, whose sentinels run
//     with Sentinel's own periods; the other kinds hit standalone nodes
//     only);
//   - acl: a node's user loses pub/sub, transactions and CONFIG for a
//     while, as a managed node's may; half the time the node also
//     reloads in place meanwhile, when engines cannot read whether DEBUG
//     runs;
//
// and some holders pause past their validity before writing. A third of
// the unfenced holders take their leases with TryAcquire, again after a
// refusal: every round of theirs goes to the nodes as plain commands
// (package node, plain.go), as an Acquire's do only until its first
// refusal, so that every fault above meets many of them. And one turn in
// fifteen, a worker takes up with Resume a lease released a moment ago,
// which must be refused: a node that answers from a dataset that lost the
// release (a reload, a snapshot) must not count.
//
// The Report counts acquisitions, overlapping holdings of one resource
// (must be 0), stale writes the store rejected thanks to fencing, tokens
// that did not increase (must be 0), lost leases, and leases whose Done
// did not close by their deadline (must be 0): a channel got from Done
// before the deadline, looked at 200ms after it, must be closed, unless
// the process stalled meanwhile (a goroutine that wakes every 5ms found
// it could not run: the run queue of a starved machine, a GC; the
// Report counts the stalls and the late Dones they explain). A clock jump breaks
// Redlock's timing assumption, so the overlaps it explains (the first
// holder's key sat on the node when its clock stepped) are kept apart in
// Report.ClockOverlaps, with what fencing made of the stale holders'
// writes in them, and so are the token regressions after a token that
// only a clock ahead of the host's could issue (Report.ClockReport). So
// are the overlaps with an owner in the gap of a heal fault, as long as
// the lease whose keys lapsed ended by the validity it had then
// (Report.LapseOverlaps). OK ignores them, but not a write that fencing
// let through after a newer holder's. Each overlap is shown with the
// faults around it.
//
// Run drives all of it; Recorder and Store are the pieces, for tests that
// force a scenario of their own. The tests also replay, deterministically,
// schedules that once gave two holders (TestSchedule...).
//
//	go run ./safety/cmd/safety -duration 10m
package safety
