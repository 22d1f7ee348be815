package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/redlease/redlease/actors"
	"github.com/redlease/redlease/internal/redisinfo"
)

// Errors a node votes with when it is not asked at all.
var (
	// ErrNodeDown: the node failed its last batches or probes; commands
	// fail at once until a probe succeeds.
	ErrNodeDown = errors.New("redlease: node down")
	// ErrQuarantined: the node lost data (a restart without persistence,
	// a flush, evicted keys) and refuses acquires until every lease it may
	// have held has expired.
	ErrQuarantined = errors.New("redlease: node may have lost lock keys (a restart, a flush, evictions): quarantined")
	// ErrNoMarker: wrapped, with ErrQuarantined, by the refusal of a node
	// quarantined since this engine first met it without any epoch
	// marker: a new node (MarkNew ends that), or one that lost all its
	// data. A node met with another dataset's marker (restarted, failed
	// over) was in use before, and its refusal does not wrap it.
	ErrNoMarker = errors.New("no epoch marker at first sight")
	// ErrEvicting: the node has a memory limit and a maxmemory-policy
	// that lets it evict keys with a TTL, lock keys among them, when its
	// memory fills: it would forget a lease it holds and grant the
	// resource again. It refuses acquires (unless Config.UnsafeEviction).
	ErrEvicting = errors.New("redlease: node may evict lock keys when its memory fills")
)

// epochMissing is the acquire script's answer when the node's epoch
// marker is not the one required, or the node's replication history is
// not the one the marker names: it lost its data since the marker was
// written.
const epochMissing = -1

// lossCommands are the commands that empty or replace a dataset in place,
// without a restart: their calls (INFO commandstats) are a node's losses.
// DEBUG counts whole, RELOAD and LOADAOF with SLEEP: Redis counts its
// subcommands as one.
var lossCommands = []string{"flushall", "flushdb", "swapdb", "debug"}

// Info is what a probe learns of a node.
type Info struct {
	RunID string // changes with every restart
	// ReplID is the node's master_replid: its dataset's replication
	// history. It is new at every start, promotion (REPLICAOF NO ONE,
	// failover) and full resync from another primary.
	ReplID string
	// Losses counts the process's calls of lossCommands (flushes, swaps,
	// reloads) since it started or since CONFIG RESETSTAT.
	Losses int64
	// Debug: the process may run DEBUG (enable-debug-command is not "no",
	// or CONFIG GET is denied), so it may reload its dataset in place.
	// The setting is immutable: it holds for the process's life.
	Debug bool
	// Uptime is how long the process says it has run: for people only, as
	// it follows the node's wall clock, which may step.
	Uptime  time.Duration
	Replica bool // a read-only replica, useless for locking
	// Cluster: the server runs in cluster mode (INFO's redis_mode): a
	// master of a Redis Cluster votes as a shard of a cluster:// node,
	// never as a node of its own.
	Cluster bool
	// Promoted: a master that was a replica (INFO replication keeps the
	// replication id it had, second_repl_offset): its data is what it had
	// replicated, which may lack its master's latest writes.
	Promoted bool
	// Epoch is the epoch marker: the lineage of the dataset that an engine
	// last judged safe, "" when there is none.
	Epoch string
	// Recorded is the longest TTL the node's TTL record holds (RecordKey):
	// used there lately by some engine; 0 when none.
	Recorded time.Duration
	// DB is the database the connection selected (ClientOption.SelectDB).
	DB int
	// Evicts is the node's maxmemory-policy when it may evict lock keys (a
	// maxmemory is set and the policy is not noeviction), "" otherwise.
	Evicts string
	// Evicted counts the keys the process evicted since it started (or
	// since CONFIG RESETSTAT).
	Evicted int64
	// NoTransactions: the node refuses MULTI or EXEC (an ACL without
	// them): acquires go through the script, never plain (plain.go).
	NoTransactions bool
	// ConfigDenied: the node refuses CONFIG GET, so Debug is assumed.
	ConfigDenied bool
	ConnID       int64  // CLIENT ID of the connection the probe checked
	Addr         string // the server probed: a master set's master as its sentinels named it
	// Split lists a master set's other servers that still answer as
	// masters: a failover's former master not yet made a replica. It takes
	// the writes of engines that have not yet moved, and loses them when
	// it is demoted.
	Split []string
	// Switches counts a master set's failovers, as its sentinels do
	// (config-epoch): a rise since the previous probe is a switch of
	// masters, maybe two (a failover and a failback to a master that was
	// never demoted, which lacks what the other took meanwhile), that
	// the probes may not have seen as a change of address. 0 for a node
	// that is not a master set.
	Switches int64
	// Replicas are the replicas the node lists as a master (INFO
	// replication): for people, never for a vote.
	Replicas []redisinfo.Replica
	RTT      time.Duration // the probe's round trip
}

