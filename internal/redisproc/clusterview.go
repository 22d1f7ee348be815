package redisproc

// What the servers of a RedisCluster say of it: their views (CLUSTER
// NODES), whether they agree, and who serves a slot.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redlease/redlease/internal/hashslot"
	"github.com/redlease/redlease/internal/redisinfo"
)

// clusterEntry is one line of CLUSTER NODES: one node as another sees it.
type clusterEntry struct {
	id      string
	addr    string // host:port, without the bus port
	replica bool
	master  string // a replica's master's id
	// epoch is a master's config epoch, or a replica's master's.
	epoch uint64
	// health lists the flags that tell a node is not well: fail?
	// (suspected), fail, handshake, noaddr. Empty when there are none.
	health string
	// linked is whether the answering node's bus link to it is up.
	linked bool
	// slots are the slots it serves, as listed: "0-5460 5463".
	slots string
	// moving, on the answering node's own line only, are the slots it
	// migrates or imports: "[5462->-<id>]", "[5462-<-<id>]".
	moving []string
}

func (e *clusterEntry) String() string {
	if e == nil {
		return "unknown"
	}
	role := "master"
	if e.replica {
		role = "replica of " + e.master
	}
	s := fmt.Sprintf("%s %s %s epoch %d slots %q", e.id, e.addr, role, e.epoch, e.slots)
	if e.health != "" {
		s += " " + e.health
	}
	return s
}

// ranges returns the slots e lists, as first and last slot of each range.
func (e *clusterEntry) ranges() [][2]int {
	var out [][2]int
	for _, r := range strings.Fields(e.slots) {
		first, last, isRange := strings.Cut(r, "-")
		a, err1 := strconv.Atoi(first)
		b, err2 := strconv.Atoi(last)
		if !isRange {
			b, err2 = a, nil
		}
		if err1 == nil && err2 == nil && 0 <= a && a <= b && b < hashslot.Count {
			out = append(out, [2]int{a, b})
		}
	}
	return out
}

// owns reports whether e lists slot among its slots.
func (e *clusterEntry) owns(slot int) bool {
	for _, r := range e.ranges() {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}

// clusterView is a node's answer to CLUSTER NODES.
type clusterView struct {
	self    string // the answering node's id
	entries map[string]*clusterEntry
}

// parseClusterNodes reads a CLUSTER NODES reply:
// <id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent> <pong-recv> <config-epoch> <link-state> <slot>...
func parseClusterNodes(text string) (clusterView, error) {
	v := clusterView{entries: map[string]*clusterEntry{}}
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 8 {
			return v, fmt.Errorf("redisproc: CLUSTER NODES line %q", line)
		}
		e := &clusterEntry{id: f[0], linked: f[7] == "connected"}
		e.addr, _, _ = strings.Cut(f[1], "@")
		var health []string
		for _, flag := range strings.Split(f[2], ",") {
			switch flag {
			case "myself":
				v.self = e.id
			case "slave":
				e.replica = true
			case "fail?", "fail", "handshake", "noaddr":
				health = append(health, flag)
			}
		}
		e.health = strings.Join(health, ",")
		if e.replica {
			e.master = f[3]
		}
		var err error
		if e.epoch, err = strconv.ParseUint(f[6], 10, 64); err != nil {
			return v, fmt.Errorf("redisproc: CLUSTER NODES line %q: %w", line, err)
		}
		var slots []string
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				e.moving = append(e.moving, s)
			} else {
				slots = append(slots, s)
			}
		}
		e.slots = strings.Join(slots, " ")
		v.entries[e.id] = e
	}
	if v.self == "" {
		return v, errors.New("redisproc: CLUSTER NODES names no node myself")
	}
	return v, nil
}

// view asks n for CLUSTER NODES, within queryTimeout so that a paused
// node only goes unheard.
func (c *RedisCluster) view(ctx context.Context, n *Node) (clusterView, error) {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	s, err := n.text(ctx, "CLUSTER", "NODES")
	if err != nil {
		return clusterView{}, fmt.Errorf("%s: CLUSTER NODES: %w", n.Addr(), err)
	}
	return parseClusterNodes(s)
}

// text runs a command whose reply is text, as CLUSTER NODES and CLUSTER
// INFO are: a verbatim string in RESP3, which rueidis returns with its
// "txt:" format prefix, dropped here.
func (n *Node) text(ctx context.Context, args ...string) (string, error) {
	c, err := n.redis()
	if err != nil {
		return "", err
	}
	s, err := c.Do(ctx, c.B().Arbitrary(args[0]).Args(args[1:]...).Build()).ToString()
	return strings.TrimPrefix(s, "txt:"), err
}

// views asks every running server at once for its view; servers that do
// not answer are left out, with their errors.
func (c *RedisCluster) views(ctx context.Context) (map[*Node]clusterView, map[*Node]error) {
	var mu sync.Mutex
	views, errs := map[*Node]clusterView{}, map[*Node]error{}
	var wg sync.WaitGroup
	for _, n := range c.Servers {
		if !n.running() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := c.view(ctx, n)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[n] = err
			} else {
				views[n] = v
			}
		}()
	}
	wg.Wait()
	return views, errs
}

// clusterState is a settled cluster: what every running server agrees on.
type clusterState struct {
	// agreed is the view every running server has (the answering node's
	// own migrations aside), by node id.
	agreed map[string]*clusterEntry
	// views are the running servers' own views.
	views map[*Node]clusterView
}

