package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/redis/rueidis"

	"github.com/redlease/redlease/internal/hashslot"
	"github.com/redlease/redlease/internal/redisinfo"
)

// A Redis Cluster is one node, one vote, spread over its shards: a
// resource's keys share its hash tag (LockKey), so they live in one slot,
// and resources spread over the shards with their slots. Each shard's
// master has a node actor of its own (a shard actor), on a connection of
// its own, as a standalone master has: probed before it carries commands,
// quarantined when its dataset may have lost keys (a restart, a flush, a
// failover that promoted a replica, which comes back as a new master
// address and so as a new shard actor that first sees it). The cluster
// node's PID routes each command, by its key's slot, to the shard actor
// of the master that the cluster last said serves the slot, on the
// sender's goroutine (no actor of its own in between).
//
// A shard's batches go as one script call per slot: Redis Cluster runs a
// script only over keys of one slot. Each call requires the epoch marker
// of its slot, <EpochKey>{<hashslot.Tag(slot)>}, so the marker sits in
// every slot: a shard actor writes it in every slot its master serves
// when it writes it at all (after a quarantine), but for slots that sit
// out a quarantine of their own (below), and its probe reads the marker
// of its first slot that does not.
//
// Resharding. A command for a slot that moved (MOVED, ASK while the slot
// migrates, TRYAGAIN) is refused by its master: the script call fails
// whole, its commands fail (a non-vote, never a vote counted twice or for
// another key), and the cluster's view is asked again. The keys move with
// their TTL (MIGRATE), the slot's epoch marker among them, naming the
// lineage of the shard it came from. The slot sits out a quarantine of its
// own on its new shard, from when the shard actor sees the view give it
// the slot (slotsSeen) or, failing that, from its first batch there,
// whose call answers -1 (the marker is not the shard's); the shard marks
// it after that, and its other slots keep their votes (slotsOut). A lease
// whose keys moved keeps them: they are where its releases and extensions
// now go. A release that met the move (its vote a non-vote) goes again,
// silently, as a release that got no answer does: to the slot's new
// master, once the view names one, while its key may live (reroute).
//
// Failover. A replica promoted in a shard (CLUSTER FAILOVER, FORCE,
// TAKEOVER, or by the cluster when its master died) is a new master
// address, so a new shard actor, which meets it untrusted: the markers it
// copied name its old master's lineage. Until its former master says it
// no longer serves those slots (a TAKEOVER it has not heard of yet), it
// may take the writes of engines that have not moved yet, which its
// demotion loses; so the new master's quarantine runs until Quarantine
// after the first probe that no longer hears of it (split). A former
// master that does not answer is taken for gone: cut off from the
// cluster's majority, it refuses commands after the node timeout
// (cluster_state fail), unless cluster-require-full-coverage is no and it
// still reaches part of it, which is Redis Cluster's own limit.
type Cluster struct {
	system *actor.ActorSystem
	pid    *actor.PID // routes commands (router)
	cfg    Config     // the shard actors' template
	opt    rueidis.ClientOption
	seeds  rueidis.Client // asks a node of the cluster for its shards (view); made at the first need

	routes atomic.Pointer[routes]
	kick   chan struct{} // cap 1: ask for the view now
	stop   chan struct{}
	done   chan struct{}

	mu        sync.Mutex
	shards    map[string]*shard // by master address
	followers []func()          // called after each view applied (follow)
	// formers are the masters that left the view, by address, with the
	// slots they served: until one says it serves none of them, it may
	// still take writes for them (split).
	formers map[string][]uint16
	// moved: releases refused for slots that moved, until the view
	// routes them elsewhere (reroute).
	moved []*rerouted
}

// shard is a shard actor and the slots its master serves.
type shard struct {
	addr  string // its master's
	node  *Node
	slots *Slots
}

// Slots are the slots a shard's master serves, as the cluster last said:
// a shard actor's Config.Slots.
type Slots struct{ p atomic.Pointer[[]uint16] }

// get returns the slots, ascending.
func (s *Slots) get() []uint16 {
	if p := s.p.Load(); p != nil {
		return *p
	}
	return nil
}

