package engine

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redlease/redlease/actors"
	"github.com/redlease/redlease/lease"
	"github.com/redlease/redlease/node"
)

// resource is a resource actor: the one owner, in an engine, of what
// concerns a resource beyond a single lease. It keeps the line of the
// engine's callers of Acquire for the resource (first come, first served:
// only the head, the first, runs rounds on the nodes; the others wait in
// the engine until the head's lease ends or its acquire fails), the watch
// on the resource's release channel, what the last announcement said,
// and the place a release kept for the next caller. Its head's lease
// actor holds a turn as its lease.Line.
//
// Everything reaches it as a message in its one inbox, in order: callers
// joining, starting and leaving, the head's lease actor waiting and
// handing off, the watchers' announcements, its timers. It hands the
// announcements that concern the head's lease to the head's lease actor
// (a lease.Wake), which counts them with the votes in its own mailbox.
// Each lease keeps its own actor (a lease.Pool's) rather than live in
// this one: a held lease parks without an actor, in a body of ~400 B, and
// its rounds, votes and extensions run on whichever pooled actor is free,
// while the resource actor only keeps its line.
//
// The engine keeps only a map from resource key to actor (lines.shards).
// Its states are drawn in the package doc. Gone, it is out of the map, and
// kept for the next resource to come (recycle); the next caller of this
// one makes another. A join on its way (joining, counted under its
// shard's lock) keeps it from going.
//
// A head refused by another owner (another engine's lease) waits for that
// owner's release, which the release script announces on the resource's
// channel on every node; a watcher per node listens on the channels of
// the lines whose heads had to wait, from the first such wait until the
// line has been empty for lineLinger. The announcement names the next
// waiter and the one after it, in the order the callers of every engine
// came (a release queues its engine's next caller first, or a place for
// the caller to come: HandOff); while the resource is watched, a local
// release hands the turn on through that announcement too, so that the
// local next in line does not race ahead of the other engines' waiters.
// A release that names a waiter next may also grant it the key
// (node.Config.Channel): the engine's watchers listen on a channel of the
// engine's own from the first wait on, so that a node grants the
// engine's waiters only while it can tell them so.
type resource struct {
	ls    *lines
	key   string // its lock key (name: the resource's name)
	inbox actors.Inbox

	// life counts its recycles: a watcher's message found it in the map
	// in this life (see recycle). Lives pass only between a lookup and
	// its Post (a queued message holds a recycle off): 32 bits are many
	// more than can.
	life atomic.Uint32
	// joining: joins posted and not yet handled; raised under its
	// shard's lock, and read there before the actor leaves the map.
	joining atomic.Int32

	// Read by other goroutines: the callers in line (Line.Len, Stats),
	// the head (Stats), and whether an announcement can reach the head:
	// the watch was not asked yet, or some node answered or still may
	// (Line.Wait).
	head      atomic.Pointer[turn]
	count     atomic.Int32
	unwatched atomic.Bool // no watch asked yet
	canWake   atomic.Bool

	// The actor's own.
	isGone bool // out of the map: recycled once its inbox is empty
	// gated: callers of TryAcquire refused here wait for a gate, in its
	// shard's gates.
	gated bool
	// releasing: a local lease ended by a release the nodes are
	// announcing, and no announcement came since.
	releasing bool
	turns     []*turn // turns[0] is the head
	w         *watch  // from the line's first wait
	// next: the waiter the last announcement named next (another
	// engine's, or a head of this line), who goes before a new head;
	// heard: the holder (node.Digest) of the release it announced, so
	// that a head whose release was heard before its lease ended does not
	// wait for it again.
	next, heard string
}

// gate paces the callers of TryAcquire that the engine refuses without a
// round (the line has a caller). A refusal answered at once would cost
// its caller a microsecond, and a loop of callers retrying at once would
// never block: Go's scheduler notices a socket's answer only when a P
// has nothing to run (or every 10ms), so the engine's own work, a
// release, an extension, each waiting on a node's answer, would wait
// behind the loop for slices of 10ms at every hop, and time out. A
// refused caller therefore waits, in its turn, until the resource's gate
// opens: when the line's head leaves (the resource may be free here now),
// or when its timer fires, after refusalCost per refused caller waiting
// in the engine. However many callers loop, their refusals take a bounded
// share of the CPU; a lone refused caller waits about a loopback round
// trip.
type gate struct {
	refused []*turn     // settled when it opens
	timer   *time.Timer // posts it (opening) to open it
}

