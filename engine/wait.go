package engine

import (
	"context"
	"slices"
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

// lines are the engine's waiters, by resource. The callers of Acquire for
// one resource form a line, first come first served: only the first, the
// head, runs rounds on the nodes; the others wait in the engine until the
// head's lease ends or its acquire fails. A head refused by another owner
// (another engine's lease) waits for that owner's release, which the
// release script announces on the resource's channel on every node; a
// watcher per node listens on the channels of the lines whose heads had to
// wait, from the first such wait until the line empties. The
// announcement names the next waiter and the one after it, in the order
// the callers of every engine came (a release queues its engine's next
// caller first, or a place for the caller to come: HandOff); while the
// resource is watched, a local release hands the turn on through that
// announcement too, so that the local next in line does not race ahead of
// the other engines' waiters.
//
// A release that names a waiter next may also grant it the key
// (node.Config.Channel): the engine's watchers listen on a channel of the
// engine's own from the first wait on, so that a node grants the engine's
// waiters only while it can tell them so.
type lines struct {
	e        *Engine
	watchers []*node.Watcher
	channel  string // the engine's own; watched from the first wait (listening)
	// listening: the watchers were asked to listen on channel.
	listening bool
	wakeups   [lease.WakeSplit + 1]atomic.Uint64
	// keepFor: how long a kept place waits for its caller; as long as
	// the next caller after a local release waits to hear of it
	// (NodeTimeout/YieldDivisor).
	keepFor time.Duration

	mu    sync.Mutex
	byKey map[string]*line
}

type line struct {
	resource, key, channel string  // channel: once watched
	turns                  []*turn // turns[0] is the head
	// watch: the channel was asked of every watcher; acks: answers still
	// to come of that first ask; on: watched now, by node.
	watch bool
	acks  int
	on    []bool
	// releasing: a local lease ended by a release the nodes are
	// announcing, and no announcement came since; next: the waiter the
	// last one named next (another engine's, or a head of this line), who
	// goes before a new head.
	releasing bool
	next      string
	// heard: the holder (node.Digest) of the last announced release, so
	// that a head whose release was heard before its lease ended does
	// not wait for it again.
	heard string
	// idle: the line is empty, and forgotten (its watch dropped) unless a
	// caller joins before lineLinger.
	idle *time.Timer
	// kept: the place in the nodes' queues that the last release kept for
	// the engine's next caller, until one comes.
	kept *kept
	// handedOn: when the last local release handed the line on to a
	// caller already waiting (it queued that one, not a place); the next
	// caller to join within keepFor, most often the worker that released,
	// waits as of then, as it would have in a kept place.
	handedOn time.Time
}

// kept is a place in the nodes' queues of waiters that a release took for
// the next caller of its engine's line before that caller came (HandOff).
// A service's worker that releases and acquires again is the usual caller
// of a busy resource: it takes the place as it comes, where it would
// otherwise queue itself (one more command per node) after its release.
// Unclaimed for keepFor, the place is left, so that the waiters behind it
// are not held up for a caller who does not come. A release names the
// place but never grants it the key: should the process die first, the
// key would block the resource for a TTL.
type kept struct {
	value string    // the owner value the caller will take
	since time.Time // when the release queued it
	ttl   time.Duration
	timer *time.Timer // leaves it once keepFor passes unclaimed
}

// lineLinger keeps a watched line that emptied, so that a caller who comes
// back soon, the usual pattern of a busy resource, neither subscribes
// again nor races ahead of the other engines' waiters (see join).
const lineLinger = time.Second

// turn is one Acquire call's place in its line; the head's lease actor
// holds it as its lease.Line.
type turn struct {
	ls    *lines
	line  *line
	since time.Time     // when the caller joined the line
	value string        // its lease's owner value
	ttl   time.Duration // its lease's TTL
	ready chan struct{} // closed when the turn becomes the head
	// Set when the turn becomes the head: wait for the announcement of
	// the previous lease's release before the first round; the line is
	// watched (its heads were refused by other engines lately).
	waitFirst, contended bool
	// queued: the previous lease's release put it in the nodes' queues
	// of waiters (HandOff).
	queued bool
	st     *lease.State // the head's lease actor, once started
	ref    lease.Ref
	held   atomic.Bool // its lease is held
	gone   bool
}

func newLines(e *Engine, channel string) *lines {
	ls := &lines{e: e, channel: channel, byKey: make(map[string]*line), keepFor: e.cfg.NodeTimeout / YieldDivisor}
	for i, addr := range e.cfg.Nodes {
		ls.watchers = append(ls.watchers, node.NewWatcher(e.cfg.clientOption(addr), e.cfg.ConnectTimeout, node.WatchHooks{
			Released: func(channel, digest string) { ls.released(i, channel, digest) },
			Watched:  func(channel string, ok bool) { ls.watched(i, channel, ok) },
			Lost:     func() { ls.lost(i) },
		}))
	}
	return ls
}

// join puts a caller of Acquire in resource's line; it is the head at
// once when the line was empty, else it waits for ready. The caller takes
// the turn's value as its lease's owner value: the place a release kept
// (HandOff) comes with one. A head that comes right after a local release
// that other engines' waiters are about to hear of waits to hear of it
// too: racing ahead of them would starve them.
func (ls *lines) join(resource, key, value string, ttl time.Duration) *turn {
	since := time.Now()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l := ls.byKey[key]
	if l == nil {
		l = &line{resource: resource, key: key}
		ls.byKey[key] = l
	}
	if l.idle != nil {
		l.idle.Stop()
		l.idle = nil
	}
	if !l.handedOn.IsZero() {
		if since.Sub(l.handedOn) < ls.keepFor {
			since = l.handedOn
		}
		l.handedOn = time.Time{}
	}
	t := &turn{ls: ls, line: l, since: since, value: value, ttl: ttl}
	if l.kept != nil && l.kept.ttl == ttl {
		// The place a release kept: queued already, by when the release
		// was sent. Only for a lease of the TTL it was kept with: a
		// release may grant the place the key with that TTL. (A caller
		// with another leaves it to its timer.)
		k := l.takeKept()
		t.value, t.since, t.queued = k.value, k.since, true
	}
	if len(l.turns) > 0 {
		t.ready = make(chan struct{})
	} else {
		t.waitFirst, t.contended = l.releasing || l.next != "", l.watch
	}
	l.turns = append(l.turns, t)
	return t
}

// await waits for t to become the head; it leaves the line when ctx ends
// or the engine closes first.
func (t *turn) await(ctx context.Context, closing <-chan struct{}) error {
	if t.ready == nil {
		return nil
	}
	t.ls.e.publish(Event{Kind: Waiting, Resource: t.line.resource})
	select {
	case <-t.ready:
		return nil
	case <-ctx.Done():
		t.Done(false)
		return contextError(ctx)
	case <-closing:
		t.Done(false)
		return ErrClosed
	}
}

// started tells the line which lease actor runs the head's rounds. A head
// that was to wait for an announcement that already came (one that came
// before it had an actor) is told at once what it said.
func (t *turn) started(st *lease.State, ref lease.Ref) {
	ls := t.ls
	ls.mu.Lock()
	t.st, t.ref = st, ref
	var run lease.Ref
	if l := t.line; t.waitFirst && !l.releasing {
		// What the last announcement said, for a head that came after it
		// (a head still to hear one is woken by it, in released).
		run = ls.wake(t, lease.WakeRelease, "", l.next, "", -1, false)
	}
	ls.mu.Unlock()
	run.Run()
}

// wake posts the head's actor a Wake, under ls.mu, so that Wakes reach
// the actors in the order the announcements came. An actor that was idle
// is returned, to be run once ls.mu is let go (Ref.Run, a no-op on the
// zero Ref): on the goroutine that heard the announcement, rather than
// handed to a dispatcher worker, since the head's next round is what the
// other engines' waiters are waiting for.
func (ls *lines) wake(t *turn, cause lease.WakeCause, holder, next, standby string, node int, granted bool) lease.Ref {
	if t.ref.Offer(&lease.Wake{State: t.st, Cause: cause, Holder: holder, Next: next, Standby: standby, Node: node, Granted: granted}) {
		return t.ref
	}
	return lease.Ref{}
}

// Wait implements lease.Line: the head was refused by another owner. The
// first time in a line, the watchers start listening on its channel; once
// they all answered, the head looks again (WakeRecheck), since a release
// announced before they listened would be missed.
func (t *turn) Wait(holder string, until time.Time) bool {
	ls, l := t.ls, t.line
	ls.e.publish(Event{Kind: Waiting, Resource: l.resource, Until: until})
	ls.mu.Lock()
	first := !l.watch
	if first {
		l.watch, l.acks, l.on = true, len(ls.watchers), make([]bool, len(ls.watchers))
		l.channel = l.key + node.ReleasedSuffix
	}
	listen := !ls.listening
	ls.listening = true
	wakes := l.acks > 0 || slices.Contains(l.on, true)
	ls.mu.Unlock()
	if first {
		if testHookBeforeWatch != nil {
			testHookBeforeWatch()
		}
		for _, w := range ls.watchers {
			if listen {
				w.Watch(ls.channel) // for as long as the watcher lives
			}
			w.Watch(l.channel)
		}
	}
	return wakes
}

// testHookBeforeWatch, if set, runs when a line's watch starts, before
// any watcher is asked.
var testHookBeforeWatch func()

// Woke implements lease.Line.
func (t *turn) Woke(cause lease.WakeCause) {
	t.ls.wakeups[cause].Add(1)
	t.ls.e.publish(Event{Kind: Woken, Resource: t.line.resource, Wake: cause})
}

// Len implements lease.Line.
func (t *turn) Len() int {
	t.ls.mu.Lock()
	defer t.ls.mu.Unlock()
	return len(t.line.turns)
}

// HandOff implements lease.Line. r sends messages to the node actors
// under ls.mu, which the successor's leave (Done) needs too. With nobody
// after it in the line, a release that is announced (the resource was
// contended lately) queues a place for the engine's next caller instead
// (kept), since that caller is most often the releasing worker, back at
// once.
func (t *turn) HandOff(r lease.Releaser) {
	ls, l := t.ls, t.line
	ls.mu.Lock()
	defer ls.mu.Unlock()
	switch {
	case len(l.turns) == 0 || l.turns[0] != t:
		r.ReleaseQueueing(time.Time{}, "", 0, false)
	case len(l.turns) > 1:
		s := l.turns[1]
		s.queued = true
		if l.watch {
			l.handedOn = time.Now()
		}
		r.ReleaseQueueing(s.since, s.value, s.ttl, false)
	case l.watch && slices.Contains(l.on, true):
		k := l.kept
		if k == nil {
			k = &kept{value: newValue(), since: time.Now(), ttl: t.ttl}
			k.timer = time.AfterFunc(ls.keepFor, func() { ls.unkeep(l, k) })
			l.kept = k
		}
		// Named, never granted: this process may die before its caller
		// comes, and nobody would release the key then.
		r.ReleaseQueueing(k.since, k.value, k.ttl, true)
	default:
		r.ReleaseQueueing(time.Time{}, "", 0, false)
	}
}

// unkeep leaves the place k that no caller took (see kept), unless one
// took it meanwhile.
func (ls *lines) unkeep(l *line, k *kept) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l.kept == k {
		ls.unkeepNow(l)
	}
}