// routes is the shard of each slot; nil: no master serves it.
type routes [hashslot.Count]*shard

// SpawnCluster starts a cluster node for the Redis Cluster that opt
// reaches (Target.Option): a shard actor for each master of first (its
// view, AskCluster; nil when none answered), and it asks for the view
// again every cfg.HealthInterval. cfg.Conn and cfg.First are unused: each
// shard actor has a Conn of its own, to its master, and probes it first
// thing.
func SpawnCluster(system *actor.ActorSystem, cfg Config, opt rueidis.ClientOption, first ClusterView) *Node {
	if cfg.HealthInterval <= 0 {
		cfg.HealthInterval = time.Second
	}
	c := &Cluster{system: system, cfg: cfg, opt: opt, kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), shards: make(map[string]*shard),
		formers: make(map[string][]uint16)}
	c.routes.Store(&routes{})
	c.apply(first)
	c.pid, _ = system.ProcessRegistry.Add(router{c}, "redlease-cluster-"+system.ProcessRegistry.NextId())
	go c.watch()
	return &Node{PID: c.pid, system: system, cluster: c}
}

// ClusterView is a Redis Cluster's shards as one of its nodes describes
// them: each master that serves slots, by address, and the slots it
// serves, ascending.
type ClusterView map[string][]uint16

// AskCluster asks a node of the Redis Cluster that opt reaches
// (Target.Option) for its shards (CLUSTER SHARDS).
func AskCluster(ctx context.Context, opt rueidis.ClientOption) (ClusterView, error) {
	opt.DisableCache = true
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	defer client.Close()
	return askShards(ctx, client)
}

func askShards(ctx context.Context, client rueidis.Client) (ClusterView, error) {
	shards, err := client.Do(ctx, client.B().ClusterShards().Build()).ToArray()
	if noPerm(err) {
		return nil, fmt.Errorf("cluster: CLUSTER SHARDS: %w: %s", err, needCluster)
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: CLUSTER SHARDS: %w", err)
	}
	return parseShards(shards)
}

// view asks for the cluster's view, through a client of the cluster that
// lives as long as c and is made at the first need.
func (c *Cluster) view(ctx context.Context) (ClusterView, error) {
	ctx, cancel := context.WithTimeout(ctx, max(c.cfg.Timeout, time.Second))
	defer cancel()
	if c.seeds == nil {
		opt := c.opt
		opt.DisableCache = true
		seeds, err := rueidis.NewClient(opt)
		if err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		c.seeds = seeds
	}
	return askShards(ctx, c.seeds)
}

// parseShards reads a CLUSTER SHARDS reply: per shard, its slot ranges
// and its nodes, one of them the master (role master, health online).
func parseShards(shards []rueidis.RedisMessage) (ClusterView, error) {
	v := make(ClusterView)
	for _, s := range shards {
		m, err := s.AsMap()
		if err != nil {
			return nil, fmt.Errorf("cluster: CLUSTER SHARDS: %w", err)
		}
		slotsMsg, nodesMsg := m["slots"], m["nodes"]
		bounds, _ := slotsMsg.AsIntSlice()
		if len(bounds)%2 != 0 {
			return nil, fmt.Errorf("cluster: CLUSTER SHARDS: odd slot bounds %v", bounds)
		}
		var slots []uint16
		for i := 0; i < len(bounds); i += 2 {
			if bounds[i] < 0 || bounds[i+1] >= hashslot.Count || bounds[i] > bounds[i+1] {
				return nil, fmt.Errorf("cluster: CLUSTER SHARDS: slots %d-%d", bounds[i], bounds[i+1])
			}
			for s := bounds[i]; s <= bounds[i+1]; s++ {
				slots = append(slots, uint16(s))
			}
		}
		if len(slots) == 0 {
			continue
		}
		nodes, _ := nodesMsg.ToArray()
		for _, n := range nodes {
			f, err := n.AsMap()
			if err != nil {
				return nil, fmt.Errorf("cluster: CLUSTER SHARDS: %w", err)
			}
			roleMsg, healthMsg, ipMsg, portMsg := f["role"], f["health"], f["ip"], f["port"]
			role, _ := roleMsg.ToString()
			health, _ := healthMsg.ToString()
			if role != "master" || health != "online" {
				continue
			}
			ip, _ := ipMsg.ToString()
			port, err := portMsg.AsInt64()
			if err != nil || ip == "" {
				return nil, fmt.Errorf("cluster: CLUSTER SHARDS: a master without ip or port: %v", f)
			}
			addr := net.JoinHostPort(ip, strconv.FormatInt(port, 10))
			slices.Sort(slots)
			v[addr] = append(v[addr], slots...)
		}
	}
	return v, nil
}

