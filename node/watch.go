package node

import (
	"context"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// WatchHooks is what a Watcher tells its owner. The hooks run on the
// watcher's goroutines, Released concurrently with the others, and must
// not block.
type WatchHooks struct {
	// Released: a release was announced on channel; msg is what the
	// release published (ParseAnnouncement reads it).
	Released func(channel, msg string)
	// Watched: a Watch took effect (ok), or could not (the node cannot be
	// reached, or refuses SUBSCRIBE); it is retried after a reconnection.
	Watched func(channel string, ok bool)
	// Lost: the connection dropped, so announcements may have been
	// missed; the watcher reconnects and watches every channel again,
	// calling Watched for each.
	Lost func()
	// Refused, if set: the node answered SUBSCRIBE with err (an ACL
	// without pub/sub, say), not a dropped connection.
	Refused func(err error)
}

// Watcher listens on one node for the announcements of releases
// (Announcement) on the channels it is told to watch. It has a
// connection of its own (a subscribed connection cannot carry commands),
// made when the first channel is watched and closed when the last one is
// unwatched, and it never delays the node actor: an announcement only
// wakes a waiter, which then asks the nodes in an ordinary round.
type Watcher struct {
	opt     rueidis.ClientOption
	timeout time.Duration
	hooks   WatchHooks
	// sharded: a Redis Cluster master's watcher (ClusterWatcher), which
	// listens on release channels with SSUBSCRIBE.
	sharded bool

	mu      sync.Mutex
	ops     []watchOp
	closed  bool
	signal  chan struct{} // cap 1: ops are waiting
	stopped chan struct{} // closed when the loop returned
	started bool
}

type watchOp struct {
	channel string
	watch   bool // false: unwatch
}

// NewWatcher returns a watcher for the node opt reaches; each command it
// sends waits at most timeout.
func NewWatcher(opt rueidis.ClientOption, timeout time.Duration, hooks WatchHooks) *Watcher {
	opt.DisableCache = true // no CLIENT TRACKING on this connection
	opt.ForceSingleClient = true
	opt.ClientName = "redlease-watch"
	return &Watcher{opt: opt, timeout: timeout, hooks: hooks,
		signal: make(chan struct{}, 1), stopped: make(chan struct{})}
}

// Watch starts listening on channel; Watched tells when it took effect.
// It never blocks.
func (w *Watcher) Watch(channel string) { w.post(watchOp{channel: channel, watch: true}) }

// Unwatch stops listening on channel. It never blocks.
func (w *Watcher) Unwatch(channel string) { w.post(watchOp{channel: channel}) }

func (w *Watcher) post(op watchOp) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.ops = append(w.ops, op)
	if !w.started {
		w.started = true
		go w.loop()
	}
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

// Close stops the watcher and closes its connection. No hook runs after
// it returns.
func (w *Watcher) Close() {
	w.mu.Lock()
	w.closed = true
	started := w.started
	w.mu.Unlock()
	if !started {
		return
	}
	select {
	case w.signal <- struct{}{}:
	default:
	}
	<-w.stopped
}

// loop owns the connection: it applies the ops in order, redials after a
// drop, and watches every channel again on the new connection.
func (w *Watcher) loop() {
	defer close(w.stopped)
	want := make(map[string]bool) // the channels to watch: whether they are
	var s *subscriber
	defer func() {
		if s != nil {
			s.close()
		}
	}()
	redial := time.NewTimer(0)
	defer redial.Stop()
	for {
		var lost <-chan error
		if s != nil {
			lost = s.lost
		}
		select {
		case <-w.signal:
		case <-lost:
			s.close()
			s = nil
			w.hooks.Lost()
			redial.Reset(0)
			continue
		case <-redial.C:
			if s == nil && len(want) > 0 {
				if s = w.dial(); s == nil {
					redial.Reset(redialEvery)
				} else {
					w.subscribe(s, keys(want), want)
				}
			}
			continue
		}
		w.mu.Lock()
		ops, closed := w.ops, w.closed
		w.ops = nil
		w.mu.Unlock()
		if closed {
			return
		}
		var added []string
		for _, op := range ops {
			watched, wanted := want[op.channel]
			switch {
			case op.watch && !wanted:
				want[op.channel] = false
				added = append(added, op.channel)
			case op.watch: // wanted already: say so again
				w.hooks.Watched(op.channel, s != nil && watched)
			case wanted:
				delete(want, op.channel)
				if s != nil {
					b := s.client.B()
					cmd := b.Unsubscribe().Channel(op.channel).Build()
					if w.shards(op.channel) {
						cmd = b.Sunsubscribe().Channel(op.channel).Build()
					}
					s.do(w.timeout, cmd)
				}
			}
		}
		switch {
		case len(want) == 0 && s != nil:
			s.close() // nothing to watch: no connection kept
			s = nil
		case s == nil && len(added) > 0:
			s = w.dial()
			if s == nil {
				redial.Reset(redialEvery)
			}
			added = keys(want)
		}
		w.subscribe(s, added, want)
	}
}

// subscribe watches channels on s, notes in want whether it did and tells
// Watched of each; with s nil (no connection) each is not watched.
func (w *Watcher) subscribe(s *subscriber, channels []string, want map[string]bool) {
	if len(channels) == 0 {
		return
	}
	ok := make([]bool, len(channels))
	if s != nil {
		// SUBSCRIBE takes them all; SSUBSCRIBE only channels of one slot.
		var plain []string
		var cmds rueidis.Commands
		b := s.client.B()
		for _, ch := range channels {
			if w.shards(ch) {
				cmds = append(cmds, b.Ssubscribe().Channel(ch).Build())
			} else {
				plain = append(plain, ch)
			}
		}
		if len(plain) > 0 {
			cmds = append(cmds, b.Subscribe().Channel(plain...).Build())
		}
		ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
		res := s.conn.DoMulti(ctx, cmds...)
		cancel()
		sharded := 0
		for i, ch := range channels {
			r := res[len(res)-1] // the SUBSCRIBE
			if w.shards(ch) {
				r = res[sharded]
				sharded++
			}
			err := r.Error()
			if re, server := rueidis.IsRedisErr(err); server && !movedSlot(re) && w.hooks.Refused != nil {
				w.hooks.Refused(err)
			}
			ok[i] = err == nil
		}
	}
	for i, ch := range channels {
		want[ch] = ok[i]
		w.hooks.Watched(ch, ok[i])
	}
}

// shards reports whether the watcher listens on channel with SSUBSCRIBE:
// a release channel, on a Redis Cluster master.
func (w *Watcher) shards(channel string) bool {
	return w.sharded && isReleaseChannel(channel)
}

// subscriber is one subscribed connection.
type subscriber struct {
	client rueidis.Client
	conn   rueidis.DedicatedClient
	free   func()
	lost   <-chan error
}

func (w *Watcher) dial() *subscriber {
	client, err := rueidis.NewClient(w.opt)
	if err != nil {
		return nil
	}
	conn, free := client.Dedicate()
	lost := conn.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(m rueidis.PubSubMessage) {
		w.hooks.Released(m.Channel, m.Message)
	}})
	return &subscriber{client: client, conn: conn, free: free, lost: lost}
}

func (s *subscriber) do(timeout time.Duration, cmd rueidis.Completed) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.conn.Do(ctx, cmd).Error()
}

func (s *subscriber) close() {
	s.free()
	s.client.Close()
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
