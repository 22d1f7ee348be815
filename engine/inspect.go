package engine

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/redlease/redlease/internal/errtext"
	"github.com/redlease/redlease/internal/hashslot"
	"github.com/redlease/redlease/lease"
	"github.com/redlease/redlease/node"
)

// Quorum is how many of n nodes must grant a lease: n/2+1.
func Quorum(n int) int { return lease.Quorum(n) }

// NodeReport is what InspectNodes learns of one node: what an engine
// meeting it now would make of it.
type NodeReport struct {
	// Addr is the node's address, as in Config.Nodes.
	Addr string
	// Server is the server probed: Addr, or the master that a master
	// set's sentinels named ("" when none answered, and for a cluster).
	Server string
	// Err says why the node could not be probed; the fields below are
	// zero then.
	Err error
	// RunID names the server process; it changes with every restart.
	RunID string
	// Uptime is how long the process says it has run, by its own wall
	// clock: for people only, never used to judge the node.
	Uptime time.Duration
	// Replica: a read-only replica, never used for locking.
	Replica bool
	// Evicts is the node's maxmemory-policy when it may evict lock keys
	// and cfg does not allow that (UnsafeEviction): engines refuse such a
	// node. "" otherwise.
	Evicts string
	// Trusted: the epoch marker names the node's dataset (its replication
	// history, process, and flushes, swaps and reloads), so it has kept
	// its data since an engine last judged it.
	Trusted bool
	// QuarantineUntil: an engine meeting the node now would not acquire
	// on it before this, as every lease it may have held before it lost
	// its data has not yet expired (zero: it would use the node at once).
	// An untrusted node, one that has evicted keys (unless
	// UnsafeEviction), or a master set whose former master may still
	// take writes (node.Target), sits out RestartQuarantine from when an
	// engine first sees it so: from now.
	QuarantineUntil time.Time
	// RTT is the probe's round trip.
	RTT time.Duration
	// Shards, for a Redis Cluster, report each master that serves slots,
	// by its first slot; the fields above sum them up (Err joins theirs,
	// Trusted when every one is, QuarantineUntil the latest) and Server,
	// RunID, Uptime and RTT stay zero.
	Shards []NodeReport
	// Slots, for a shard of a cluster, is how many slots its master
	// serves.
	Slots int
	// Replicas are the replicas the node lists as a master, with the
	// state of each one's link. They never vote; an operator reads here
	// which server a failover would promote.
	Replicas []Replica
}

// Replica is a replica as its master reports it.
type Replica struct {
	Addr  string // host:port, as the replica announced it
	State string // "online", or a sync under way ("wait_bgsave", "send_bulk")
	// Lag is how many bytes of its master's replication stream it had
	// not acknowledged at its last acknowledgement (replicas send one a
	// second): a bound on what a failover to it would lose only when
	// writes have been still for a second.
	Lag int64
}

// Serves reports whether an engine would acquire on the node at now.
func (r NodeReport) Serves(now time.Time) bool {
	return r.Err == nil && !r.Replica && r.Evicts == "" && !now.Before(r.QuarantineUntil)
}

// InspectNodes probes every node of cfg at once, each within
// ConnectTimeout and ctx, and reports them in the order of cfg.Nodes. It
// writes nothing but redlease's scripts into the nodes' script caches, as
// an engine's probe does. It uses cfg's Nodes, KeyPrefix, Client,
// ConnectTimeout, MaxTTL, RestartQuarantine and UnsafeEviction; an invalid
// cfg yields the error New would give.
func InspectNodes(ctx context.Context, cfg Config) ([]NodeReport, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	reached := probeAll(ctx, &cfg)
	at := time.Now()
	reports := make([]NodeReport, len(cfg.Nodes))
	dup, dupErr := twice(&cfg, reached) // reported on the entry named second
	for i, r := range reached {
		r.close()
		reports[i] = nodeReport(&cfg, cfg.Nodes[i], r.info, r.err, at)
		if i == dup {
			reports[i].Err = errors.Join(reports[i].Err, dupErr)
		}
		if r.view == nil {
			continue
		}
		// A cluster: each master as a node of its own, the cluster as
		// the sum of its shards.
		rep := &reports[i]
		for _, p := range node.ProbeCluster(ctx, cfg.clientOption(cfg.Nodes[i]), cfg.epochKey(), r.view) {
			p.Conn.Close()
			var info *node.Info
			if p.Err == nil {
				info = &p.Info
			}
			s := nodeReport(&cfg, p.Addr, info, p.Err, at)
			s.Slots = len(p.Slots)
			rep.Shards = append(rep.Shards, s)
		}
		rep.Trusted = true
		for _, s := range rep.Shards {
			rep.Err = errors.Join(rep.Err, s.Err)
			rep.Trusted = rep.Trusted && s.Trusted
			rep.Evicts = cmp.Or(rep.Evicts, s.Evicts)
			rep.Replica = rep.Replica || s.Replica
			if s.QuarantineUntil.After(rep.QuarantineUntil) {
				rep.QuarantineUntil = s.QuarantineUntil
			}
		}
	}
	return reports, nil
}