// Lineage names the node's dataset as it is now: its replication history,
// its process, how many times that process flushed, swapped or reloaded
// it, and the database the engine selected in it (see the package doc,
// Identity). It changes whenever the dataset may have lost keys other
// than by expiry or eviction (see the package doc), and it is what the
// epoch marker holds.
func (i Info) Lineage() string {
	return i.ReplID + " " + i.RunID + " " + strconv.FormatInt(i.Losses, 10) + " " + strconv.Itoa(i.DB)
}

// Trusted reports whether the node's dataset is the one an engine last
// judged safe: the epoch marker names its lineage. A marker of another
// lineage came back with a snapshot, an AOF, a replica's copy or a reload,
// any of which may have lost the latest lock keys.
func (i Info) Trusted() bool { return i.Epoch != "" && i.Epoch == i.Lineage() }

// noPerm reports whether err is the server's refusal by its ACL.
func noPerm(err error) bool {
	re, _ := rueidis.IsRedisErr(err)
	return re != nil && strings.HasPrefix(re.Error(), "NOPERM")
}

// Denied reports whether err is, or wraps, a server's refusal by its ACL
// (NOPERM): the user's configuration, which no redial mends.
func Denied(err error) bool {
	var re *rueidis.RedisError
	return errors.As(err, &re) && noPerm(re)
}

// SlotRefused reports whether err is, or wraps, a Redis Cluster master's
// refusal of a key's slot, one it does not serve now (see movedSlot): only
// a server in cluster mode answers so.
func SlotRefused(err error) bool {
	var re *rueidis.RedisError
	return errors.As(err, &re) && movedSlot(re)
}

// A probe's commands, by their place in it.
const (
	pClientID = iota
	pClientKill
	pServer
	pReplication
	pMemory
	pStats
	pCommandstats
	pEpoch
	pRecord
	pScriptLoad
	pEvalsha
	pConfig // may be denied: Info.ConfigDenied
	pMulti  // may be denied, with pExec: Info.NoTransactions
	pExec
	probeCmds
)

// probeNeeds says, per command of a probe that redlease cannot do
// without, why.
var probeNeeds = [...]string{
	pClientID: needClient, pClientKill: needClient,
	pServer: needInfo, pReplication: needInfo, pMemory: needInfo, pStats: needInfo, pCommandstats: needInfo,
	pEpoch: needKeys, pRecord: needKeys, pScriptLoad: needScripts, pEvalsha: needScripts,
}

const (
	needClient  = "redlease needs CLIENT ID and CLIENT KILL: after a reconnect it kills the abandoned connection on the server, so that nothing sent on it (a failed round's cleanup, say) runs after what the new one sends (the retry's acquire, whose key it would delete)"
	needInfo    = "redlease needs INFO: it tells a node that may have lost lock keys (restarted, flushed, reloaded, failed over, evicting) by its run id, replication id, counts of flushes and evictions"
	needKeys    = "redlease needs its keys (the KeyPrefix): the epoch marker, lock keys and their queues"
	needScripts = "redlease needs SCRIPT LOAD and EVALSHA, and its keys (the KeyPrefix) in them: every lock command runs in its scripts"
	needCluster = "redlease needs CLUSTER SHARDS on a Redis Cluster: it tells which master serves each slot, and which masters changed"
)