// refusalCost is how long a caller of TryAcquire refused in the engine
// waits per refused caller waiting in the engine: some ten times the CPU
// a refusal costs (its wake-up, its next join, its refusal: ~5us), so
// that refusals retried at once take about a tenth of a core at most,
// however many callers loop (1,000 callers on held resources: each
// refusal waits some 50ms), and a lone refused caller waits about a
// round trip to a node on loopback. The race detector makes all of it
// some ten times costlier, the wait too: at 50us there, 1,000 callers
// beside other tests made extensions miss the node timeout.
const refusalCost = 50 * time.Microsecond * raceSlowdown

// refuse: t, a caller of TryAcquire, is refused; it is told when the gate
// opens. The gate is kept in the shard, not in the actor: most resources
// never have one, and a held resource's actor stays in its size class.
func (r *resource) refuse(t *turn) {
	t.refused, t.gone = true, true
	sh := r.ls.shard(r.key)
	sh.mu.Lock()
	g := sh.gates[r]
	if g == nil {
		g = new(gate)
		wait := time.Duration(r.ls.refusedWaiting.Load()+1) * refusalCost
		g.timer = time.AfterFunc(wait, func() { r.inbox.Post((*opening)(g)) })
		if sh.gates == nil {
			sh.gates = make(map[*resource]*gate)
		}
		sh.gates[r], r.gated = g, true
	}
	g.refused = append(g.refused, t)
	sh.mu.Unlock()
	r.ls.refusedWaiting.Add(1)
}

// openGate tells the callers refused since the gate was made (g, or any
// when nil) that they are: the head left, or g's timer fired.
func (r *resource) openGate(g *gate) {
	if !r.gated {
		return
	}
	sh := r.ls.shard(r.key)
	sh.mu.Lock()
	cur := sh.gates[r]
	if g != nil && g != cur {
		sh.mu.Unlock()
		return // opened already
	}
	delete(sh.gates, r)
	r.gated = false
	sh.mu.Unlock()
	cur.timer.Stop()
	r.ls.refusedWaiting.Add(-int64(len(cur.refused)))
	for _, t := range cur.refused {
		t.settle()
	}
}

// watch is a resource actor's watch on its release channel, made at its
// line's first wait, with what only a watched line has: most resources
// are never waited for, and their actors stay small.
type watch struct {
	// acks: answers still to come of the first ask of every watcher; on:
	// watched now, by node.
	acks    int
	on      []bool
	channel string
	// idle: the line is empty, and forgotten (its watch dropped) unless a
	// caller joins before lineLinger.
	idle       *time.Timer
	idleSignal *forget
	// kept: the place in the nodes' queues that the last release kept for
	// the engine's next caller, until one comes.
	kept *kept
	// handedOn: when the last local release handed the line on to a
	// caller already waiting (it queued that one, not a place); the next
	// caller to join within keepFor, most often the worker that released,
	// waits as of then, as it would have in a kept place.
	handedOn time.Time
}

// name is the resource's name: its lock key without the prefix and the
// braces (see node.LockKey).
func (r *resource) name() string { return r.key[len(r.ls.e.cfg.KeyPrefix)+1 : len(r.key)-1] }

// listening reports whether some node listens on the release channel.
func (r *resource) listening() bool { return r.w != nil && slices.Contains(r.w.on, true) }

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

// turn is one Acquire call's place in its resource's line; the head's
// lease actor holds it as its lease.Line. The caller sets value, ttl and
// since before it joins; the actor may change them (a kept place, a
// hand-on) before it closes ready, after which the caller reads them.
type turn struct {
	r     *resource
	since time.Time     // when the caller joined the line
	value string        // its lease's owner value
	ttl   time.Duration // its lease's TTL
	// The head's lease actor, set by the caller before it posts started;
	// running (below): the actor has seen that message (only it reads st
	// and ref).
	st      *lease.State
	ref     lease.Ref
	handOff *node.HandOff // the final release HandOff sends
	// settled: the turn became the head, or was refused (settle); wake is
	// made by a caller that must wait for that (await).
	wake    atomic.Pointer[chan struct{}]
	settled atomic.Bool
	held    atomic.Bool // its lease is held
	// left: Done was called (the first call posts leaving); released: what
	// it said.
	left     atomic.Bool
	released bool
	// try: a caller of TryAcquire, refused (without a round: errHeldHere)
	// when the line has a caller already, and settled when the gate opens;
	// crashed: the actor panicked on its join. Either way its caller does
	// not lead.
	try, refused, crashed bool
	// Set when the turn becomes the head: wait for the announcement of
	// the previous lease's release before the first round; the line is
	// watched (its heads were refused by other engines lately).
	waitFirst, contended bool
	// queued: the previous lease's release put it in the nodes' queues
	// of waiters (HandOff).
	queued  bool
	running bool
	gone    bool // the actor took it out of the line
}

