package node

import (
	"slices"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/redlease/redlease/internal/hashslot"
)

// ClusterWatcher is a Watcher for a Redis Cluster node: a Watcher per
// master. A release channel (ReleasedSuffix) is watched on the master
// that serves its slot, with SSUBSCRIBE: the batch script announces a
// release there, with SPUBLISH, and nowhere else. Any other channel (the
// engine's own, Config.Channel) is watched on every master: a release's
// grant asks PUBSUB NUMSUB whether the waiter's engine listens, and a
// server counts only its own subscribers. The watcher follows the
// cluster's view: a channel whose slot moved is watched on its new master
// (an announcement made meanwhile may be missed: its waiter wakes when
// the key it was refused expires, as without announcements).
type ClusterWatcher struct {
	c       *Cluster
	opt     rueidis.ClientOption // the cluster's: Target.Option
	timeout time.Duration
	hooks   WatchHooks

	mu      sync.Mutex
	closed  bool
	masters map[string]*Watcher // by address
	on      map[string]string   // each release channel watched: the master it is watched on, "" for none
	every   map[string]bool     // the other channels watched, on every master
}

// NewClusterWatcher returns a watcher for the cluster node n
// (SpawnCluster), whose option opt is (Target.Option); each command it
// sends waits at most timeout.
func NewClusterWatcher(n *Node, opt rueidis.ClientOption, timeout time.Duration, hooks WatchHooks) *ClusterWatcher {
	w := &ClusterWatcher{c: n.cluster, opt: opt, timeout: timeout, hooks: hooks,
		masters: make(map[string]*Watcher), on: make(map[string]string), every: make(map[string]bool)}
	w.c.follow(w.follow)
	return w
}

// Watch starts listening on channel; Watched tells when it took effect.
// It never blocks.
func (w *ClusterWatcher) Watch(channel string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.closed:
	case isReleaseChannel(channel):
		addr := w.c.masterOf(hashslot.Of(channel))
		w.on[channel] = addr
		w.watchOn(addr, channel)
	default:
		w.every[channel] = true
		for _, m := range w.c.masters() {
			w.master(m).Watch(channel)
		}
	}
}

// Unwatch stops listening on channel. It never blocks.
func (w *ClusterWatcher) Unwatch(channel string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if addr, ok := w.on[channel]; ok {
		delete(w.on, channel)
		if m := w.masters[addr]; m != nil {
			m.Unwatch(channel)
		}
		return
	}
	if w.every[channel] {
		delete(w.every, channel)
		for _, m := range w.masters {
			m.Unwatch(channel)
		}
	}
}

// watchOn watches a release channel on the master at addr; none ("")
// says it is not watched.
func (w *ClusterWatcher) watchOn(addr, channel string) {
	if addr == "" {
		w.hooks.Watched(channel, false)
		return
	}
	w.master(addr).Watch(channel)
}

// master is the watcher of the master at addr, made at the first need.
func (w *ClusterWatcher) master(addr string) *Watcher {
	m := w.masters[addr]
	if m == nil {
		opt := w.opt
		opt.InitAddress = []string{addr}
		m = NewWatcher(opt, w.timeout, w.hooks)
		m.sharded = true
		w.masters[addr] = m
		for ch := range w.every {
			m.Watch(ch)
		}
	}
	return m
}

// follow moves the channels to the masters of the cluster's new view, and
// closes the watchers of servers that serve no slot now.
func (w *ClusterWatcher) follow() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	for _, addr := range w.c.masters() {
		w.master(addr) // a new master watches the channels of every master
	}
	for ch, was := range w.on {
		if addr := w.c.masterOf(hashslot.Of(ch)); addr != was {
			if m := w.masters[was]; m != nil {
				m.Unwatch(ch)
			}
			w.on[ch] = addr
			w.watchOn(addr, ch)
		}
	}
	var gone []*Watcher
	masters := w.c.masters()
	for addr, m := range w.masters {
		if !slices.Contains(masters, addr) {
			gone = append(gone, m)
			delete(w.masters, addr)
		}
	}
	w.mu.Unlock()
	for _, m := range gone {
		m.Close()
	}
}

// Close stops every master's watcher. No hook runs after it returns.
func (w *ClusterWatcher) Close() {
	w.mu.Lock()
	w.closed = true
	masters := w.masters
	w.masters = nil
	w.mu.Unlock()
	for _, m := range masters {
		m.Close()
	}
}