// Probe connects c if needed and learns, in one round trip, its node's run
// id, replication id, role, losses, eviction policy and count and epoch
// marker, loading redlease's scripts on the way so that later batches find
// them. When prev is an earlier connection to the same process, Probe kills
// it on the server first: nothing it sent can run after what this
// connection sends. New connections are made only here; for a master set,
// to the server its sentinels name the master now (locate), which may be
// another process than the last probe's.
func (c *Conn) Probe(ctx context.Context, epochKey string, prev Info) (Info, error) {
	if err := c.locate(ctx); err != nil {
		return Info{}, err
	}
	c.open.Store(true)
	defer c.open.Store(false)
	client, err := c.dialled()
	if err != nil {
		return Info{}, err
	}
	b := client.B()
	cmds := make(rueidis.Commands, probeCmds)
	cmds[pClientID] = b.ClientId().Build()
	cmds[pClientKill] = b.ClientKill().Id(math.MaxInt64).Build() // kills nobody: may it kill at all?
	cmds[pServer] = b.Info().Section("server").Build()
	cmds[pReplication] = b.Info().Section("replication").Build()
	cmds[pMemory] = b.Info().Section("memory").Build()
	cmds[pStats] = b.Info().Section("stats").Build()
	cmds[pCommandstats] = b.Info().Section("commandstats").Build()
	cmds[pEpoch] = b.Get().Key(epochKey).Build()
	cmds[pRecord] = b.Get().Key(RecordKey(epochKey)).Build()
	cmds[pScriptLoad] = b.ScriptLoad().Script(batchScript.body).Build()
	cmds[pEvalsha] = b.Evalsha().Sha1(batchScript.sha).Numkeys(1).Key(epochKey).Arg(make([]string, scriptPreamble)...).Build() // a batch of no command
	cmds[pConfig] = b.ConfigGet().Parameter("enable-debug-command").Build()
	// An ACL may deny either: a denied EXEC ends the transaction
	// (EXECABORT), as TestACLDeniedCommands checks.
	cmds[pMulti], cmds[pExec] = b.Multi().Build(), b.Exec().Build()
	before := c.dials.Load()
	start := time.Now()
	res := client.DoMulti(ctx, cmds...)
	rtt := time.Since(start)
	dials := c.dials.Load()
	for i, r := range res[:len(probeNeeds)] {
		if err := r.Error(); err != nil && !rueidis.IsRedisNil(err) {
			if noPerm(err) {
				err = fmt.Errorf("%w: %s", err, probeNeeds[i])
			}
			return Info{}, err
		}
	}
	multi, exec := res[pMulti].Error(), res[pExec].Error()
	info := Info{RTT: rtt, Addr: c.Addr(), NoTransactions: multi != nil || exec != nil, DB: c.opt.SelectDB}
	info.Split, info.Switches = c.splitMasters()
	info.ConnID, _ = res[pClientID].AsInt64()
	server, _ := res[pServer].ToString()
	repl, _ := res[pReplication].ToString()
	memory, _ := res[pMemory].ToString()
	stats, _ := res[pStats].ToString()
	commands, _ := res[pCommandstats].ToString()
	info.Epoch, _ = res[pEpoch].ToString()
	if ms, err := res[pRecord].AsInt64(); err == nil {
		info.Recorded = time.Duration(ms) * time.Millisecond
	}
	info.Evicts = evicts(memory)
	evicted, _ := redisinfo.Field(stats, "evicted_keys")
	info.Evicted, _ = strconv.ParseInt(evicted, 10, 64)
	info.Losses = losses(commands)
	debug, err := res[pConfig].AsStrMap()
	info.Debug = err != nil || debug["enable-debug-command"] != "no"
	info.ConfigDenied = err != nil
	info.RunID, _ = redisinfo.Field(server, "run_id")
	mode, _ := redisinfo.Field(server, "redis_mode")
	info.Cluster = mode == "cluster"
	info.ReplID, _ = redisinfo.Field(repl, "master_replid")
	role, _ := redisinfo.Field(repl, "role")
	info.Replica = role == "slave"
	second, _ := redisinfo.Field(repl, "second_repl_offset")
	info.Promoted = !info.Replica && second != "" && second != "-1"
	info.Replicas = redisinfo.Replicas(repl)
	up, _ := redisinfo.Field(server, "uptime_in_seconds")
	if s, err := strconv.ParseInt(up, 10, 64); err == nil {
		info.Uptime = time.Duration(s) * time.Second
	}
	if info.RunID == "" || info.ReplID == "" {
		return Info{}, errors.New("redlease: INFO has no run_id or master_replid")
	}
	if prev.RunID == info.RunID && prev.ConnID != 0 && prev.ConnID != info.ConnID {
		err := client.Do(ctx, client.B().ClientKill().Id(prev.ConnID).Build()).Error()
		if _, gone := rueidis.IsRedisErr(err); err != nil && !gone { // gone: "No such client"
			return Info{}, err
		}
	}
	if c.dials.Load() != dials {
		return Info{}, errors.New("redlease: the connection changed during the probe")
	}
	if dials != before && c.sentinels != nil {
		// A new connection, maybe because a promotion dropped the last
		// (Sentinel's CLIENT KILL): the answer locate moved on was asked
		// at the probe before, maybe long before, and may not count the
		// switches since. One asked now, after the dial, counts every
		// switch before this connection; a later one drops it again.
		switches, err := c.sentinels.switchesOf(ctx, info.Addr)
		if err != nil {
			c.redial() // batches wait for a probe that dials, and asks, again
			return Info{}, err
		}
		info.Switches = max(info.Switches, switches)
	}
	return info, nil
}