// nodeReport is what a probe (info, nil when it failed with err) at
// says of a master.
func nodeReport(cfg *Config, addr string, info *node.Info, err error, at time.Time) NodeReport {
	r := NodeReport{Addr: addr, Err: err}
	if info == nil {
		return r
	}
	r.Server, r.RunID, r.Uptime, r.Replica, r.Trusted, r.RTT = info.Addr, info.RunID, info.Uptime, info.Replica, info.Trusted(), info.RTT
	for _, rep := range info.Replicas {
		r.Replicas = append(r.Replicas, Replica{Addr: rep.Addr, State: rep.State, Lag: rep.Lag})
	}
	if !cfg.UnsafeEviction {
		r.Evicts = info.Evicts
	}
	if r.Replica || cfg.RestartQuarantine < 0 {
		return r
	}
	if !r.Trusted || info.Evicted > 0 && !cfg.UnsafeEviction || len(info.Split) > 0 { // as a node actor meeting it
		r.QuarantineUntil = at.Add(cfg.RestartQuarantine)
	}
	return r
}

// LockReport is one resource's lock keys, as InspectLocks found them.
type LockReport struct {
	// Resource is the resource name, as passed to Acquire.
	Resource string
	// Keys holds the lock key of each node that has one, in the order of
	// Config.Nodes.
	Keys []LockKey
	// Owner is the value (Lease.Value) that a quorum of the nodes holds:
	// a held lease. "" when none: the keys are the debris of a failed
	// attempt, or a lease ending.
	Owner string
	// Fence is the largest fence counter of the resource on a node that
	// holds its lock key; 0 when it never had a fenced lease.
	Fence uint64
}

// LockKey is a resource's lock key on one node.
type LockKey struct {
	Node  string        // the node's address
	Value string        // the owner's value
	TTL   time.Duration // remaining time to live
	// Err says why Value and TTL could not be read: a key on a Redis
	// Cluster master that does not serve its slot (left there by an
	// aborted slot migration), which engines never reach. InspectLocks'
	// error names it too. nil otherwise.
	Err error
}

// InspectLocks scans every node of cfg for the lock keys of the resources
// that match pattern, a Redis glob on the resource name ("*" for all), and
// reports them by resource, sorted by name. It reads with SCAN, never
// KEYS, and writes nothing. A node it could not scan is named in the
// error, and the reports hold what the others answered. It uses cfg's
// Nodes, KeyPrefix, Client and ConnectTimeout.
func InspectLocks(ctx context.Context, cfg Config, pattern string) ([]LockReport, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if pattern == "" {
		return nil, errors.New("redlease: inspect locks: empty pattern (\"*\" matches every resource)")
	}
	found := make([][]foundKey, len(cfg.Nodes))
	errs := make([]error, len(cfg.Nodes))
	var wg sync.WaitGroup
	for i, addr := range cfg.Nodes {
		wg.Go(func() {
			found[i], errs[i] = scanNode(ctx, &cfg, addr, pattern)
			if errs[i] != nil {
				errs[i] = errtext.Errorf("node %s: %w", addr, errs[i])
			}
		})
	}
	wg.Wait()

	byResource := make(map[string]*LockReport)
	for i, keys := range found {
		for _, k := range keys {
			r := byResource[k.resource]
			if r == nil {
				r = &LockReport{Resource: k.resource}
				byResource[k.resource] = r
			}
			r.Keys = append(r.Keys, LockKey{Node: cfg.Nodes[i], Value: k.value, TTL: k.ttl, Err: k.err})
			r.Fence = max(r.Fence, k.fence)
		}
	}
	reports := make([]LockReport, 0, len(byResource))
	for _, r := range byResource {
		r.Owner = quorumValue(r.Keys, Quorum(len(cfg.Nodes)))
		reports = append(reports, *r)
	}
	slices.SortFunc(reports, func(a, b LockReport) int { return strings.Compare(a.Resource, b.Resource) })
	if err := errors.Join(errs...); err != nil {
		return reports, errtext.Errorf("redlease: inspect locks: %w", err)
	}
	return reports, nil
}