// apply starts a shard actor for each master of v that has none, gives
// each its slots, routes every slot to its master's, and stops the shard
// actors of servers that no longer serve slots (after nothing routes to
// them).
func (c *Cluster) apply(v ClusterView) {
	c.mu.Lock()
	var r routes
	for addr, slots := range v {
		s := c.shards[addr]
		if s == nil {
			s = &shard{addr: addr, slots: new(Slots)}
			s.slots.p.Store(&slots) // before its first probe, which reads the first slot's marker
			cfg := c.cfg
			cfg.Addr, cfg.Slots, cfg.Overlap = addr, s.slots, false
			cfg.First, cfg.Moved, cfg.reroute = nil, c.refresh, c.reroute
			if m, ok := cfg.Meter.(ShardMeter); ok {
				cfg.Meter = m.ForShard(addr)
			}
			opt := c.opt
			opt.InitAddress = []string{addr}
			cfg.Conn = NewConn(opt)
			s.node = Spawn(c.system, cfg)
			c.shards[addr] = s
		}
		s.slots.p.Store(&slots)
		for _, slot := range slots {
			r[slot] = s
		}
	}
	var gone []*Node
	for addr, s := range c.shards {
		if _, ok := v[addr]; !ok {
			gone = append(gone, s.node)
			delete(c.shards, addr)
			if v != nil { // not closing
				c.formers[addr] = s.slots.get()
			}
		}
	}
	for addr := range v {
		delete(c.formers, addr) // a master again
	}
	c.routes.Store(&r)
	var resend []*rerouted
	resend, c.moved = movedOn(c.moved, &r, time.Now())
	followers := c.followers
	c.mu.Unlock()
	for _, m := range resend {
		c.system.Root.Send(r[hashslot.Of(m.e.req.Key)].node.PID, m)
	}
	for _, f := range followers {
		f()
	}
	for _, n := range gone {
		n.Stop()
	}
}

// rerouted is a release that a shard's master refused for a slot it no
// longer serves (MOVED, ASK, TRYAGAIN): its key may live on where the
// slot went.
type rerouted struct {
	e    entry
	from string // the master that refused it
}

func (m *rerouted) request() *Request { return m.e.req }

// newRerouted is e, refused by the master at from, to send again: silently,
// without its successor (who may be done waiting by then), as settle
// keeps a release that went unsent.
func newRerouted(e entry, from string) *rerouted {
	req := *e.req
	req.ReplyTo, req.Inbox, req.Round = nil, nil, 0
	e.req, e.silent, e.successor = &req, true, ""
	return &rerouted{e: e, from: from}
}

// reroute keeps m until the view routes its slot to another master
// (apply); the shard actor asked for the view already (Moved).
func (c *Cluster) reroute(m *rerouted) {
	c.mu.Lock()
	c.moved = append(c.moved, m)
	c.mu.Unlock()
}

// movedOn splits moved into the releases that r now routes to another
// master than the one that refused them (resend) and those that still
// wait (kept); a release whose key has expired by now is dropped.
func movedOn(moved []*rerouted, r *routes, now time.Time) (resend, kept []*rerouted) {
	kept = moved[:0]
	for _, m := range moved {
		switch s := r[hashslot.Of(m.e.req.Key)]; {
		case now.Sub(m.e.queued) >= m.e.ttl:
		case s != nil && s.addr != m.from:
			resend = append(resend, m)
		default:
			kept = append(kept, m)
		}
	}
	clear(moved[len(kept):])
	return resend, kept
}