// losses sums the calls of lossCommands in an INFO commandstats section.
func losses(commandstats string) int64 {
	var n int64
	for _, c := range lossCommands {
		stat, ok := redisinfo.Field(commandstats, "cmdstat_"+c)
		if !ok {
			continue // never called
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(stat, "calls="), ",")
		k, _ := strconv.ParseInt(calls, 10, 64)
		n += k
	}
	return n
}

// evicts is the maxmemory-policy of an INFO memory section when it may
// evict lock keys: with a memory limit, every policy but noeviction evicts
// keys with a TTL (the volatile-* ones only those), and lock keys have one.
// "" when it cannot, or when the section does not say.
func evicts(memory string) string {
	limit, _ := redisinfo.Field(memory, "maxmemory")
	policy, _ := redisinfo.Field(memory, "maxmemory_policy")
	if limit == "" || limit == "0" || policy == "" || policy == "noeviction" {
		return ""
	}
	return policy
}

// Mark writes the epoch marker of the dataset a probe found (info), if
// it is still that dataset (see epoch.lua): true if written. checkEvicted
// also requires that the node evicted nothing since.
func (c *Conn) Mark(ctx context.Context, epochKey string, info Info, checkEvicted bool) (bool, error) {
	client, err := c.get()
	if err != nil {
		return false, err
	}
	n, err := client.Do(ctx, markCmd(client, epochKey, info, checkEvicted)).AsInt64()
	return n == 1, err
}

func markCmd(c rueidis.Client, epochKey string, info Info, checkEvicted bool) rueidis.Completed {
	return c.B().Eval().Script(epochLua).Numkeys(1).Key(epochKey).Arg(markArgs(info, checkEvicted)...).Build()
}

// markArgs are epoch.lua's ARGV.
func markArgs(info Info, checkEvicted bool) []string {
	evicted := ""
	if checkEvicted {
		evicted = strconv.FormatInt(info.Evicted, 10)
	}
	return append([]string{info.Lineage(), evicted, strconv.Itoa(info.DB)}, lossCommands...)
}

// health is what the node actor knows of its node.
type health struct {
	checked         Info   // the last probe: process and connection commands go to
	lineage         string // checked.Lineage(), made once per probe
	epoch           string // what every acquire batch requires (epoch), made once per probe
	evicts          string // the node's maxmemory-policy, when it may evict lock keys
	down            bool
	downErr         error     // why it went down
	failures        int       // consecutive failed batches or probes
	failedAt        time.Time // when the last was counted
	quarantineUntil time.Time // acquires refused before it
	quarantineErr   error     // they are refused with it: ErrQuarantined, with why
	lossAt          time.Time // since when the latest quarantine counts (quarantine)
	record          recorded  // what the node's TTL record is known to hold
	evicting        error     // acquires refused with it: the node may evict lock keys (ErrEvicting)
	epochPending    bool      // write the epoch marker once the quarantine is over
	probeDue        bool
	probesLate      int  // probes in a row that ran out of time (probeTimeout)
	configDenied    bool // said so (denied)

	// slotsOut, on a cluster's shard: slots that sit out a quarantine of
	// their own, until then, and are marked after it (see Cluster).
	slotsOut map[uint16]time.Time
}

func (h *health) quarantined(now time.Time) bool { return now.Before(h.quarantineUntil) }

// epochDue: the quarantine is over and the epoch marker must be written,
// in front of the next batch, so the acquires after it pass the check.
func (h *health) epochDue(now time.Time) bool { return h.epochPending && !h.quarantined(now) }

type (
	healthTick struct{ actors.Late }
	probed     struct {
		actors.Late
		at   time.Time
		info Info
		err  error
	}
)