// The messages of a resource actor. Those about a turn are the turn
// itself, under another type: posting one allocates nothing.
type (
	joining   turn // a caller joins the line
	started   turn // the head's lease actor runs
	leaving   turn // Done: the turn leaves the line
	waitingOn turn // the head was refused by another owner (Line.Wait)
	handing   turn // the head's lease is released (Line.HandOff), and it leaves
	// announced: node announced a release on the resource's channel.
	announced struct {
		life uint32
		node int
		node.Announcement
	}
	// watched: node listens on the channel now (ok), or could not; lost:
	// node's watcher lost its connection (it says when it listens again).
	// The actor drops those of another life than its own (see recycle).
	watched struct {
		life uint32
		node int
		ok   bool
	}
	lost    struct{ node int }
	unkeep  struct{ k *kept } // keepFor passed since k was kept
	opening gate              // the gate's timer fired
	forget  struct{ _ byte }  // lineLinger passed since the line emptied (not zero-sized: each is its own)
	closing struct{ done chan struct{} }
	// inspect runs f on the actor (tests).
	inspect struct {
		f    func(*resource)
		done chan struct{}
	}
)

// newResource makes the actor of the resource with lock key key, or
// gives one that is gone a new life (recycle).
func (ls *lines) newResource(key string) *resource {
	r, _ := ls.gone.Get().(*resource)
	if r == nil {
		r = &resource{ls: ls}
		r.inbox.Init(ls.e.dispatch, r)
	}
	r.key = key
	r.unwatched.Store(true)
	return r
}

// Receive implements actors.Handler.
func (r *resource) Receive(msg any) {
	r.handle(msg)
	if r.isGone && r.inbox.Queued() == 0 {
		r.recycle()
	}
}

// recycle keeps an actor that is gone, its inbox empty, for the next
// resource to come: an uncontended cycle makes and drops one. Nothing of
// its former life can reach it then but what a lookup of the map found
// just before it went (announced, watched: of another life, dropped
// before the actor reads anything else of itself) and a watcher's lost
// (harmless: it waits for the watcher's word again). Its inbox stays as
// it is, as its run may still be ending.
func (r *resource) recycle() {
	r.life.Add(1)
	r.isGone = false
	r.turns = r.turns[:0]
	r.w, r.releasing, r.next, r.heard = nil, false, "", ""
	r.count.Store(0)
	r.head.Store(nil)
	r.canWake.Store(false)
	r.ls.gone.Put(r)
}

func (r *resource) handle(msg any) {
	switch m := msg.(type) {
	case *joining:
		r.join((*turn)(m))
	case *started:
		r.start((*turn)(m))
	case *leaving:
		r.leave((*turn)(m))
	case *waitingOn:
		r.waitOn()
	case *handing:
		r.handOff((*turn)(m))
	case *announced:
		if m.life == r.life.Load() {
			r.announced(m)
		}
	case *watched:
		if m.life == r.life.Load() {
			r.watched(m.node, m.ok)
		}
	case *lost:
		if r.w != nil {
			r.w.on[m.node] = false
			r.setCanWake()
		}
	case *opening:
		r.openGate((*gate)(m))
	case *unkeep:
		if r.w != nil && r.w.kept == m.k {
			r.unkeepNow()
		}
	case *forget:
		if r.w != nil && m == r.w.idleSignal {
			r.forget()
		}
	case *closing:
		r.openGate(nil)
		if r.w != nil && r.w.idle != nil {
			r.w.idle.Stop()
		}
		r.unkeepNow()
		close(m.done)
	case *inspect:
		m.f(r)
		close(m.done)
	}
}