// follow has f called after each change of the cluster's view has been
// applied (a ClusterWatcher moves its channels).
func (c *Cluster) follow(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.followers = append(c.followers, f)
}

// masters are the addresses of the masters that serve slots now.
func (c *Cluster) masters() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.shards))
	for addr := range c.shards {
		out = append(out, addr)
	}
	return out
}

// masterOf is the address of the master that serves slot now, "" when
// none does.
func (c *Cluster) masterOf(slot int) string {
	if s := c.routes.Load()[slot]; s != nil {
		return s.addr
	}
	return ""
}

// refresh asks for the cluster's view soon: a shard refused a command
// for a slot it no longer serves.
func (c *Cluster) refresh() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// watch asks for the cluster's view every HealthInterval, and when a
// shard asks for it (refresh), until close.
func (c *Cluster) watch() {
	defer close(c.done)
	t := time.NewTicker(c.cfg.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		case <-c.kick:
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-c.stop:
			case <-ctx.Done():
			}
			cancel()
		}()
		if v, err := c.view(ctx); err == nil {
			c.apply(v)
		}
		c.split(ctx)
		cancel()
	}
}

// split asks each former master whether it still serves slots it served
// (a failover that promoted a replica without it: CLUSTER FAILOVER FORCE
// or TAKEOVER, or one it was cut off from): it takes the writes of
// engines that have not yet moved, which its demotion loses. Each shard
// now serving such slots hears of it at its next probe (Info.Split), and
// sits out a quarantine until Quarantine after the first probe that no
// longer hears of it (see checked). A former master that says it serves
// none of them, or that does not answer, is forgotten; one whose
// cluster_state is not ok refuses every command, and so takes no write.
func (c *Cluster) split(ctx context.Context) {
	c.mu.Lock()
	formers := maps.Clone(c.formers)
	c.mu.Unlock()
	claims := make(map[string][]uint16) // a former master's slots that it still serves
	for addr, slots := range formers {
		served, err := c.serves(ctx, addr)
		if err != nil || len(served) == 0 {
			c.mu.Lock()
			delete(c.formers, addr)
			c.mu.Unlock()
			continue
		}
		for _, s := range slots {
			if _, ok := slices.BinarySearch(served, s); ok {
				claims[addr] = append(claims[addr], s)
			}
		}
	}
	r := c.routes.Load()
	splits := make(map[*shard][]string)
	for addr, slots := range claims {
		for _, s := range slots {
			if sh := r[s]; sh != nil && !slices.Contains(splits[sh], addr) {
				splits[sh] = append(splits[sh], addr)
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, sh := range c.shards {
		sh.node.actor.conn.setSplit(splits[sh])
	}
}

// serves asks the server at addr, on a connection of its own, which slots
// it serves as a master, by its own view of the cluster: none when its
// cluster_state is not ok.
func (c *Cluster) serves(ctx context.Context, addr string) ([]uint16, error) {
	opt := c.opt
	opt.InitAddress, opt.ForceSingleClient, opt.DisableCache = []string{addr}, true, true
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, max(c.cfg.Timeout, time.Second))
	defer cancel()
	res := client.DoMulti(ctx, client.B().ClusterInfo().Build(), client.B().ClusterShards().Build())
	info, err := res[0].ToString()
	if err != nil {
		return nil, err
	}
	if state, _ := redisinfo.Field(info, "cluster_state"); state != "ok" {
		return nil, nil
	}
	shards, err := res[1].ToArray()
	if err != nil {
		return nil, err
	}
	v, err := parseShards(shards)
	return v[addr], err
}

// Shards returns the cluster's shard actors, by master address.
func (c *Cluster) Shards() map[string]*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]*Node, len(c.shards))
	for addr, s := range c.shards {
		out[addr] = s.node
	}
	return out
}