// leave takes value out of the nodes' queues of waiters for key, under
// ls.mu (see HandOff). Like a lease actor's leave, it is announced where
// the key is free: a release may have named it next.
func (ls *lines) leave(key, value string, ttl time.Duration) {
	r := node.Request{Key: key, Value: value}
	for _, pid := range ls.e.pids {
		ls.e.system.Root.Send(pid, &node.Leave{Request: r, TTL: ttl})
	}
}

// Done implements lease.Line, and leaves the line for a caller whose
// context ended first: the next in line becomes the head.
func (t *turn) Done(released bool) {
	ls, l := t.ls, t.line
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if t.gone {
		return
	}
	t.gone = true
	if t.queued && !t.ref.Started() {
		// A release queued it on the nodes, and it leaves before it had
		// a lease actor to take itself out: nobody else would.
		ls.leave(l.key, t.value, t.ttl)
	}
	i := slices.Index(l.turns, t)
	l.turns = slices.Delete(l.turns, i, i+1)
	if i == 0 {
		l.releasing = released && slices.Contains(l.on, true) && l.heard != node.Digest(t.value)
	}
	switch {
	case len(l.turns) == 0 && l.watch:
		l.idle = time.AfterFunc(lineLinger, func() { ls.forget(l) })
	case len(l.turns) == 0:
		delete(ls.byKey, l.key)
	case i == 0:
		next := l.turns[0]
		next.waitFirst, next.contended = l.releasing || l.next != "", l.watch
		close(next.ready)
	}
}

