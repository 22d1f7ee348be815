package engine

import (
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
	watchers []*node.Watcher
	channel  string // the engine's own; watched from the first wait (listening)
	wakeups  [lease.WakeSplit + 1]atomic.Uint64
	// keepFor: how long a kept place waits for its caller; as long as
	// the next caller after a local release waits to hear of it
	// (NodeTimeout/YieldDivisor).
	keepFor time.Duration

	mu sync.Mutex
	// byKey maps a resource's lock key to its actor, while it has one.
	byKey map[string]*resource
	// listening: the watchers were asked to listen on channel.
	listening bool
}

func newLines(e *Engine, channel string) *lines {
	ls := &lines{e: e, channel: channel, byKey: make(map[string]*resource), keepFor: e.cfg.NodeTimeout / lease.YieldDivisor}
	for i, addr := range e.cfg.Nodes {
		ls.watchers = append(ls.watchers, node.NewWatcher(e.cfg.clientOption(addr), e.cfg.ConnectTimeout, node.WatchHooks{
			Released: func(channel, msg string) { ls.released(i, channel, msg) },
			Watched:  func(channel string, ok bool) { ls.post(channel, &watched{i, ok}) },
			Lost:     func() { ls.lost(i) },
		}))
	}
	return ls
}

// join puts a caller of Acquire (or TryAcquire: try) in resource's line,
// and returns its turn; the caller awaits it, then reads its fields.
func (ls *lines) join(resource, key, value string, ttl time.Duration, try bool) *turn {
	t := &turn{since: time.Now(), value: value, ttl: ttl, try: try}
	ls.mu.Lock()
	r := ls.byKey[key]
	if r == nil {
		r = ls.newResource(resource, key)
		ls.byKey[key] = r
	}
	r.joining++
	ls.mu.Unlock()
	t.r = r
	r.inbox.Ask((*joining)(t))
	return t
}

// post posts msg to the actor of the resource whose release channel is
// channel, if it has one.
func (ls *lines) post(channel string, msg any) {
	ls.mu.Lock()
	r := ls.byKey[strings.TrimSuffix(channel, node.ReleasedSuffix)]
	ls.mu.Unlock()
	if r != nil {
		r.inbox.Post(msg)
	}
}

// released: a node announced a release on channel (hook of a watcher).
func (ls *lines) released(i int, channel, msg string) {
	ls.post(channel, &announced{i, node.ParseAnnouncement(msg)})
}

// lost: node i's watcher lost its connection; it will say when it listens
// again.
func (ls *lines) lost(i int) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, r := range ls.byKey {
		r.inbox.Post(&lost{i})
	}
}

// stats fills s's waiting figures.
func (ls *lines) stats(s *Stats) {
	ls.mu.Lock()
	for _, r := range ls.byKey {
		n := int(r.count.Load())
		if h := r.head.Load(); h != nil && h.held.Load() {
			n--
		}
		if n > 0 {
			if s.Waiters == nil {
				s.Waiters = make(map[string]int)
			}
			s.Waiters[r.name] = n
		}
	}
	ls.mu.Unlock()
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
	ls.mu.Lock()
	var done []chan struct{}
	for _, r := range ls.byKey {
		c := make(chan struct{})
		r.inbox.Post(&closing{c})
		done = append(done, c)
	}
	ls.mu.Unlock()
	for _, c := range done {
		<-c
	}
	for _, w := range ls.watchers {
		w.Close()
	}
}
