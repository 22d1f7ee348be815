package node

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/redis/rueidis"

	"github.com/redlease/redlease/actors"
	"github.com/redlease/redlease/internal/hashslot"
	"github.com/redlease/redlease/internal/redisinfo"
	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/internal/testwait"
)

// clusterHarness runs a cluster node over a real Redis Cluster and
// collects its votes.
type clusterHarness struct {
	t       *testing.T
	cluster *redisproc.RedisCluster
	node    *Node
	system  *actor.ActorSystem
	inbox   *actor.PID
	votes   chan *Vote
}

func newClusterHarness(t *testing.T, masters int, cfg Config) *clusterHarness {
	t.Helper()
	h := &clusterHarness{t: t, cluster: redisproc.StartRedisClusterT(t, masters, 0), system: actors.NewSystem(nil),
		votes: make(chan *Vote, 10000)}
	h.inbox = h.system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if v, ok := ctx.Message().(*Vote); ok {
			h.votes <- v
		}
	}))
	cfg.EpochKey = epochKey
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Second
	}
	opt := rueidis.ClientOption{InitAddress: h.cluster.Addrs()[:1]}
	first, err := AskCluster(t.Context(), opt)
	if err != nil {
		t.Fatal(err)
	}
	h.node = SpawnCluster(h.system, cfg, opt, first)
	t.Cleanup(func() {
		h.node.Stop()
		h.system.Shutdown()
	})
	return h
}