// forget drops a line that stayed empty for lineLinger, and its watch.
func (ls *lines) forget(l *line) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if len(l.turns) > 0 || ls.byKey[l.key] != l {
		return // joined meanwhile
	}
	delete(ls.byKey, l.key)
	ls.unkeepNow(l)
	for _, w := range ls.watchers {
		w.Unwatch(l.channel)
	}
}

// unkeepNow leaves l's kept place at once, under ls.mu.
func (ls *lines) unkeepNow(l *line) {
	if k := l.takeKept(); k != nil {
		ls.leave(l.key, k.value, k.ttl)
	}
}

// takeKept takes l's kept place, if any, off its timer; under ls.mu.
func (l *line) takeKept() *kept {
	k := l.kept
	if k != nil {
		k.timer.Stop()
		l.kept = nil
	}
	return k
}

// released: a node announced a release on channel (hook of a watcher).
// Every node announces it: the head's actor tells the one that matters
// (see lease.Wake).
func (ls *lines) released(i int, channel, msg string) {
	a := node.ParseAnnouncement(msg)
	var run lease.Ref
	defer func() { run.Run() }() // after ls.mu is let go
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l := ls.byKey[strings.TrimSuffix(channel, node.ReleasedSuffix)]
	if l == nil {
		return
	}
	l.releasing, l.next, l.heard = false, a.Next, a.Holder
	if len(l.turns) > 0 && l.turns[0].ref.Started() && !l.turns[0].held.Load() {
		run = ls.wake(l.turns[0], lease.WakeRelease, a.Holder, a.Next, a.Standby, i, a.Granted)
	}
}