// Crashed implements actors.Handler: a panic in the actor is a bug; it is
// logged, and the actor goes on with its next message, as it has nothing
// to restart from.
func (r *resource) Crashed(reason, msg any) {
	r.ls.e.cfg.Logger.Error("redlease: resource actor panicked", "resource", r.name(),
		"panic", reason, "message", fmt.Sprintf("%T", msg))
	if t, ok := msg.(*joining); ok && !t.settled.Load() {
		// Its caller waits for nothing else.
		(*turn)(t).crashed = true
		(*turn)(t).settle()
	}
}

// join puts a caller in the line; it is the head at once when the line
// was empty. A caller of TryAcquire (try) joins only an empty line, as its
// head, and takes neither a kept place nor a hand-on; it is refused when
// the line has a caller. The caller takes the turn's value as its lease's
// owner value: the place a release kept (HandOff) comes with one. A head that
// comes right after a local release that other engines' waiters are about
// to hear of waits to hear of it too: racing ahead of them would starve
// them.
func (r *resource) join(t *turn) {
	r.joining.Add(-1)
	if t.try && len(r.turns) > 0 {
		// Held or being acquired here: a round could only lose, or win
		// against a caller of this engine that came first.
		r.refuse(t)
		return
	}
	if r.w != nil {
		r.rejoin(t)
	}
	r.turns = append(r.turns, t)
	r.count.Store(int32(len(r.turns)))
	if len(r.turns) == 1 {
		r.lead(t)
		return
	}
	r.ls.e.publish(Event{Kind: Waiting, Resource: r.name()})
}

// rejoin: a caller joins a watched line, which it may have left moments
// ago (its worker released, and acquires again).
func (r *resource) rejoin(t *turn) {
	w := r.w
	if w.idle != nil {
		w.idle.Stop()
		w.idle, w.idleSignal = nil, nil
	}
	if t.try {
		return
	}
	if !w.handedOn.IsZero() {
		if t.since.Sub(w.handedOn) < r.ls.keepFor {
			t.since = w.handedOn
		}
		w.handedOn = time.Time{}
	}
	if w.kept != nil && w.kept.ttl == t.ttl && node.MetaOf(w.kept.value) == node.MetaOf(t.value) {
		// The place a release kept: queued already, by when the release
		// was sent. Only for a lease of the TTL it was kept with, since a
		// release may grant the place the key with that TTL, and of its
		// meta, which its value carries. (A caller with another leaves it
		// to its timer.)
		k := r.takeKept()
		t.value, t.since, t.queued = k.value, k.since, true
	}
}

// lead makes t the head.
func (r *resource) lead(t *turn) {
	t.waitFirst, t.contended = r.releasing || r.next != "", r.w != nil
	r.head.Store(t)
	t.settle()
}

// settle tells t's caller that t is the head, or refused: at once if it
// waits (await), else when it looks.
func (t *turn) settle() {
	t.settled.Store(true)
	if c := t.wake.Load(); c != nil {
		close(*c)
	}
}

// start: the head's lease actor runs. A head that was to wait for an
// announcement that already came (one that came before it had an actor)
// is told at once what it said.
func (r *resource) start(t *turn) {
	t.running = true
	if t.waitFirst && !r.releasing && !t.gone {
		r.wake(t, lease.WakeRelease, "", r.next, "", -1, false)
	}
}

// wake posts the head's lease actor a Wake and, when the actor was idle,
// runs it here: the head's next round is what the other engines' waiters
// are waiting for, not worth a hand-off to a dispatcher worker.
func (r *resource) wake(t *turn, cause lease.WakeCause, holder, next, standby string, node int, granted bool) {
	if t.ref.Offer(&lease.Wake{State: t.st, Cause: cause, Holder: holder, Next: next, Standby: standby, Node: node, Granted: granted}) {
		t.ref.Run()
	}
}

// waitOn: the head was refused by another owner. The first time in a
// line, the watchers start listening on its channel; once they all
// answered, the head looks again (WakeRecheck), since a release
// announced before they listened would be missed.
func (r *resource) waitOn() {
	if r.w != nil {
		return
	}
	ls := r.ls
	r.w = &watch{acks: len(ls.watchers), on: make([]bool, len(ls.watchers)), channel: r.key + node.ReleasedSuffix}
	r.setCanWake()
	r.unwatched.Store(false)
	listen := ls.listening.CompareAndSwap(false, true)
	if testHookBeforeWatch != nil {
		testHookBeforeWatch()
	}
	for _, w := range ls.watchers {
		if listen {
			w.Watch(ls.channel) // for as long as the watcher lives
		}
		w.Watch(r.w.channel)
	}
}

