// Package node runs one actor per Redis master. The node actor owns that
// node's connection, turns the acquire, extend, fence and release commands
// of every lease into pipelined batches, and answers each command with
// exactly one Vote, by the command's deadline.
//
// Batching is self-clocked: while one batch is on the wire, commands queue in
// the actor's mailbox; when the batch returns, everything that queued goes
// out in one DoMulti, which rueidis writes with one syscall. Under load the
// batches grow and the cost per command falls; when idle, a command goes out
// at once.
//
// Commands take effect on a node in the order they reached its actor, so a
// lease's release never overtakes its acquire:
//   - one connection at a time (Conn): a batch never moves to a pooled one;
//   - a new connection carries commands only after a probe: the probe learns
//     which server process it reached (a restart may have lost keys) and
//     kills the previous connection on the server, so nothing that an
//     abandoned connection sent can run after what the new one sends;
//   - a batch runs as calls of one script (batch.lua), each carrying up to
//     maxScriptOps commands in order; a call that meets NOSCRIPT (the
//     server's cache lost the script) is sent again in full with every
//     call after it, in order (every command is idempotent); a batch's
//     acquires that neither queue nor fence go first, as plain SETs in
//     one MULTI/EXEC with the script's epoch check (plain.go).
//
// The batch script's commands are written once, in Go (protocol.go): per
// code, the KEYS and ARGV it takes and its reply. The encoder appends what
// that table names, and a test checks batch.lua's header and the arity it
// reads by against it. Every key a command touches is in its KEYS: the
// lock key (LockKey: <prefix>{<resource>}, the braces a hash tag that puts
// the keys beside it in its slot), its fence counter (FenceKey), its queue
// of waiters (<lock key>:queue) and the queue's grants
// (<lock key>:queue:grants); the batch's first key is the epoch marker
// (EpochKey). The Go commands are named for what a lease does: Acquire,
// Extend, Heal, Fence, Queue, the releases Release, HandOff, Cleanup and
// Leave, and Check, which only reads. A Heal sets a key as an Acquire
// does, and is refused where an Acquire is. An owner value may carry a
// meta (MetaSep, MetaOf), which refusals and checks answer: never the
// value.
//
// A Watcher, beside the actor and on a connection of its own, hears the
// releases the release script announces (Announcement; waiting callers
// wake on them).
//
// A release that got no answer is sent again, first, once the node answers,
// while its key may live and until Stop, which drops it: the key then
// expires by its TTL. Receive never waits on Redis. The node's one
// sender goroutine runs the actor's mailbox between the batches and probes
// it puts on the wire, which report back with a message: a command goes
// from the lease actor to this goroutine, not through a dispatcher worker
// first.
//
// # Files
//
// node.go: the actor, its Config, its messages' entries and jobs;
// batching.go: commands queued and cut into batches (flush), commands on
// one key in order; wire.go: the sender goroutines that put a batch on
// the connection and answer each command; link.go: how many batches go
// on the wire at once, by the link's round trip; health.go: probes,
// markers and quarantines; horizon.go: the TTL record; plain.go: plain
// acquires; protocol.go: the script's table; cluster*.go, sentinel.go,
// conn.go: what a node is besides one master.
//
// # Locks
//
// The node actor's state has no lock: one goroutine at a time runs it
// (the mailbox's run, on a sender goroutine between batches). Six
// mutexes guard what other goroutines share, each for a few field reads
// or writes and none across a call to Redis. Where one is taken while
// another is held, it is in this order, and never the reverse:
//
//	ClusterWatcher.mu  →  Cluster.mu  →  Conn.mu
//
// (a ClusterWatcher asks the cluster's masters under its own lock;
// Cluster.split sets each shard's Conn's split under the cluster's).
// Cluster.apply calls its followers (ClusterWatcher.follow) after it has
// let its lock go. Watcher.mu, sentinels.mu and Horizon.mu are leaves:
// nothing is locked while one is held, and Conn.locate asks its
// sentinels before it takes Conn.mu.
//
// It is the engine's machinery: its exported names serve the other
// packages of this module and carry no compatibility promise. Users
// import package engine.
//
// # A node's identity is its dataset
//
// Lock keys are lost by a dataset, not by a process: a process can lose
// its keys without restarting, a dataset can come back through replication
// carrying an old marker, and a connection can outlive the process behind
// it. So what an engine trusts is a dataset's lineage (Info.Lineage):
//
//	<master_replid> <run_id> <losses> <db>
//
// master_replid names the dataset's replication history: Redis draws a new
// one at every start, at every promotion (REPLICAOF NO ONE, a failover) and
// takes its primary's at a full resync. run_id names the process. losses
// counts the process's FLUSHALL, FLUSHDB, SWAPDB and DEBUG calls
// (lossCommands, from INFO commandstats): the ways to empty or replace a
// dataset in place. db is the database the engine's connection selected
// (ClientOption.SelectDB): the marker names what it marks, so that two
// deployments on one server, in two databases with the same KeyPrefix
// (staging beside production), write different markers, and a SWAPDB that
// hands one's data to the other is met by a marker naming the other
// database, which no batch trusts (the engine's word for the database: a
// script cannot read it; the deployment is its KeyPrefix, which names the
// marker's key). The epoch marker, a key without a TTL, holds the
// lineage an engine judged safe. It is written only after a quarantine
// (or by MarkNew, for new nodes) and only while the lineage and the count
// of evicted keys are still those the probe found (epoch.lua): a loss
// between the probe and the write is never laundered.
//
// Every probe (at New, every HealthInterval, after a reconnect and after a
// batch that met NOSCRIPT) reads the lineage, the evicted-keys count and
// the marker. A node is untrusted at first sight unless its marker names
// its lineage; a trusted node becomes untrusted when its lineage or
// evicted-keys count differs from the previous probe's, or its marker
// goes. An untrusted node refuses acquires, and grants nothing, until
// Config.Quarantine has passed since this engine saw it so, on this
// engine's monotonic clock: nothing is dated by the node's clock or
// uptime (a clock stepped after a restart would end a quarantine early).
// Every batch that carries an acquire or may grant also requires, in the
// script, the marker of the lineage last probed, the running process's
// master_replid, and that the process is a master (role:master: one INFO
// replication per such batch, a few microseconds of the node's time; a
// replica made writable, replica-read-only no, and resynced from its own
// replica keeps its run id, replication id, losses and marker, and takes
// writes: only its role tells, and it must tell in the batch, not at
// the next probe) and, on a process that may run DEBUG
// (enable-debug-command is not "no": an immutable setting the probe
// reads; or unknown, where an ACL denies CONFIG GET), its losses too (INFO commandstats, tens of microseconds: on 5
// test nodes on 2 cores a single caller's cycle went from 229 to 385µs
// with it); a mismatch answers -1,
// which quarantines the node from then and asks for a probe.
//
// Every way a dataset loses lock keys, how it is caught, what it costs:
//
//   - restart without persistence: the marker is gone and the run id and
//     replication id are new. The next batch's acquires find no marker;
//     the next probe a new run id.
//   - restart from an RDB snapshot or an AOF (everysec loses the last
//     second): the marker comes back, naming the old lineage; the running
//     process's replication id differs, so the next batch refuses.
//   - FLUSHALL, FLUSHDB (ASYNC or not): the marker goes with the keys; the
//     probe sees losses rise, so a marker another engine writes meanwhile
//     does not hide it.
//   - SWAPDB: the marker leaves the database with the keys; losses rise
//     (read by the next probe, or the next batch with DEBUG on), and the
//     marker that comes in names the other database, which the next
//     batch refuses.
//   - in-place reload (DEBUG RELOAD, DEBUG LOADAOF): same process, same
//     replication id, and the marker comes back from the snapshot; only
//     losses rise, which the next batch's check reads. (The safety
//     checker's reload fault found two holders while only probes read
//     them.) DEBUG is off by default in Redis 7, and DEBUG SLEEP counts
//     too: Redis counts all of DEBUG's subcommands as one.
//   - full resync from another primary (made a replica): refused while a
//     replica, by every batch (role:master) and by the probe; its
//     promotion draws a new replication id, so the copied marker no
//     longer matches. A writable replica resynced from its own replica
//     keeps every other name, and is refused for its role alone.
//   - promotion of a replica behind the node's address (a failover), or
//     a Sentinel master set's failover (Target): a new replication id; its
//     data may lack the old primary's last writes. A master set's Conn
//     moves to the master its sentinels name only in a probe, which sees
//     the new process (and checked quarantines it, naming the failover);
//     a batch that reaches it first meets the script's replication-id
//     check. Switches a probe did not see, a failover and a failback to
//     a master that was never demoted (it kept its replication id, and
//     lacks what the other took meanwhile) between two probes, raise
//     the set's config-epoch, which every probe reads from the sentinels
//     (Info.Switches): a rise quarantines as a failover does, from 0 on
//     (a set that never failed over before). The promotion's CLIENT KILL
//     drops the engine's connection, so a probe comes before the next
//     batch; one that dials asks the sentinels again after the dial (the
//     answer it moved on was asked at the probe before, which may be an
//     HealthInterval old), so its count covers every switch before its
//     connection.
//   - a Redis Cluster's shard failing over (CLUSTER FAILOVER, FORCE,
//     TAKEOVER, or the cluster promoting a replica of a master that
//     died): the slots' master is a new address, so a new shard actor,
//     which first sees it untrusted (the markers it copied name the old
//     master's lineage); its batches meet the script's check too. A
//     former master that still says it serves those slots keeps the new
//     one quarantined (Cluster.split). See Cluster.
//   - a Redis Cluster's slot moving to another master (MIGRATE): its keys
//     move with their TTLs, its epoch marker with them, naming the
//     lineage of the master it left; so the master it moves to refuses
//     its acquires (-1); the slot sits out a quarantine there, from when
//     the engine's view gives it that master, or from that -1 (the
//     master's other slots check their own markers; see Cluster). Were
//     the slot's keys
//     lost on the master it left (restarted from a snapshot, say), before
//     that master's quarantine ended, the keys it brings would lack them:
//     without the per-slot marker its new master would grant them (the
//     safety checker's slot migration found 662 overlaps in 10 moves in
//     2 min on one cluster with the check off). Nor may the new master's
//     own mark write over the marker the slot came with: a master that
//     sat out a quarantine of its own (flushed, say) and has had no
//     command from this engine since owes its mark when the slot
//     arrives; the mark skips the slots that sit out their own
//     quarantine, and a slot is put out from when the view gives it the
//     new master (the checker's slot migration, into a master flushed
//     just before: 264 and 447 overlaps in runs of 2 and 3 min with that
//     put-out reverted; 0 in 5 min with it).
//   - a slot migration aborted half-way (CLUSTER SETSLOT MIGRATING and
//     IMPORTING, a lock key moved with MIGRATE, then CLUSTER SETSLOT
//     STABLE on both): the slot never changes master, its marker stays,
//     and the key sits orphaned on the other master, where no command for
//     its slot reaches it. Outside the model, as a DEL of the lock key is:
//     the key left its master by an operator's MIGRATE, not by a loss of
//     the dataset, and nothing the master keeps (lineage, losses, marker)
//     changes, so no check of the node's identity can see it. Redis
//     Cluster tooling repairs such a state by moving the key back
//     (redis-cli --cluster fix: safe); an operator who aborts a migration
//     by hand must move the moved keys back first, or wait a TTL before
//     the slot serves locks again. (Tried: two holders in 3 of 3 runs
//     with STABLE; none with --cluster fix.)
//   - a slot's quick excursion: a slot moved to another master and back
//     within less than a probe interval, while the interim master loses
//     what it took meanwhile (it reloads an older snapshot, say). The
//     keys come back with their marker, naming the master's own lineage,
//     so an engine that sent nothing for that slot meanwhile, and whose
//     view never saw it away, trusts it. Measured (issue 43): moves of
//     ~70ms, two holders in 2 of 2 runs; moves of 1s or more always seen;
//     a master's crash and restart from a snapshot (the slot away ~2.1s)
//     seen 8 of 8, no overlap. Outside the model by an operational rule,
//     not a mechanism: leave a slot on the master it moved to for at
//     least two HealthIntervals (2s at the default) before it moves
//     again, which redis-cli --cluster reshard and rebalance do (they
//     move each slot once). The mechanism weighed: a master's
//     config-epoch, which rises when it takes a slot, read at each probe
//     (CLUSTER NODES); but a rise names no slot, so every resharding
//     step would put the importing master's every slot out for a TTL,
//     where a moved slot alone sits out today; Redis keeps nothing per
//     slot that an import changes.
//   - failback to a former primary behind the same address: the marker it
//     kept names its own lineage, not the one engines last probed there,
//     so they refuse it. An engine that meets such an address for the first
//     time cannot tell it from a node that lost nothing: two datasets that
//     serve one address in turn are two nodes, which Redlock counts as
//     one; that is a limit, not a check.
//   - eviction: the evicted-keys count rises (or any at first sight); a
//     node that may evict refuses acquires and grants unless
//     UnsafeEviction.
//   - a proxy that keeps client connections and switches backends: the new
//     process answers with its own replication id (the batch refuses) or
//     NOSCRIPT (a probe goes first).
//   - a clock step: uptime is not used, so it shortens no quarantine. A
//     step that expires keys early breaks Redlock's timing assumption;
//     that is not a lost dataset and nothing here can see it.
//
// How long the quarantine is: until every lease the node may have held
// has expired, which the longest TTL used on it bounds. Engines of
// several deployments may share nodes with different TTLs, so each
// records the TTLs it uses on its nodes (RecordKey, beside the marker;
// see horizon.go) and quarantines for the longest any of its probes
// finds, Config.Quarantine at least. (Before the record, an engine whose
// MaxTTL was shorter than another's TTL gave two holders in 4 of 4 runs
// of a restart schedule; TestQuarantineFollowsLongestRecordedTTL.)
//
// CONFIG RESETSTAT lowers the counts: it reads as a loss. So does a
// master's first replica (or the first after repl-backlog-ttl without
// one): Redis draws a new replication id when it creates its backlog. So
// does FLUSHDB or SWAPDB of another database: INFO counts commands, not
// databases (a lock node shared with a tenant that flushes its own
// database sits out a quarantine at each flush). All cost a quarantine,
// never a lease. Writes of lock
// keys by anything but redlease (DEL, SET, RESTORE, MIGRATE) are outside
// the model.
//
// Each detection costs the node Config.Quarantine (RestartQuarantine,
// default MaxTTL) of acquires, from when each engine sees it; a quorum of
// healthy nodes keeps serving. An unmarked deployment sits out one
// quarantine, at each engine's first sight, until the first engine marks
// the nodes; engines that start later trust them at once. MarkNew skips
// it for nodes that are new.
package node