// close stops the routing, the view's refreshes and every shard actor.
func (c *Cluster) close() {
	c.system.ProcessRegistry.Remove(c.pid)
	close(c.stop)
	<-c.done
	if c.seeds != nil {
		c.seeds.Close()
	}
	c.apply(nil)
}

// errNoShard: no master serves the command's slot, as far as the cluster
// last said (a failover under way, or a cluster that lost a shard).
var errNoShard = errors.New("redlease: no master of the cluster serves the key's slot")

// router is the cluster node's PID: it hands each command to the shard
// actor of its key's slot, on the sender's goroutine.
type router struct{ c *Cluster }

func (r router) SendUserMessage(_ *actor.PID, msg any) {
	cmd, ok := actor.UnwrapEnvelopeMessage(msg).(Command)
	if !ok {
		return
	}
	req := cmd.request()
	if s := r.c.routes.Load()[hashslot.Of(req.Key)]; s != nil {
		r.c.system.Root.Send(s.node.PID, cmd)
		return
	}
	r.c.refresh()
	if req.ReplyTo != nil {
		v := votes.Get().(*Vote)
		*v = Vote{Node: r.c.cfg.Index, Round: req.Round, Outcome: Failed, Err: errNoShard}
		r.c.system.Root.Send(req.ReplyTo, v)
	}
}

func (router) SendSystemMessage(*actor.PID, any) {}
func (router) Stop(*actor.PID)                   {}

// markerKey is the epoch marker's key in slot s: EpochKey with s's tag.
func markerKey(epochKey string, s uint16) string {
	return epochKey + "{" + hashslot.Tag(int(s)) + "}"
}

// stats sums the shards' Stats: the cluster is Down when every shard is
// (or none serves), quarantined until the latest shard's quarantine ends.
func (c *Cluster) stats() Stats {
	var out Stats
	out.Down = true
	for _, n := range c.Shards() {
		s := n.Stats()
		out.Commands += s.Commands
		out.Batches += s.Batches
		out.Restarts += s.Restarts
		out.Healed += s.Healed
		out.OnWire += s.OnWire
		out.Queued += s.Queued
		out.SlotsOut += s.SlotsOut
		out.Down = out.Down && s.Down
		out.Evicting = out.Evicting || s.Evicting
		if s.QuarantineUntil.After(out.QuarantineUntil) {
			out.QuarantineUntil = s.QuarantineUntil
		}
	}
	return out
}

// markSlots writes the epoch marker of info's dataset in each of slots
// (markEach): marked when every one was written (or there were none),
// failed when one was not (the dataset changed since the probe).
func (a *nodeActor) markSlots(client rueidis.Client, info Info, slots []uint16) (marked, failed bool) {
	if len(slots) == 0 {
		return true, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*a.probeTimeout())
	defer cancel()
	marked, err := markEach(ctx, client, a.cfg.EpochKey, slots, info, !a.cfg.UnsafeEviction)
	return marked, err == nil && !marked
}

// A slot's own quarantine. A slot that moved to a shard brings keys whose
// history the shard's quarantines do not cover; and a batch call that
// finds its slot's epoch marker not the one required (-1) says that
// slot's keys may be lost. The other slots' calls check their own
// markers, against the same lineage, and the dataset as a whole (the
// replication id in every call, the process at every reconnection and
// probe). So only that slot sits out a quarantine (slotsOut), counted
// from then: its acquires are refused until it ends, and its marker is
// written after it, before the next acquire on it (slotsDue), but never
// while the shard sits out a quarantine whole, nor by the shard's own
// mark (slotsToMark): a marker written then would vouch for keys the
// slot may have lost. The shard is probed at once after a -1: a dataset
// that changed as a whole (a restart, a flush, a promotion) quarantines
// the shard as before (checked).