// sent reports a finished batch back to the node actor, returning the
// batch's slice for reuse.
type sent struct {
	actors.Late
	slot      int           // the job's (job.slot)
	sentAt    time.Time     // when it went out
	rtt       time.Duration // from the write to the answers (0: unsent, or no answer)
	batch     []entry
	size      int     // entries sent
	unchecked bool    // nothing was sent: batch waits for a probe, in order
	retry     []entry // releases that got no answer: sent again first
	marked    bool    // the epoch marker was written
	// record: what the node's TTL record holds after the batch updated it
	// (job.record), unless recordFailed.
	record       time.Duration
	recordFailed bool
	markFailed   bool // it was not: the dataset changed since the probe
	failed       int  // entries that got no answer from Redis
	lostData     bool // an acquire found the epoch marker not the one required

	// On a cluster's shard: the slots it marked (job.marking), whether
	// that was the shard's mark (job.whole), and the slots where an
	// acquire found the marker not the one required (lost).
	marking   []uint16
	whole     bool
	lostSlots []uint16
}

func (a *nodeActor) quarantineOn() bool { return a.cfg.Quarantine >= 0 }

// epoch is what acquires require (see batch.lua): the lineage of the
// dataset the last probe found, " debug" after it when the process may
// reload in place (the script then counts its losses too), or nothing
// when the quarantine is off.
func (a *nodeActor) epoch() string {
	if !a.quarantineOn() {
		return ""
	}
	return a.health.epoch
}

// start takes the probe New made; a node that was unreachable then is
// probed first thing.
func (a *nodeActor) start(first *Info) {
	if first == nil {
		a.health.probeDue = true
		return
	}
	a.setEvicts(first.Evicts)
	a.denied(*first)
	a.sawRecord(first.Recorded)
	a.checked(time.Now(), *first)
}

// denied follows what the node's ACL refuses that redlease can do
// without, at a cost it logs: transactions (acquires go through the
// script, never plain, until a probe finds them allowed again) and CONFIG
// GET (DEBUG is assumed possible, so every acquiring batch also reads
// INFO commandstats).
func (a *nodeActor) denied(info Info) {
	if was := a.noPlain.Swap(info.NoTransactions); info.NoTransactions && !was {
		a.cfg.Logger.Warn("redlease: node refuses MULTI or EXEC; every acquire goes through the batch script (about 1µs more of the node's time each)",
			"node", a.cfg.Addr)
	}
	if info.ConfigDenied && !a.health.configDenied {
		a.health.configDenied = true
		a.cfg.Logger.Warn("redlease: node refuses CONFIG GET; assuming it may run DEBUG RELOAD, every acquiring batch also reads INFO commandstats (tens of µs of the node's time)",
			"node", a.cfg.Addr)
	}
}

// checked takes what a probe at found. A node is untrusted at first sight
// unless its marker names its dataset's lineage; and a dataset other than
// the one the previous probe found (another process, replication history,
// flush, swap, reload or eviction), or a marker that no longer names it,
// may have lost lock keys at any moment since that probe. Either way the
// node refuses acquires until Quarantine has passed since at, this
// engine's own clock, and marks the dataset after that. Nothing is dated
// by the node's clock or uptime: a clock step would end a quarantine
// early.
func (a *nodeActor) checked(at time.Time, info Info) {
	prev := a.health.checked
	// Never lowered: a sentinel late to count a failover would read, at
	// the probe after, as one more.
	info.Switches = max(info.Switches, prev.Switches)
	a.health.checked, a.health.lineage, a.health.epoch = info, info.Lineage(), info.Lineage()
	if info.Debug {
		a.health.epoch += debugSuffix
	}
	a.evictions(at, prev, info)
	if !a.quarantineOn() {
		return
	}
	switch {
	case prev.RunID == "":
		switch {
		case info.Epoch == "":
			a.lostData(at, fmt.Errorf("%w%s", ErrNoMarker, promoted(info)))
		case !info.Trusted():
			a.lostData(at, "first sight: the epoch marker names another dataset"+promoted(info))
		}
	case prev.Addr != info.Addr:
		a.lostData(at, "its master set failed over to "+info.Addr+promoted(info))
	case info.Switches > prev.Switches:
		a.lostData(at, fmt.Sprintf("its master set switched masters since the last probe (Sentinel config-epoch %d, then %d), maybe to another and back: what the other took is lost", prev.Switches, info.Switches))
	case prev.RunID != info.RunID:
		a.lostData(at, "restarted (new run_id)"+promoted(info))
	case prev.ReplID != info.ReplID:
		a.lostData(at, "new replication history (promoted, or resynced from another primary)")
	case prev.Losses != info.Losses:
		a.lostData(at, "flushed, swapped or reloaded its data (FLUSHALL, FLUSHDB, SWAPDB, DEBUG)")
	case prev.Trusted() && !info.Trusted():
		a.lostData(at, "epoch marker gone")
	}
	switch {
	case len(info.Split) > 0:
		// Whatever it grants now is lost when it is demoted: the new
		// master must not grant until that has expired.
		if a.health.quarantined(at) {
			a.quarantine(at)
		} else {
			a.lostData(at, "its former master "+strings.Join(info.Split, ", ")+" still takes writes")
		}
	case len(prev.Split) > 0:
		// The former master was demoted since the last probe, having
		// taken writes until then: count from now.
		a.quarantine(at)
	}
	// A marker that names the dataset makes the pending mark needless
	// (another engine wrote it): on a standalone node, where it is the
	// only one. A cluster's shard has one per slot, and the probe read
	// one: a mark cut short (its deadline passed after some of the
	// thousands) leaves the first slots marked and the others not, whose
	// acquires would find their markers another master's and sit out a
	// second quarantine. There only the shard's own whole mark ends it
	// (batchDone), skipping the markers that name the dataset already.
	if info.Trusted() && !a.health.quarantined(at) && a.cfg.Slots == nil {
		a.health.epochPending = false
	}
}