// testHookBeforeWatch, if set, runs when a line's watch starts, before
// any watcher is asked.
var testHookBeforeWatch func()

// setCanWake publishes whether an announcement can reach the head.
func (r *resource) setCanWake() {
	r.canWake.Store(r.w.acks > 0 || r.listening())
}

// handOff sends the head's final release, queueing the caller after it
// in the line (node.HandOff.Successor). With nobody after it, a release
// that is announced (the resource was contended lately) queues a place
// for the engine's next caller instead (kept), since that caller is most
// often the releasing worker, back at once. The successor's leave, should
// it leave, comes through this inbox after: it reaches the nodes after
// the release that queued it.
func (r *resource) handOff(t *turn) {
	c := t.handOff
	switch {
	case len(r.turns) == 0 || r.turns[0] != t:
	case len(r.turns) > 1:
		s := r.turns[1]
		s.queued = true
		if r.w != nil {
			r.w.handedOn = time.Now()
		}
		queue(c, s.since, s.value, s.ttl, false)
	case r.listening():
		k := r.w.kept
		if k == nil {
			// For a caller like the releasing one: its TTL, its meta.
			k = &kept{value: ownerValue(node.MetaOf(t.value)), since: time.Now(), ttl: t.ttl}
			k.timer = time.AfterFunc(r.ls.keepFor, func() { r.inbox.Post(&unkeep{k}) })
			r.w.kept = k
		}
		// Named, never granted: this process may die before its caller
		// comes, and nobody would release the key then.
		queue(c, k.since, k.value, k.ttl, true)
	}
	for _, pid := range r.ls.e.pids {
		r.ls.e.system.Root.Send(pid, c)
	}
	r.leave(t)
}

// queue has the release c queue a successor.
func queue(c *node.HandOff, since time.Time, value string, ttl time.Duration, ungranted bool) {
	c.Successor, c.SuccessorSince = value, strconv.FormatInt(since.UnixMicro(), 10)
	c.SuccessorTTL, c.Ungranted = ttl, ungranted
}

// leave takes t out of the line; the next in line becomes the head.
func (r *resource) leave(t *turn) {
	if t.gone {
		return
	}
	t.gone = true
	if t.queued && !t.running {
		// A release queued it on the nodes, and it leaves before it had
		// a lease actor to take itself out: nobody else would.
		r.sendLeave(t.value, t.ttl)
	}
	i := slices.Index(r.turns, t)
	r.turns = slices.Delete(r.turns, i, i+1)
	r.count.Store(int32(len(r.turns)))
	if i == 0 {
		r.openGate(nil)
		r.head.Store(nil)
		r.releasing = t.released && r.listening() && r.heard != node.Digest(t.value)
	}
	switch {
	case len(r.turns) == 0 && r.w != nil:
		s := &forget{}
		r.w.idle, r.w.idleSignal = time.AfterFunc(lineLinger, func() { r.inbox.Post(s) }), s
	case len(r.turns) == 0:
		r.stopIfIdle()
	case i == 0:
		r.lead(r.turns[0])
	}
}