// slotsSeen has the slots the cluster's view gave the shard since the
// actor last looked sit out a quarantine from now: they moved here, with
// keys whose history this master's quarantines do not cover. Whatever
// their markers say, the shard's own mark does not write theirs
// (slotsToMark); a marker that names this master's lineage came back with
// a slot that went and returned.
func (a *nodeActor) slotsSeen(now time.Time) {
	if a.cfg.Slots == nil {
		return
	}
	p := a.cfg.Slots.p.Load()
	if p == a.seen {
		return
	}
	if a.seen != nil && p != nil && a.quarantineOn() {
		var in []uint16
		for _, s := range *p {
			if _, ok := slices.BinarySearch(*a.seen, s); !ok {
				in = append(in, s)
			}
		}
		a.loseSlots(now, in, "the slot moved here")
	}
	a.seen = p
}

// loseSlots has slots sit out a quarantine from at, and says so once for
// those that did not already (a resharding moves thousands).
func (a *nodeActor) loseSlots(at time.Time, slots []uint16, why string) {
	if a.health.slotsOut == nil {
		a.health.slotsOut = make(map[uint16]time.Time)
	}
	until := at.Add(a.quarantineFor())
	var fresh []uint16
	for _, s := range slots {
		if was, ok := a.health.slotsOut[s]; !ok || until.After(was) {
			if !ok {
				fresh = append(fresh, s)
			}
			a.health.slotsOut[s] = until
		}
	}
	a.countSlotsOut()
	if len(fresh) > 0 {
		a.cfg.Logger.Warn("redlease: slots of a cluster's master may have lost lock keys; refusing acquires on them until every lease they held expired",
			"node", a.cfg.Addr, "slots", len(fresh), "first", fresh[0], "why", why, "until", until)
	}
}

// slotOut reports whether slot sits out its own quarantine at now.
func (a *nodeActor) slotOut(slot uint16, now time.Time) bool {
	until, ok := a.health.slotsOut[slot]
	return ok && now.Before(until)
}

// countSlotsOut stores how many slots sit out their own quarantine
// (Stats.SlotsOut), after the set changed: not per message, which would
// cost standalone nodes an atomic store per command.
func (a *nodeActor) countSlotsOut() { a.stats.slotsOut.Store(int64(len(a.health.slotsOut))) }

// slotsDue returns the slots whose own quarantine ended by now, to mark,
// and forgets those the master no longer serves. None while the shard
// sits out a quarantine as a whole: a marker written then would tell an
// engine that meets the master next that its keys were not lost.
func (a *nodeActor) slotsDue(now time.Time) []uint16 {
	if len(a.health.slotsOut) == 0 || a.health.quarantined(now) {
		return nil
	}
	var served []uint16
	if a.seen != nil {
		served = *a.seen
	}
	var due []uint16
	pruned := false
	for s, until := range a.health.slotsOut {
		switch _, ok := slices.BinarySearch(served, s); {
		case !ok:
			delete(a.health.slotsOut, s)
			pruned = true
		case !now.Before(until):
			due = append(due, s)
		}
	}
	if pruned {
		a.countSlotsOut()
	}
	slices.Sort(due)
	return due
}

// slotsToMark is what marking the whole shard marks: every slot its
// master serves, as slotsSeen last saw (a slot the view gave it since
// must sit out its own quarantine first), but those that sit out their
// own quarantine.
func (a *nodeActor) slotsToMark(now time.Time) []uint16 {
	var served []uint16
	if a.seen != nil {
		served = *a.seen
	}
	if len(a.health.slotsOut) == 0 {
		return served
	}
	return slices.DeleteFunc(slices.Clone(served), func(s uint16) bool { return a.slotOut(s, now) })
}