// quorumValue is the value that at least quorum keys hold, or "".
func quorumValue(keys []LockKey, quorum int) string {
	count := make(map[string]int, len(keys))
	for _, k := range keys {
		if count[k.Value]++; count[k.Value] >= quorum {
			return k.Value
		}
	}
	return ""
}

type foundKey struct {
	resource, value string
	ttl             time.Duration
	fence           uint64
	err             error // why value and ttl are unknown
}

// scanBatch is SCAN's COUNT hint, and so about how many keys are read
// back per round trip.
const scanBatch = 1000

// scanNode reads the lock keys of one node whose resource matches
// pattern: on a Redis Cluster, those of every master.
func scanNode(ctx context.Context, cfg *Config, addr, pattern string) ([]foundKey, error) {
	opt := cfg.clientOption(addr)
	if !isCluster(addr) {
		return scanLocks(ctx, cfg, opt, pattern)
	}
	view, err := node.AskCluster(ctx, opt)
	if err != nil {
		return nil, err
	}
	var found []foundKey
	var errs []error
	for master := range view {
		opt.InitAddress = []string{master}
		opt.ForceSingleClient = true
		keys, err := scanLocks(ctx, cfg, opt, pattern)
		found = append(found, keys...)
		if err != nil {
			errs = append(errs, errtext.Errorf("master %s: %w", master, err))
		}
	}
	return found, errors.Join(errs...)
}

// scanLocks reads the lock keys of the master that opt reaches whose
// resource matches pattern: SCAN, then each key's value, TTL and fence
// counter.
func scanLocks(ctx context.Context, cfg *Config, opt rueidis.ClientOption, pattern string) ([]foundKey, error) {
	opt.DisableCache = true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	open := strings.TrimSuffix(cfg.lockKey(""), "}") // the lock keys' common start
	match := escapeGlob(open) + pattern + "}"
	var found []foundKey
	var stray []error // keys in slots the master does not serve
	var cursor uint64
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(match).Count(scanBatch).Build()).AsScanEntry()
		if err != nil {
			return found, err
		}
		cmds := make(rueidis.Commands, 0, 3*len(e.Elements))
		for _, key := range e.Elements {
			cmds = append(cmds, c.B().Get().Key(key).Build(), c.B().Pttl().Key(key).Build(), c.B().Get().Key(fenceKey(key)).Build())
		}
		res := c.DoMulti(ctx, cmds...)
		for j, key := range e.Elements {
			k := foundKey{resource: key[len(open) : len(key)-1]}
			value, err := res[3*j].ToString()
			if rueidis.IsRedisNil(err) {
				continue // expired since SCAN saw it
			}
			if node.SlotRefused(err) {
				k.err = errtext.Errorf("lock key %q in slot %d, which this master does not serve (%w): left by an aborted slot migration? Its value and TTL cannot be read, and engines never reach it",
					key, hashslot.Of(key), err)
				found = append(found, k)
				stray = append(stray, k.err)
				continue
			}
			if err != nil {
				return found, err
			}
			ms, err := res[3*j+1].AsInt64()
			if err != nil {
				return found, err
			}
			if ms == -2 {
				continue // expired since GET
			}
			k.value, k.ttl = value, time.Duration(ms)*time.Millisecond
			if f, err := res[3*j+2].ToString(); err == nil {
				k.fence, _ = strconv.ParseUint(f, 10, 64)
			}
			found = append(found, k)
		}
		if cursor = e.Cursor; cursor == 0 {
			return found, errors.Join(stray...)
		}
	}
}

// escapeGlob quotes the characters that are special in a Redis glob.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