func promoted(info Info) string {
	if info.Promoted {
		return ", a promoted replica"
	}
	return ""
}

// evictions quarantines a node that evicted keys, as one that lost its
// data: the keys may have been lock keys of leases still valid. It goes by
// the process's count of evicted keys: one that changed since the previous
// probe (CONFIG RESETSTAT lowers it), or any at all in a process seen for
// the first time, which may have evicted them just before. Not with
// UnsafeEviction, which accepts evictions.
func (a *nodeActor) evictions(at time.Time, prev, info Info) {
	if a.cfg.UnsafeEviction {
		return
	}
	switch {
	case prev.RunID != info.RunID && info.Evicted > 0:
		a.lostData(at, "it has evicted keys, maybe lock keys, at a time not known")
	case prev.RunID == info.RunID && info.Evicted != prev.Evicted:
		a.lostData(at, "it evicted keys, maybe lock keys")
	}
}

// lost takes e's answer that its epoch marker is not the one required: on
// a cluster's shard, of e's slot (loseSlots), else of the node's dataset.
func (a *nodeActor) lost(e *entry, done *sent) {
	if a.cfg.Slots != nil {
		done.lostSlots = append(done.lostSlots, e.slot)
		return
	}
	done.lostData = true
}

// lostData quarantines the node until Quarantine after since, the moment
// it may have lost its data, and writes the marker after that.
func (a *nodeActor) lostData(since time.Time, why any) {
	if a.quarantine(since) && time.Now().Before(a.health.quarantineUntil) {
		if err, ok := why.(error); ok {
			a.health.quarantineErr = fmt.Errorf("%w: %w", ErrQuarantined, err)
		} else {
			a.health.quarantineErr = fmt.Errorf("%w: %s", ErrQuarantined, why)
		}
		a.tellHealth()
		a.stats.restarts.Add(1)
		a.cfg.Logger.Warn("redlease: node may have lost its data; refusing acquires until every lease it held expired",
			"node", a.cfg.Addr, "why", why, "until", a.health.quarantineUntil)
	}
}

// quarantine is lostData without a word: it reports whether the
// quarantine now ends later.
func (a *nodeActor) quarantine(since time.Time) bool {
	a.health.epochPending = true
	a.health.record = recorded{} // lost with the data, maybe
	if since.After(a.health.lossAt) {
		a.health.lossAt = since
	}
	return a.quarantineTill(since.Add(a.quarantineFor()))
}

// quarantineTill has the node sit out until until, unless it already
// does longer: it reports whether the quarantine now ends later.
func (a *nodeActor) quarantineTill(until time.Time) bool {
	if !until.After(a.health.quarantineUntil) {
		return false
	}
	a.health.quarantineUntil = until
	a.stats.quarantineUntil.Store(until.UnixNano())
	return true
}

// quarantineFor is how long a node that may have lost lock keys sits out:
// Config.Quarantine, or the longest TTL recorded on the engine's nodes if
// longer (see horizon.go).
//
// The sender goroutines read it too (a -1 says until when): horizon is
// atomic, written by the actor alone.
func (a *nodeActor) quarantineFor() time.Duration {
	return max(a.cfg.Quarantine, time.Duration(a.horizon.Load()))
}