// watched: node i listens on channel now (ok), or could not.
func (ls *lines) watched(i int, channel string, ok bool) {
	var run lease.Ref
	defer func() { run.Run() }() // after ls.mu is let go
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l := ls.byKey[strings.TrimSuffix(channel, node.ReleasedSuffix)]
	if l == nil || !l.watch {
		return
	}
	recheck := ok && !l.on[i] && l.acks == 0 // back after a drop
	l.on[i] = ok
	if l.acks > 0 {
		l.acks--
		recheck = l.acks == 0
	}
	if len(l.turns) == 0 {
		return
	}
	if head := l.turns[0]; recheck && head.ref.Started() && !head.held.Load() {
		run = ls.wake(head, lease.WakeRecheck, "", "", "", -1, false)
	}
}

// lost: node i's watcher lost its connection; it will say when it listens
// again.
func (ls *lines) lost(i int) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, l := range ls.byKey {
		if l.watch {
			l.on[i] = false
		}
	}
}

// stats fills s's waiting figures.
func (ls *lines) stats(s *Stats) {
	ls.mu.Lock()
	for _, l := range ls.byKey {
		n := len(l.turns)
		if n > 0 && l.turns[0].held.Load() {
			n--
		}
		if n > 0 {
			if s.Waiters == nil {
				s.Waiters = make(map[string]int)
			}
			s.Waiters[l.resource] = n
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

func (ls *lines) close() {
	ls.mu.Lock()
	for _, l := range ls.byKey {
		if l.idle != nil {
			l.idle.Stop()
		}
		ls.unkeepNow(l)
	}
	ls.mu.Unlock()
	for _, w := range ls.watchers {
		w.Close()
	}
}