// markEach writes the epoch marker of info's dataset in each slot of
// slots, as Conn.Mark writes one (epoch.lua, by its SHA), in calls of at
// most maxBatch: false, without error, when one was not written (the
// dataset changed since the probe), or when slots is empty. A slot whose
// marker names that lineage already (another engine's, or an earlier
// mark's) is left as it is: writing nothing, it launders nothing, and
// every batch that requires it checks the running process itself
// (batch.lua, epochHolds). So only the first engine pays for a master's
// thousands of slots (5461 of them: 490ms of one master's time, then
// 25ms for each engine after it).
func markEach(ctx context.Context, client rueidis.Client, epochKey string, slots []uint16, info Info, checkEvicted bool) (bool, error) {
	lineage := info.Lineage()
	var todo []uint16
	// A slice of commands per call: a DoMulti that ctx cut short leaves
	// its commands to rueidis's reader, which reads them still (the race
	// detector caught a reused slice written under it).
	for from := 0; from < len(slots); from += maxBatch {
		chunk := slots[from:min(from+maxBatch, len(slots))]
		cmds := make(rueidis.Commands, 0, len(chunk))
		for _, s := range chunk {
			cmds = append(cmds, client.B().Get().Key(markerKey(epochKey, s)).Build())
		}
		for i, r := range client.DoMulti(ctx, cmds...) {
			if v, err := r.ToString(); err != nil || v != lineage {
				todo = append(todo, chunk[i])
			}
		}
	}
	if len(todo) > 0 {
		if err := client.Do(ctx, client.B().ScriptLoad().Script(epochScript.body).Build()).Error(); err != nil {
			return false, err
		}
	}
	args := markArgs(info, checkEvicted)
	for from := 0; from < len(todo); from += maxBatch {
		cmds := make(rueidis.Commands, 0, min(len(todo)-from, maxBatch))
		for _, s := range todo[from:min(from+maxBatch, len(todo))] {
			cmds = append(cmds, client.B().Evalsha().Sha1(epochScript.sha).Numkeys(1).Key(markerKey(epochKey, s)).Arg(args...).Build())
		}
		for _, r := range client.DoMulti(ctx, cmds...) {
			if n, err := r.AsInt64(); err != nil || n != 1 {
				return false, err
			}
		}
	}
	return len(slots) > 0, nil
}

// ShardProbe is what a probe learnt of one master of a Redis Cluster.
type ShardProbe struct {
	Addr  string   // the master's
	Slots []uint16 // the slots it serves, as the view said
	Conn  *Conn    // its connection, probed; the caller closes it
	Info  Info     // what the probe learnt, when Err is nil
	Err   error
}

// ProbeCluster probes every master of view at once, each on a Conn of its
// own, as its shard actor would: reading the epoch marker of its first
// slot. opt is the cluster's (Target.Option).
func ProbeCluster(ctx context.Context, opt rueidis.ClientOption, epochKey string, view ClusterView) []ShardProbe {
	out := make([]ShardProbe, 0, len(view))
	for addr, slots := range view {
		o := opt
		o.InitAddress = []string{addr}
		out = append(out, ShardProbe{Addr: addr, Slots: slots, Conn: NewConn(o)})
	}
	slices.SortFunc(out, func(a, b ShardProbe) int { return int(a.Slots[0]) - int(b.Slots[0]) })
	var wg sync.WaitGroup
	for i := range out {
		p := &out[i]
		wg.Go(func() { p.Info, p.Err = p.Conn.Probe(ctx, markerKey(epochKey, p.Slots[0]), Info{}) })
	}
	wg.Wait()
	return out
}

// MarkSlots is Mark for a master of a Redis Cluster: it writes the
// epoch marker of the dataset a probe found (info) in each of slots, if
// it is still that dataset (see epoch.lua): true if every one was
// written.
func (c *Conn) MarkSlots(ctx context.Context, epochKey string, slots []uint16, info Info, checkEvicted bool) (bool, error) {
	client, err := c.get()
	if err != nil {
		return false, err
	}
	return markEach(ctx, client, epochKey, slots, info, checkEvicted)
}

// probeKey is the epoch marker a probe reads: on a cluster's shard, that
// of the first slot its master serves (as slotsSeen last saw) that does
// not sit out a quarantine of its own (slotsOut): the others may hold
// another master's marker.
func (a *nodeActor) probeKey() string {
	if a.seen == nil || len(*a.seen) == 0 {
		return a.cfg.EpochKey
	}
	slots := *a.seen
	for _, s := range slots {
		if _, out := a.health.slotsOut[s]; !out {
			return markerKey(a.cfg.EpochKey, s)
		}
	}
	return markerKey(a.cfg.EpochKey, slots[0])
}