// sawRecord takes what the node's TTL record holds (a probe's read, or an
// update's answer). When the engine's nodes record a TTL longer than this
// actor's quarantines last, the quarantine under way (or one that ended
// less than that long ago) and the slots sitting out theirs are
// lengthened to it: the lost node's own record is gone, and the other
// nodes' may be read only now.
func (a *nodeActor) sawRecord(d time.Duration) {
	before := a.quarantineFor()
	a.horizon.Store(int64(a.cfg.Horizon.saw(a.cfg.Addr, d)))
	grow := a.quarantineFor() - before
	if grow <= 0 || !a.quarantineOn() {
		return
	}
	if until := a.health.lossAt.Add(a.quarantineFor()); until.After(time.Now()) && a.quarantineTill(until) {
		a.cfg.Logger.Warn("redlease: an engine uses longer leases on these nodes than this one's quarantine lasts; the node sits out longer",
			"node", a.cfg.Addr, "recorded", time.Duration(a.horizon.Load()), "until", a.health.quarantineUntil)
	}
	for s, until := range a.health.slotsOut {
		a.health.slotsOut[s] = until.Add(grow)
	}
}

// probeTimeout bounds a probe: at least the node timeout and 100ms,
// doubled for each probe in a row that ran out of time, up to
// maxProbeTimeout. A probe that never fits its bound keeps its node down
// for good: a process starved of CPU (a GC storm, a noisy neighbour)
// answered 100ms probes late for minutes on end, each of them failing
// and sent again, which fed the starvation they measured. A longer bound
// costs no safety (the probe's findings date from its answer) and little
// time back: a paused server answers the waiting probe when it resumes.
func (a *nodeActor) probeTimeout() time.Duration {
	base := max(a.cfg.Timeout, 100*time.Millisecond)
	return min(base<<min(a.health.probesLate, 8), max(base, maxProbeTimeout))
}

// maxProbeTimeout bounds probeTimeout's growth.
const maxProbeTimeout = 2 * time.Second