// stopIfIdle takes the actor out of the engine's map, unless a caller is
// on the way: it is gone.
func (r *resource) stopIfIdle() bool {
	sh := r.ls.shard(r.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if r.joining.Load() > 0 || sh.byKey[r.key] != r {
		return false
	}
	delete(sh.byKey, r.key)
	r.isGone = true
	return true
}

// forget drops a line that stayed empty for lineLinger, and its watch.
func (r *resource) forget() {
	r.w.idle, r.w.idleSignal = nil, nil
	if len(r.turns) > 0 || !r.stopIfIdle() {
		return // joined meanwhile
	}
	r.unkeepNow()
	for _, w := range r.ls.watchers {
		w.Unwatch(r.w.channel)
	}
}

// sendLeave takes value out of the nodes' queues of waiters. Like a
// lease actor's leave, it is announced where the key is free: a release
// may have named it next.
func (r *resource) sendLeave(value string, ttl time.Duration) {
	c := &node.Leave{Request: node.Request{Key: r.key, Value: value}, TTL: ttl}
	for _, pid := range r.ls.e.pids {
		r.ls.e.system.Root.Send(pid, c)
	}
}

// unkeepNow leaves the kept place at once.
func (r *resource) unkeepNow() {
	if k := r.takeKept(); k != nil {
		r.sendLeave(k.value, k.ttl)
	}
}

// takeKept takes the kept place, if any, off its timer.
func (r *resource) takeKept() *kept {
	if r.w == nil || r.w.kept == nil {
		return nil
	}
	k := r.w.kept
	k.timer.Stop()
	r.w.kept = nil
	return k
}

// announced: a node announced a release. Every node announces it: the
// head's lease actor tells the one that matters (see lease.Wake).
func (r *resource) announced(m *announced) {
	r.releasing, r.next, r.heard = false, m.Next, m.Holder
	if len(r.turns) > 0 && r.turns[0].running && !r.turns[0].held.Load() {
		r.wake(r.turns[0], lease.WakeRelease, m.Holder, m.Next, m.Standby, m.node, m.Granted)
	}
}

// watched: node i listens on the channel now (ok), or could not.
func (r *resource) watched(i int, ok bool) {
	w := r.w
	if w == nil {
		return
	}
	recheck := ok && !w.on[i] && w.acks == 0 // back after a drop
	w.on[i] = ok
	if w.acks > 0 {
		w.acks--
		recheck = w.acks == 0
	}
	r.setCanWake()
	if len(r.turns) == 0 {
		return
	}
	if head := r.turns[0]; recheck && head.running && !head.held.Load() {
		r.wake(head, lease.WakeRecheck, "", "", "", -1, false)
	}
}

// The turn's methods below run on the caller's goroutine or on its lease
// actor's; each posts the resource actor a message and, when the actor was
// idle, runs it there and then (Inbox.Ask): the actor's work is a few
// field updates, cheaper than a dispatcher worker's wake-up.

// await waits for t to become the head; it leaves the line when ctx ends
// or the engine closes first.
func (t *turn) await(ctx context.Context, closing <-chan struct{}) error {
	if t.settled.Load() {
		return nil // most often: the caller ran the actor (Ask)
	}
	c := make(chan struct{})
	t.wake.Store(&c)
	if t.settled.Load() {
		return nil // settled meanwhile, perhaps without seeing c
	}
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		t.Done(false)
		return contextError(ctx)
	case <-closing:
		t.Done(false)
		return ErrClosed
	}
}

// run tells the actor that the head's lease actor, st's, runs. A caller
// of TryAcquire need not: its lease never waits to be woken, nor is it
// ever queued.
func (t *turn) run(st *lease.State, ref lease.Ref) {
	if t.try {
		return
	}
	t.st, t.ref = st, ref
	t.r.inbox.Ask((*started)(t))
}

// Wait implements lease.Line: the head was refused by another owner.
func (t *turn) Wait(holder string, until time.Time) bool {
	r := t.r
	r.ls.e.publish(Event{Kind: Waiting, Resource: r.name(), Until: until})
	wakes := r.unwatched.Load() || r.canWake.Load()
	r.inbox.Ask((*waitingOn)(t))
	return wakes
}

// Woke implements lease.Line.
func (t *turn) Woke(cause lease.WakeCause) {
	t.r.ls.wakeups[cause].Add(1)
	t.r.ls.e.publish(Event{Kind: Woken, Resource: t.r.name(), Wake: cause})
}

// Len implements lease.Line.
func (t *turn) Len() int { return int(t.r.count.Load()) }

// HandOff implements lease.Line: one message, the hand-off and the leave
// (a Done that follows is a no-op).
func (t *turn) HandOff(c *node.HandOff, released bool) {
	t.handOff = c
	if !t.left.CompareAndSwap(false, true) {
		return // left already: nobody queues after it, nor is it in line
	}
	t.released = released
	t.r.inbox.Ask((*handing)(t))
}

// Done implements lease.Line, and leaves the line for a caller whose
// context ended first: the next in line becomes the head.
func (t *turn) Done(released bool) {
	if t.left.CompareAndSwap(false, true) {
		t.released = released
		t.r.inbox.Ask((*leaving)(t))
	}
}

// inspect runs f on the actor of the resource with lock key key, if it
// has one, and reports whether it did (tests).
func (ls *lines) inspect(key string, f func(*resource)) bool {
	r, _ := ls.find(key)
	if r == nil {
		return false
	}
	done := make(chan struct{})
	r.inbox.Post(&inspect{f, done})
	<-done
	return true
}
