package engine

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlease/redlease/lease"
	"github.com/redlease/redlease/node"
)

// WakeCause says why an Acquire that waited started a round: WakeRelease,
// WakeExpiry, WakeFallback, WakeRecheck or WakeSplit (Event.Wake,
// Stats.Wakeups).
type WakeCause = lease.WakeCause

// The causes of wake-ups.
const (
	WakeRelease  = lease.WakeRelease  // the holder's release was announced
	WakeExpiry   = lease.WakeExpiry   // the holder's keys expired
	WakeFallback = lease.WakeFallback // the backoff ran out first: no node could announce releases
	WakeRecheck  = lease.WakeRecheck  // the announcements are heard now: one more look
	WakeSplit    = lease.WakeSplit    // waiters that woke together split the nodes: each draws a new delay
)

// Wakeups counts the rounds that waiting Acquire calls started, by cause.
type Wakeups struct {
	Release, Expiry, Fallback, Recheck, Split uint64
}

// lines are the engine's resource actors, by lock key, and what they
// share: a watcher per node and the engine's own channel. See resource.
type lines struct {
	e        *Engine
	watchers []watcher // by node
	channel  string    // the engine's own; watched from the first wait (listening)
	wakeups  [lease.WakeSplit + 1]atomic.Uint64
	// keepFor: how long a kept place waits for its caller; as long as
	// the next caller after a local release waits to hear of it
	// (NodeTimeout/YieldDivisor).
	keepFor time.Duration
	// listening: the watchers were asked to listen on channel.
	listening atomic.Bool
	// refusedWaiting: callers of TryAcquire refused in the engine and
	// waiting for their resource's gate (see gate).
	refusedWaiting atomic.Int64

	// The map from a resource's lock key to its actor, while it has one,
	// in shards: callers of different resources take different locks.
	seed   maphash.Seed
	shards [lineShards]shard
	gone   sync.Pool // resource actors that are gone, for the next (recycle)
}

// lineShards is how many shards the map of resource actors has: enough
// that callers on a few cores seldom meet on one lock.
const lineShards = 32

type shard struct {
	mu    sync.Mutex
	byKey map[string]*resource
	gates map[*resource]*gate // for the callers of TryAcquire refused in the engine
}

func newLines(e *Engine, channel string) *lines {
	ls := &lines{e: e, channel: channel, keepFor: e.cfg.NodeTimeout / lease.YieldDivisor, seed: maphash.MakeSeed()}
	for i := range ls.shards {
		ls.shards[i].byKey = make(map[string]*resource)
	}
	return ls
}

// watcher hears a node's release announcements: a node.Watcher, or a
// node.ClusterWatcher for a Redis Cluster.
type watcher interface {
	Watch(channel string)
	Unwatch(channel string)
	Close()
}

// watch starts a watcher per node of nodes, the engine's node actors.
func (ls *lines) watch(nodes []*node.Node) {
	e := ls.e
	for i, addr := range e.cfg.Nodes {
		var refused sync.Once
		hooks := node.WatchHooks{
			Refused: func(err error) {
				refused.Do(func() {
					e.cfg.Logger.Warn("redlease: node refuses SUBSCRIBE; callers waiting on a resource held by another engine are not woken by its release there: they ask again when the holder's key expires, or on their retry schedule",
						"node", addr, "err", err)
				})
			},
			Released: func(channel, msg string) { ls.released(i, channel, msg) },
			Watched: func(channel string, ok bool) {
				if r, life := ls.find(channelKey(channel)); r != nil {
					r.inbox.Post(&watched{life, i, ok})
				}
			},
			Lost: func() { ls.lost(i) },
		}
		if nodes[i].Cluster() != nil {
			ls.watchers = append(ls.watchers, node.NewClusterWatcher(nodes[i], e.cfg.clientOption(addr), e.cfg.ConnectTimeout, hooks))
		} else {
			ls.watchers = append(ls.watchers, node.NewWatcher(e.cfg.clientOption(addr), e.cfg.ConnectTimeout, hooks))
		}
	}
}

// channelKey is the lock key of a release channel.
func channelKey(channel string) string { return strings.TrimSuffix(channel, node.ReleasedSuffix) }

// shard is key's shard.
func (ls *lines) shard(key string) *shard {
	return &ls.shards[maphash.String(ls.seed, key)%lineShards]
}

// find is the actor of the resource with lock key key, or nil, and its
// life (see recycle).
func (ls *lines) find(key string) (*resource, uint32) {
	sh := ls.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r := sh.byKey[key]
	if r == nil {
		return nil, 0
	}
	return r, r.life.Load()
}

// each calls f on every resource actor, under its shard's lock.
func (ls *lines) each(f func(*resource)) {
	for i := range ls.shards {
		sh := &ls.shards[i]
		sh.mu.Lock()
		for _, r := range sh.byKey {
			f(r)
		}
		sh.mu.Unlock()
	}
}

// join puts a caller of Acquire (or TryAcquire: try) in the line of the
// resource with lock key key, in turn t (zero: the caller's, see
// leaseTurn); the caller awaits it, then reads its fields.
func (ls *lines) join(t *turn, key, value string, ttl time.Duration, try bool) {
	t.value, t.ttl, t.try = value, ttl, try
	if !try {
		t.since = time.Now() // a try turn is never queued: it needs no place by time
	}
	sh := ls.shard(key)
	sh.mu.Lock()
	r := sh.byKey[key]
	if r == nil {
		r = ls.newResource(key)
		sh.byKey[key] = r
	}
	r.joining.Add(1)
	sh.mu.Unlock()
	t.r = r
	r.inbox.Ask((*joining)(t))
}

// released: a node announced a release on channel (hook of a watcher).
// The resource actor handles it here when idle (Ask), and wakes the
// head's lease actor here too: the hand-off's path waits for no
// dispatcher worker. Neither blocks: a few field updates, a round sent.
func (ls *lines) released(i int, channel, msg string) {
	if r, life := ls.find(channelKey(channel)); r != nil {
		r.inbox.Ask(&announced{life, i, node.ParseAnnouncement(msg)})
	}
}

// lost: node i's watcher lost its connection; it will say when it listens
// again.
func (ls *lines) lost(i int) {
	ls.each(func(r *resource) { r.inbox.Post(&lost{i}) })
}

// stats fills s's waiting figures.
func (ls *lines) stats(s *Stats) {
	ls.each(func(r *resource) {
		n := int(r.count.Load())
		if h := r.head.Load(); h != nil && h.held.Load() {
			n--
		}
		if n > 0 {
			if s.Waiters == nil {
				s.Waiters = make(map[string]int)
			}
			s.Waiters[r.name()] = n
		}
	})
	s.Wakeups = Wakeups{
		Release:  ls.wakeups[lease.WakeRelease].Load(),
		Expiry:   ls.wakeups[lease.WakeExpiry].Load(),
		Fallback: ls.wakeups[lease.WakeFallback].Load(),
		Recheck:  ls.wakeups[lease.WakeRecheck].Load(),
		Split:    ls.wakeups[lease.WakeSplit].Load(),
	}
}

// close has every resource actor leave its kept place and stop its
// timers, then closes the watchers.
func (ls *lines) close() {
	var done []chan struct{}
	ls.each(func(r *resource) {
		c := make(chan struct{})
		r.inbox.Post(&closing{c})
		done = append(done, c)
	})
	for _, c := range done {
		<-c
	}
	for _, w := range ls.watchers {
		w.Close()
	}
}