// late reports whether err is a probe's running out of time.
func late(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

func (a *nodeActor) probe(j job) {
	m := &probed{}
	ctx, cancel := context.WithDeadline(context.Background(), j.deadline)
	m.info, m.err = a.conn.Probe(ctx, j.probeKey, j.prev)
	cancel()
	// After the answer: whatever it saw happened before at.
	m.at = time.Now()
	a.system.Root.Send(a.self, m)
}

func (a *nodeActor) probeDone(m *probed) {
	defer a.armProbe()
	if m.err != nil {
		if late(m.err) {
			a.health.probesLate++
		}
		a.failure(m.err)
		return
	}
	a.health.failures, a.health.probesLate = 0, 0
	if m.info.Replica {
		// Dialled again at the next probe: behind one address (a DNS name,
		// a proxy), a failover leaves this connection with the demoted
		// master, while new ones reach the new master, met then as at
		// first sight.
		a.conn.redial()
		a.setDown(true, errors.New("the node is a read-only replica"))
		return
	}
	a.setDown(false, nil)
	a.setEvicts(m.info.Evicts)
	a.denied(m.info)
	a.sawRecord(m.info.Recorded)
	a.checked(m.at, m.info)
}

// setEvicts follows the node's eviction policy, as a probe found it:
// while it may evict lock keys the node refuses acquires, unless the
// configuration allows it.
func (a *nodeActor) setEvicts(policy string) {
	if policy == a.health.evicts {
		return
	}
	a.health.evicts = policy
	switch {
	case policy == "":
		a.health.evicting = nil
		a.cfg.Logger.Info("redlease: node no longer evicts keys", "node", a.cfg.Addr)
	case a.cfg.UnsafeEviction:
		a.cfg.Logger.Warn("redlease: node may evict lock keys when its memory fills (allowed by UnsafeEviction)",
			"node", a.cfg.Addr, "maxmemory-policy", policy)
	default:
		a.health.evicting = fmt.Errorf("%w (maxmemory-policy %s): set maxmemory-policy to noeviction", ErrEvicting, policy)
		a.cfg.Logger.Warn("redlease: node may evict lock keys when its memory fills; it refuses acquires",
			"node", a.cfg.Addr, "maxmemory-policy", policy)
	}
	a.stats.evicting.Store(a.health.evicting != nil)
}

func (a *nodeActor) batchDone(m *sent) {
	switch {
	case m.recordFailed:
		a.health.record = recorded{} // again, with the next batch
	case m.record > 0:
		a.sawRecord(m.record)
	}
	if m.marked {
		for _, s := range m.marking {
			delete(a.health.slotsOut, s)
		}
		a.countSlotsOut()
		if m.whole {
			a.health.epochPending = false
			a.health.checked.Epoch = a.health.lineage
		}
	}
	if m.unchecked {
		a.health.probeDue = true
		return
	}
	if (m.lostData || m.markFailed) && a.quarantineOn() {
		// The dataset is not the one the last probe found (or the marker
		// went): until the probe tells what happened, count from now.
		a.lostData(time.Now(), "the epoch marker or replication id changed")
		a.health.probeDue = true
	}
	if len(m.lostSlots) > 0 && a.quarantineOn() {
		a.loseSlots(time.Now(), m.lostSlots, "its epoch marker is not this master's (the slot moved here, or its keys were deleted)")
		a.health.probeDue = true // is it the slots alone, or the dataset?
	}
	switch {
	case m.failed == 0:
		a.health.failures = 0
		if a.health.down {
			a.setDown(false, nil)
			a.tellHealth()
		}
	case m.failed == m.size && m.sentAt.After(a.health.failedAt):
		// Batches that were on the wire together and got no answer count
		// as one failure: what failed the first failed the others.
		a.failure(nil)
	}
}

// How a node is judged down, and probed while down. The engine re-exports
// both; the README quotes them.
const (
	// DownAfterFailures: this many batches or probes in a row without an
	// answer mark a node down; its commands then fail at once (ErrNodeDown)
	// instead of waiting out the node timeout. One is not enough: a single
	// late batch says little, and a node marked down wrongly loses votes.
	DownAfterFailures = 2
	// DownProbeDivisor: a node that is down is probed every
	// HealthInterval/DownProbeDivisor (five times as often as when up), so
	// that it votes again soon after it is back.
	DownProbeDivisor = 5
)

// failure counts a batch or probe that got no answer; DownAfterFailures
// in a row mark the node down, so that rounds stop waiting on it.
func (a *nodeActor) failure(err error) {
	a.health.failures++
	a.health.failedAt = time.Now()
	if a.health.failures >= DownAfterFailures {
		a.setDown(true, err)
	}
}

func (a *nodeActor) setDown(down bool, err error) {
	if a.health.down == down {
		return
	}
	a.health.down, a.health.downErr = down, err
	a.stats.down.Store(down)
	if down {
		a.cfg.Logger.Warn("redlease: node down; failing its commands fast until a probe succeeds", "node", a.cfg.Addr, "err", err)
		a.armProbe()
	} else {
		a.cfg.Logger.Info("redlease: node up again", "node", a.cfg.Addr)
	}
	if down { // up: told by the caller once it knows whether it serves (a probe may find it quarantined)
		a.tellHealth()
	}
}

// HealthChange is a change in whether a node actor serves acquires, as
// Config.OnHealth hears of it: it went down, into a restart quarantine,
// or serves again (neither). A quarantine's end is heard at the first
// probe after it (within HealthInterval).
type HealthChange struct {
	Addr  string // the actor's Config.Addr: on a cluster, its shard's master
	Shard bool   // the actor is a shard of a Redis Cluster node
	// Down: failing fast after unanswered batches or probes; Err says
	// why.
	Down bool
	// Until: quarantined until then, Err (matching ErrQuarantined) says
	// why; zero when not.
	Until time.Time
	Err   error
}

// tellHealth calls Config.OnHealth when the node's health is not what it
// last told: down, quarantined (or until a later time), or serving.
func (a *nodeActor) tellHealth() {
	if a.cfg.OnHealth == nil {
		return
	}
	h := HealthChange{Addr: a.cfg.Addr, Shard: a.cfg.Slots != nil}
	switch {
	case a.health.down:
		h.Down, h.Err = true, a.health.downErr
	case a.health.quarantined(time.Now()):
		h.Until, h.Err = a.health.quarantineUntil, cmp.Or(a.health.quarantineErr, ErrQuarantined)
	}
	if h.Down == a.told.Down && h.Until.Equal(a.told.Until) {
		return
	}
	a.told = h
	a.cfg.OnHealth(h)
}

// armProbe schedules the next probe: every HealthInterval, DownProbeDivisor
// times as often while the node is down.
func (a *nodeActor) armProbe() {
	if a.timer != nil {
		a.timer.Stop()
	}
	d := a.cfg.HealthInterval
	if a.health.down {
		d /= DownProbeDivisor
	}
	a.timer = actors.After(a.system, d, a.self, &healthTick{})
}