// moveSlot moves slot, with its keys, to another master, and returns it.
func (h *clusterHarness) moveSlot(slot int) *redisproc.Node {
	h.t.Helper()
	ctx := h.t.Context()
	masters, err := h.cluster.Masters(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	from, err := h.cluster.MasterOf(ctx, slot)
	if err != nil {
		h.t.Fatal(err)
	}
	to := masters[0]
	if to == from {
		to = masters[1]
	}
	if err := h.cluster.MigrateSlot(ctx, slot, to); err != nil {
		h.t.Fatal(err)
	}
	return to
}

// keyBeside returns a lock key that master serves, in a slot other than
// key's.
func (h *clusterHarness) keyBeside(master *redisproc.Node, key string) string {
	h.t.Helper()
	for i := 1; ; i++ {
		k := LockKey("t:", fmt.Sprint("other", i))
		m, err := h.cluster.MasterOf(h.t.Context(), hashslot.Of(k))
		if err != nil {
			h.t.Fatal(err)
		}
		if m.Addr() == master.Addr() && hashslot.Of(k) != hashslot.Of(key) {
			return k
		}
	}
}

func (h *clusterHarness) req(key, value string, round uint64) Request {
	return Request{Key: key, Value: value, Round: round, ReplyTo: h.inbox}
}

// askAll sends cmds at once and returns their votes by round.
func (h *clusterHarness) askAll(cmds []Command) map[uint64]*Vote {
	h.t.Helper()
	for _, c := range cmds {
		h.system.Root.Send(h.node.PID, c)
	}
	out := make(map[uint64]*Vote, len(cmds))
	for range cmds {
		select {
		case v := <-h.votes:
			out[v.Round] = v
		case <-time.After(15 * time.Second): // beyond any node Timeout here
			h.t.Fatalf("%d votes of %d", len(out), len(cmds))
		}
	}
	return out
}

// A cluster is one node: commands on keys of every shard are routed to
// their masters, batched per slot (plain acquires in a block per slot),
// and answered as a standalone master answers them.
func TestClusterVotes(t *testing.T) {
	h := newClusterHarness(t, 3, Config{Quarantine: -1})
	if n := len(h.node.Cluster().Shards()); n != 3 {
		t.Fatalf("%d shard actors, want 3", n)
	}
	const keys = 300
	ttl := 10 * time.Second
	round := uint64(0)
	ask := func(what string, want Outcome, cmd func(key string, r uint64) Command) {
		t.Helper()
		var cmds []Command
		first := round + 1
		for i := range keys {
			round++
			cmds = append(cmds, cmd(LockKey("t:", fmt.Sprint(i)), round))
		}
		for r, v := range h.askAll(cmds) {
			if v.Outcome != want || v.Err != nil {
				t.Fatalf("%s, key %d: %v %v, want %v", what, r-first, v.Outcome, v.Err, want)
			}
		}
	}
	ask("acquire", Granted, func(k string, r uint64) Command {
		return &Acquire{Request: h.req(k, "me", r), TTL: ttl, Contended: true}
	})
	ask("acquire held", Taken, func(k string, r uint64) Command {
		// Contended: through the script at once, not plain and then asked
		// again (which would count it twice).
		return &Acquire{Request: h.req(k, "you", r), TTL: ttl, Contended: true}
	})
	ask("extend", Granted, func(k string, r uint64) Command { return &Extend{h.req(k, "me", r), ttl} })
	ask("release", Granted, func(k string, r uint64) Command {
		return &Release{Request: h.req(k, "me", r), TTL: ttl}
	})
	ask("acquire released", Granted, func(k string, r uint64) Command {
		return &Acquire{Request: h.req(k, "you", r), TTL: ttl}
	})
	// Every shard served some.
	for addr, n := range h.node.Cluster().Shards() {
		if s := n.Stats(); s.Commands == 0 {
			t.Errorf("shard %s answered no command", addr)
		}
	}
	if s := h.node.Stats(); s.Commands != 5*keys {
		t.Errorf("cluster answered %d commands, want %d", s.Commands, 5*keys)
	}
}

// A cluster seen for the first time sits out a quarantine, then marks the
// epoch marker in every slot of every shard; a slot whose marker names
// another lineage (it moved from another shard, say) quarantines its
// shard again.
func TestClusterQuarantineAndMarkers(t *testing.T) {
	q := 300 * time.Millisecond
	// A timeout of 5s: marking the 16384 slots goes before the first
	// acquires after the quarantine, and took more than 1s on a loaded
	// machine, timing them out round after round.
	h := newClusterHarness(t, 2, Config{Quarantine: q, HealthInterval: 100 * time.Millisecond, Timeout: 5 * time.Second})
	acquire := func(round uint64) (granted int, last *Vote) {
		var cmds []Command
		for i := range 20 { // on both shards
			key := LockKey("t:", fmt.Sprint(i))
			// A round that timed out on a loaded machine may have set its
			// keys: they go first, unanswered (ReplyTo nil), as a lease's
			// cleanup would.
			h.system.Root.Send(h.node.PID, &Release{Request: Request{Key: key, Value: "me"}, TTL: q})
			cmds = append(cmds, &Acquire{Request: h.req(key, "me", round*100+uint64(i)), TTL: q})
		}
		for _, v := range h.askAll(cmds) {
			if v.Outcome == Granted {
				granted++
			}
			last = v
		}
		return granted, last
	}
	if n, v := acquire(0); n != 0 || !errors.Is(v.Err, ErrQuarantined) {
		t.Fatalf("first sight: %d granted, %v %v; want quarantined", n, v.Outcome, v.Err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for round := uint64(1); ; round++ {
		n, v := acquire(round)
		if n == 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 20 granted; %v %v", n, v.Outcome, v.Err)
		}
		time.Sleep(q / 10)
	}
	// Every slot carries its master's marker.
	ctx := t.Context()
	masters, err := h.cluster.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range masters {
		keys, err := m.Keys(ctx, epochKey+"{*")
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if !strings.HasSuffix(k, recordSuffix) { // the TTL records beside some
				n++
			}
		}
	}
	if n != hashslot.Count {
		t.Fatalf("%d epoch markers, want one per slot (%d)", n, hashslot.Count)
	}

	// A slot moves, with a held key and its marker: the key stays held
	// on its new shard, whose next acquire on it meets the marker of the
	// other shard's lineage and quarantines that slot, not the shard.
	// A lease's TTL is at most the quarantine's (MaxTTL), or the TTL
	// record lengthens the quarantine: here it does, from q to held.
	held := 10 * q
	key := LockKey("t:", "0")
	round := uint64(10000)
	// Its record lengthens the quarantine of first sight, on every shard
	// (they share the horizon, each from its next probe): waited out.
	testwait.Eventually(t, 5*time.Second, "an acquire of "+held.String()+" granted", func() bool {
		round++
		return h.askAll([]Command{&Acquire{Request: h.req(key, "me", round), TTL: held}})[round].Outcome == Granted
	})
	time.Sleep(2 * 100 * time.Millisecond) // two HealthIntervals: every shard probed since
	testwait.Eventually(t, 5*time.Second, "no shard quarantined", func() bool {
		for _, n := range h.node.Cluster().Shards() {
			if n.Stats().QuarantineUntil.After(time.Now()) {
				return false
			}
		}
		return true
	})
	moved := time.Now()
	to := h.moveSlot(hashslot.Of(key))
	other := h.keyBeside(to, key)
	for {
		round++
		v := h.askAll([]Command{&Extend{h.req(key, "me", round), held}})[round]
		if v.Outcome == Granted {
			break
		}
		if v.Outcome != Failed || time.Now().After(deadline.Add(5*time.Second)) {
			t.Fatalf("extend after the move: %v %v", v.Outcome, v.Err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	round++
	v := h.askAll([]Command{&Acquire{Request: h.req(key, "me", round), TTL: held, Contended: true}})[round]
	// Quarantined since the move (not by now: its 300ms may have ended
	// while a loaded machine got here, as in one .ci/run).
	if !errors.Is(v.Err, ErrQuarantined) || !v.Until.After(moved.Add(q)) {
		t.Fatalf("acquire on the moved slot: %v %v until %v, want quarantined until after %v", v.Outcome, v.Err, v.Until, moved.Add(q))
	}
	// The rest of the shard keeps its votes: acquires, plain and through
	// the script, on another of its slots.
	round++
	for i, c := range []Command{&Acquire{Request: h.req(other, "me", round), TTL: held},
		&Acquire{Request: h.req(other, "me", round+1), TTL: held, Contended: true}} {
		if v := h.askAll([]Command{c})[round+uint64(i)]; v.Outcome != Granted {
			t.Fatalf("acquire %d on another slot of the shard the slot moved to: %v %v, want granted", i, v.Outcome, v.Err)
		}
	}
	round++
	if s := h.node.Cluster().Shards()[to.Addr()].Stats(); s.QuarantineUntil.After(moved) || s.SlotsOut != 1 {
		t.Fatalf("the shard the slot moved to: %+v; want one slot out, not the shard", s)
	}
	// After its quarantine the slot is marked with its new master's
	// lineage, and grants again.
	if v := h.askAll([]Command{&Release{Request: h.req(key, "me", round), TTL: held}})[round]; v.Outcome != Granted {
		t.Fatalf("release on the moved slot: %v %v", v.Outcome, v.Err)
	}
	testwait.Eventually(t, 5*time.Second, "an acquire on the moved slot granted", func() bool {
		round++
		return h.askAll([]Command{&Acquire{Request: h.req(LockKey("t:", "0"), "me", round), TTL: held}})[round].Outcome == Granted
	})
	info, err := to.Do(ctx, "INFO", "replication")
	if err != nil {
		t.Fatal(err)
	}
	if s := h.node.Cluster().Shards()[to.Addr()].Stats(); s.SlotsOut != 0 {
		t.Fatalf("the shard the slot moved to, after the slot's quarantine: %+v; want no slot out", s)
	}
	replid, _ := redisinfo.Field(fmt.Sprint(info), "master_replid")
	marker, err := to.Do(ctx, "GET", markerKey(epochKey, uint16(hashslot.Of(key))))
	if err != nil || replid == "" || !strings.HasPrefix(fmt.Sprint(marker), replid+" ") {
		t.Fatalf("the moved slot's marker %v (%v); want the lineage of its new master, replication id %q", marker, err, replid)
	}
}

// A release refused because its slot moved (the shard actors' view is
// stale: no view is asked for but on a refusal) goes again, silently,
// to the slot's new master, where the key moved with its TTL: it does
// not live out its minute there.
func TestClusterReleaseFollowsAMovedSlot(t *testing.T) {
	h := newClusterHarness(t, 2, Config{Quarantine: -1, HealthInterval: time.Hour})
	key := LockKey("t:", "moved")
	round := uint64(0)
	testwait.Eventually(t, 5*time.Second, "the acquire granted", func() bool {
		round++
		return h.askAll([]Command{&Acquire{Request: h.req(key, "me", round), TTL: time.Minute}})[round].Outcome == Granted
	})
	to := h.moveSlot(hashslot.Of(key))
	ctx := t.Context()
	if ttl, err := to.PTTL(ctx, key); err != nil || ttl <= 0 {
		t.Fatalf("the key on the slot's new master: PTTL %v, %v", ttl, err)
	}
	round++
	v := h.askAll([]Command{&Release{Request: h.req(key, "me", round), TTL: time.Minute}})[round]
	if v.Outcome != Failed {
		t.Fatalf("release on the old master: %v %v, want Failed (MOVED)", v.Outcome, v.Err)
	}
	testwait.Eventually(t, 5*time.Second, "the key released on the slot's new master", func() bool {
		ttl, err := to.PTTL(ctx, key)
		return err == nil && ttl == -2*time.Millisecond
	})
}

// A ClusterWatcher hears a release channel on the master of its slot,
// SSUBSCRIBEd, and follows the slot when it moves.
func TestClusterWatcherFollowsTheSlot(t *testing.T) {
	h := newClusterHarness(t, 2, Config{Quarantine: -1, HealthInterval: 50 * time.Millisecond})
	heard := make(chan string, 100)
	watched := make(chan bool, 100)
	w := NewClusterWatcher(h.node, rueidis.ClientOption{InitAddress: h.cluster.Addrs()[:1]}, time.Second, WatchHooks{
		Released: func(_, msg string) { heard <- msg },
		Watched:  func(_ string, ok bool) { watched <- ok },
		Lost:     func() {},
	})
	defer w.Close()
	channel := LockKey("t:", "r") + ReleasedSuffix
	slot := hashslot.Of(channel)
	w.Watch(channel)
	if ok := <-watched; !ok {
		t.Fatal("not watched")
	}
	ctx := t.Context()
	publish := func(msg string) {
		t.Helper()
		master, err := h.cluster.MasterOf(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := master.Do(ctx, "SPUBLISH", channel, msg); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-heard:
			if got != msg {
				t.Fatalf("heard %q, want %q", got, msg)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%q not heard", msg)
		}
	}
	publish("before")
	h.moveSlot(slot)
	select { // watched again, on the new master, once the view moved
	case ok := <-watched:
		if !ok {
			t.Fatal("not watched on the new master")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the channel did not move with its slot")
	}
	publish("after")
}

// A slot's own quarantine ends no sooner than its master's: a slot that
// moved in, then lost its keys with the rest of the master (FLUSHALL)
// before its quarantine ended, is not marked while the master sits out
// the longer one. (Marked then, it would tell an engine meeting the
// master next that its keys were all there.)
func TestClusterSlotWaitsForItsShard(t *testing.T) {
	q := 3 * time.Second
	h := newClusterHarness(t, 2, Config{Quarantine: q, HealthInterval: 100 * time.Millisecond, Timeout: 5 * time.Second})
	ctx := t.Context()
	round := uint64(0)
	ask := func(c func(Request) Command, key string) *Vote {
		round++
		return h.askAll([]Command{c(h.req(key, "me", round))})[round]
	}
	acquire := func(r Request) Command { return &Acquire{Request: r, TTL: time.Second} }
	release := func(r Request) Command { return &Release{Request: r, TTL: time.Second} }
	key := LockKey("t:", "0")
	testwait.Eventually(t, 30*time.Second, "a grant after the first sight's quarantine", func() bool {
		return ask(acquire, key).Outcome == Granted
	})
	ask(release, key)

	to := h.moveSlot(hashslot.Of(key))
	moved := time.Now()
	testwait.Eventually(t, 5*time.Second, "the moved slot quarantined (after MOVED, the view asked again)", func() bool {
		return errors.Is(ask(acquire, key).Err, ErrQuarantined)
	})
	time.Sleep(q * 2 / 3)
	if _, err := to.Do(ctx, "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	other := h.keyBeside(to, key)
	ask(acquire, other) // meets the flush, and has the master probed
	shard := h.node.Cluster().Shards()[to.Addr()]
	testwait.Eventually(t, 5*time.Second, "the master quarantined whole", func() bool {
		return shard.Stats().QuarantineUntil.After(moved.Add(q))
	})
	// The slot's own quarantine ends; the master's goes on.
	time.Sleep(time.Until(moved.Add(q + 200*time.Millisecond)))
	marker := markerKey(epochKey, uint16(hashslot.Of(key)))
	for time.Now().Before(shard.Stats().QuarantineUntil.Add(-300 * time.Millisecond)) {
		if v := ask(acquire, key); !errors.Is(v.Err, ErrQuarantined) {
			t.Fatalf("acquire on the moved slot in its master's quarantine: %v %v", v.Outcome, v.Err)
		}
		ask(release, other) // a batch, which a mark would go in front of
		if n, err := to.Do(ctx, "EXISTS", marker); err != nil || fmt.Sprint(n) != "0" {
			t.Fatalf("the moved slot's marker in its master's quarantine: EXISTS %v, %v; want 0", n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	testwait.Eventually(t, 3*q, "the moved slot granted after its master's quarantine", func() bool {
		return ask(acquire, key).Outcome == Granted
	})
}