// settled returns the cluster's state if it is settled: every running
// server answers, knows every server by its id and address and no other,
// and tells the same roles, masters, epochs and slots for every running
// one, and the same slots for the others (whose roles and epochs it may
// not have heard of since they stopped), sees every running server well
// and linked, answers cluster_state:ok, and, if a replica, answers ROLE
// slave of its master with the link up.
func (c *RedisCluster) settled(ctx context.Context) (*clusterState, error) {
	views, errs := c.views(ctx)
	for n, err := range errs {
		return nil, fmt.Errorf("%s: %w", n.Addr(), err)
	}
	s := &clusterState{views: views}
	var first *Node
	var firstView string
	for i, n := range c.Servers {
		v, ok := views[n]
		if !ok {
			continue
		}
		if v.self != c.members[i].id {
			return nil, fmt.Errorf("%s says it is %s, not %s", n.Addr(), v.self, c.members[i].id)
		}
		text, err := c.canonical(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n.Addr(), err)
		}
		if first == nil {
			first, firstView, s.agreed = n, text, v.entries
		} else if text != firstView {
			return nil, fmt.Errorf("%s and %s disagree:\n%s\nand\n%s", first.Addr(), n.Addr(), firstView, text)
		}
	}
	if first == nil {
		return nil, errors.New("no server is running")
	}
	for n := range views {
		qctx, cancel := context.WithTimeout(ctx, queryTimeout)
		info, err := n.text(qctx, "CLUSTER", "INFO")
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s: CLUSTER INFO: %w", n.Addr(), err)
		}
		if state, _ := redisinfo.Field(info, "cluster_state"); state != "ok" {
			return nil, fmt.Errorf("%s: cluster_state:%s", n.Addr(), state)
		}
		e := s.agreed[views[n].self]
		if !e.replica {
			continue
		}
		master := c.byID(e.master)
		qctx, cancel = context.WithTimeout(ctx, queryTimeout)
		r, err := role(qctx, n)
		cancel()
		if err != nil || r.role != "slave" || r.master != master.Addr() || r.state != "connected" {
			return nil, fmt.Errorf("%s answers ROLE %v, %v; want slave of %s (connected)", n.Addr(), r, err, master.Addr())
		}
	}
	return s, nil
}

// canonical checks that a running server's view names every server by
// its id and address and sees the running ones well and linked, and
// writes it as the text the servers must agree on, one line a node.
func (c *RedisCluster) canonical(v clusterView) (string, error) {
	if len(v.entries) != len(c.Servers) {
		return "", fmt.Errorf("knows %d nodes of %d", len(v.entries), len(c.Servers))
	}
	var b strings.Builder
	for i, m := range c.members {
		e, ok := v.entries[m.id]
		n := c.Servers[i]
		switch {
		case !ok || e.addr != n.Addr():
			return "", fmt.Errorf("knows %s as %v; want it at %s", m.id, e, n.Addr())
		case !n.running():
			fmt.Fprintf(&b, "%s %s stopped, slots %q\n", e.id, e.addr, e.slots)
		case e.health != "" || !e.linked && e.id != v.self:
			return "", fmt.Errorf("sees %s (linked: %v)", e, e.linked)
		case e.replica && c.byID(e.master) == nil:
			return "", fmt.Errorf("sees %s, whose master is none of the servers", e)
		default:
			fmt.Fprintln(&b, e)
		}
	}
	return b.String(), nil
}

// waitSettled waits until the cluster is settled (see settled) and want,
// if not nil, accepts its state.
func (c *RedisCluster) waitSettled(ctx context.Context, want func(*clusterState) error) error {
	return poll(ctx, time.Time{}, func(ctx context.Context) error {
		s, err := c.settled(ctx)
		if err == nil && want != nil {
			err = want(s)
		}
		return err
	})
}

// claim is a running server's word on itself: the slots it serves as a
// master (none as a replica) and its config epoch.
type claim struct {
	node *Node
	self *clusterEntry
}

// claims asks every running server what it is. Servers that do not answer
// within queryTimeout (paused) are left out.
func (c *RedisCluster) claims(ctx context.Context) ([]claim, error) {
	views, errs := c.views(ctx)
	var out []claim
	for _, n := range c.Servers {
		if v, ok := views[n]; ok {
			out = append(out, claim{n, v.entries[v.self]})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("redisproc: no server of the Redis Cluster answers: %v", errors.Join(mapValues(errs)...))
	}
	return out, nil
}

func mapValues(m map[*Node]error) []error {
	var errs []error
	for _, err := range m {
		errs = append(errs, err)
	}
	return errs
}

// owners returns, for every slot, the claim that wins it: of the masters
// that say they serve it, the one with the greatest config epoch, as
// Redis Cluster settles conflicting claims; nil when none says it does.
func owners(claims []claim) ([]*Node, error) {
	won := make([]*claim, hashslot.Count)
	tie := make([]bool, hashslot.Count)
	for i, cl := range claims {
		if cl.self.replica {
			continue
		}
		for _, r := range cl.self.ranges() {
			for slot := r[0]; slot <= r[1]; slot++ {
				switch best := won[slot]; {
				case best == nil || cl.self.epoch > best.self.epoch:
					won[slot], tie[slot] = &claims[i], false
				case cl.self.epoch == best.self.epoch:
					tie[slot] = true
				}
			}
		}
	}
	nodes := make([]*Node, hashslot.Count)
	for slot, cl := range won {
		if tie[slot] {
			return nil, fmt.Errorf("redisproc: masters of the Redis Cluster claim slot %d with the same epoch %d", slot, cl.self.epoch)
		}
		if cl != nil {
			nodes[slot] = cl.node
		}
	}
	return nodes, nil
}
