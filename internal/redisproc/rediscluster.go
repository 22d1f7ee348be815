package redisproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redlease/redlease/internal/hashslot"

	"github.com/redis/rueidis"
)

// The settings and timings of a RedisCluster.
const (
	// clusterNodeTimeout is cluster-node-timeout (15s by default): a node
	// that leaves a ping unanswered this long is suspected (PFAIL), and
	// one that a majority of the masters suspects within twice it is
	// failed (FAIL) and replaced by a replica of it, after 0.5s to 1s
	// more. It also spaces failovers: a master votes for a replica of
	// the same master at most once in twice it. Manual failovers do not
	// otherwise wait for it.
	//
	// Measured here, with both cores busy (load average 2.8: the
	// package's tests under the race detector beside a full race build),
	// no cluster-bus ping stayed unanswered longer than 4ms, and a
	// server's Restart left it silent for at most 31ms. So neither comes
	// near 1s, and a killed master is failed over 2.3s to 2.8s later.
	// 500ms passed as well (the tests five times under the same load;
	// failover of a killed master in 1.7s), but would fail a master over
	// for a host stall, or a test's Pause, of half a second; 1s tolerates
	// twice that, for 0.7s more per automatic failover, which no test
	// here waits for.
	clusterNodeTimeout = time.Second
	// clusterStartTimeout bounds StartRedisCluster. A master reports
	// cluster_state:ok no sooner than 2s after it started
	// (CLUSTER_WRITABLE_DELAY in Redis's source), so a start takes a
	// little more than that.
	clusterStartTimeout = 30 * time.Second
	// manualFailoverTimeout is CLUSTER_MF_TIMEOUT in Redis's source (a
	// constant): a replica gives up a manual failover that has not
	// switched this long after CLUSTER FAILOVER, and a plain one pauses
	// the master's writers for at most twice it.
	manualFailoverTimeout = 5 * time.Second
	// migrateBatch is how many keys one MIGRATE moves.
	migrateBatch = 100
	// migrateTimeout is MIGRATE's timeout: the longest the source may
	// wait for the destination at any moment of the transfer.
	migrateTimeout = 5 * time.Second
)

// RedisCluster is a Redis Cluster on loopback: masters with replicas,
// slots spread over the masters.
//
// Its servers run with the package's usual flags (no persistence, DEBUG
// from local connections) and cluster-enabled, with:
//
//   - cluster-node-timeout 1s (see clusterNodeTimeout): a master that is
//     killed or paused is failed over by one of its replicas 2s to 3s
//     later, as in production but sooner;
//   - cluster-config-file nodes.conf in the server's directory. The
//     server rewrites it with what it knows (its node id, epochs, the
//     other nodes, who replicates whom, the slots). Restart and
//     RestartFromSnapshot keep it: a restarted server keeps its node id
//     and comes back in the role and with the slots it last knew (a
//     master restarted before its replicas failed it over comes back a
//     master, empty, and its replicas resync the empty dataset: the data
//     loss of a master without persistence). A master answers CLUSTERDOWN
//     for 2s after it starts (CLUSTER_WRITABLE_DELAY in Redis's source, to
//     give the cluster time to demote it), a restarted one too;
//   - cluster-port, the cluster bus, on a free port of its own (not
//     port+10000, which may be taken or past 65535), and
//     cluster-announce-ip 127.0.0.1, so that every node names every node,
//     itself included, by the address Node.Addr gives;
//   - cluster-require-full-coverage no: a shard whose master is down
//     with no replica to take over makes its own slots fail and leaves
//     the others served, so that a test breaks the shard it aims at and
//     no more. With yes, the default, every node answers CLUSTERDOWN to
//     every command once any slot has no owner, or a failed one; a test
//     that wants that
//     sets it with CONFIG SET on every server. (cluster_state then stays
//     ok when slots lack an owner; StartRedisCluster checks coverage
//     itself.)
//   - repl-diskless-sync-delay 0: a replica's full sync starts at once
//     (the default waits 5s for more replicas).
//
// A Node's Get, Set and Do talk to that server alone: a key of a slot it
// does not serve is answered with MOVED or ASK, which they return as
// errors; a replica redirects reads to its master unless asked with
// ReadOnlyGet.
//
// The methods are safe for concurrent use; what concurrent failovers and
// migrations do to each other is Redis Cluster's business.
type RedisCluster struct {
	// Servers are the redis-server processes. Servers[i] for i below the
	// number of masters started as master i, serving the i-th range of
	// slots; then come the replicas of master 0, those of master 1, and
	// so on. Failovers change the roles, not the order.
	Servers []*Node

	// members[i] is what the cluster knows Servers[i] by; it never
	// changes, as nodes.conf survives restarts.
	members []member
}

// member is a server's identity in the cluster.
type member struct {
	id  string // node id, 40 hex digits
	bus int    // cluster bus port
}

// StartRedisCluster starts masters masters, each with replicasEach
// replicas, and makes them one Redis Cluster: the slots are spread evenly
// over the masters, in order. It returns once every server names the same
// nodes with the same roles, masters, slots and epochs (CLUSTER NODES),
// sees every other server up, answers cluster_state:ok, and every replica
// has synced with its master and caught up with it. On any error it stops
// what it started.
//
// It forms the cluster itself, as redis-cli --cluster create does but
// without redis-cli: distinct config epochs (CLUSTER SET-CONFIG-EPOCH),
// slots (CLUSTER ADDSLOTSRANGE), CLUSTER MEET and CLUSTER REPLICATE. So it
// decides which replica follows which master (redis-cli spreads replicas
// over hosts, and on one host shuffles them), it waits on the cluster's
// state where redis-cli sleeps, and it does not need redis-cli.
func StartRedisCluster(masters, replicasEach int) (*RedisCluster, error) {
	return startCluster(masters, replicasEach, true)
}

// StartBenchRedisCluster is StartRedisCluster for benchmarks: DEBUG stays
// disabled, as Redis 7 ships it (enable-debug-command no), so an engine
// does not count the servers' reloads in every batch (see StartBenchNodes).
func StartBenchRedisCluster(masters, replicasEach int) (*RedisCluster, error) {
	return startCluster(masters, replicasEach, false)
}

func startCluster(masters, replicasEach int, debug bool) (*RedisCluster, error) {
	if masters < 1 || masters > hashslot.Count || replicasEach < 0 {
		return nil, fmt.Errorf("redisproc: a Redis Cluster needs 1 to %d masters and replicasEach >= 0, got %d and %d", hashslot.Count, masters, replicasEach)
	}
	bin, err := system.find(redisServerTool)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterStartTimeout)
	defer cancel()
	c := &RedisCluster{}
	for range masters * (1 + replicasEach) {
		n, bus, err := newClusterNode(bin, debug)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Servers = append(c.Servers, n)
		c.members = append(c.members, member{bus: bus})
	}
	if err := c.form(ctx, masters, replicasEach); err != nil {
		c.Close()
		return nil, fmt.Errorf("redisproc: forming a Redis Cluster: %w", err)
	}
	return c, nil
}

// StartRedisClusterT is StartRedisCluster for tests: it fails the test on
// error (it never skips) and registers Close with t.Cleanup.
func StartRedisClusterT(t TB, masters, replicasEach int) *RedisCluster {
	t.Helper()
	c, err := StartRedisCluster(masters, replicasEach)
	return started(t, c, err)
}

// newClusterNode starts a cluster-enabled server on a free port, with its
// cluster bus on another free port, and returns the bus port.
func newClusterNode(bin string, debug bool) (*Node, int, error) {
	dir, err := os.MkdirTemp("", "redisproc-")
	if err != nil {
		return nil, 0, fmt.Errorf("redisproc: %w", err)
	}
	n := &Node{bin: bin, debug: debug, dir: dir}
	var bus int
	for range bindAttempts {
		var err1, err2 error
		n.port, err1 = freePort()
		bus, err2 = freePort()
		if err = errors.Join(err1, err2); err != nil {
			break
		}
		if bus == n.port {
			err = errBusy
			continue
		}
		// The arguments stay with the node: every restart uses the same
		// bus port and nodes.conf.
		n.args = []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", strconv.FormatInt(clusterNodeTimeout.Milliseconds(), 10),
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-announce-ip", "127.0.0.1",
			"--cluster-require-full-coverage", "no",
			"--repl-diskless-sync-delay", "0",
		}
		// Busy covers either port: redis-server logs "Address already
		// in use" for both.
		if err = n.launch(); !errors.Is(err, errBusy) {
			break
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, 0, err
	}
	return n, bus, nil
}

// form makes the started servers one cluster; see StartRedisCluster.
func (c *RedisCluster) form(ctx context.Context, masters, replicasEach int) error {
	for i, n := range c.Servers {
		id, err := n.Do(ctx, "CLUSTER", "MYID")
		if err != nil {
			return err
		}
		c.members[i].id = fmt.Sprint(id)
		// Masters that meet with equal config epochs (0) settle the
		// collision one bump per ping exchange; distinct epochs skip it.
		if _, err := n.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return err
		}
	}
	for i := range masters {
		first, last := masterSlots(i, masters)
		if _, err := c.Servers[i].Do(ctx, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(first), strconv.Itoa(last)); err != nil {
			return err
		}
	}
	// One node meets every other; gossip tells the others of each other.
	for i, n := range c.Servers[1:] {
		if _, err := c.Servers[0].Do(ctx, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(n.port), strconv.Itoa(c.members[i+1].bus)); err != nil {
			return err
		}
	}
	// CLUSTER REPLICATE needs the master known to the replica.
	if err := poll(ctx, time.Time{}, c.allKnown); err != nil {
		return fmt.Errorf("the nodes did not all meet: %w", err)
	}
	masterOf := func(i int) int { return (i - masters) / replicasEach }
	for i := masters; i < len(c.Servers); i++ {
		if _, err := c.Servers[i].Do(ctx, "CLUSTER", "REPLICATE", c.members[masterOf(i)].id); err != nil {
			return err
		}
	}
	err := c.waitSettled(ctx, func(s *clusterState) error {
		for i := range c.Servers {
			e := s.agreed[c.members[i].id]
			if i < masters {
				if want := slotRange(masterSlots(i, masters)); e.replica || e.slots != want {
					return fmt.Errorf("%s is %s; want master of %s", c.Servers[i].Addr(), e, want)
				}
			} else if want := c.members[masterOf(i)].id; !e.replica || e.master != want {
				return fmt.Errorf("%s is %s; want replica of %s", c.Servers[i].Addr(), e, want)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := masters; i < len(c.Servers); i++ {
		if err := c.Servers[i].waitCaughtUp(ctx, c.Servers[masterOf(i)]); err != nil {
			return err
		}
	}
	return nil
}

// masterSlots returns the first and last slot of master i of masters.
func masterSlots(i, masters int) (first, last int) {
	return i * hashslot.Count / masters, (i+1)*hashslot.Count/masters - 1
}

// slotRange writes a range of slots as CLUSTER NODES does.
func slotRange(first, last int) string {
	if first == last {
		return strconv.Itoa(first)
	}
	return fmt.Sprintf("%d-%d", first, last)
}

// allKnown is nil once every server knows every server by its id and
// address, none of them in handshake.
func (c *RedisCluster) allKnown(ctx context.Context) error {
	for _, n := range c.Servers {
		v, err := c.view(ctx, n)
		if err != nil {
			return err
		}
		if len(v.entries) != len(c.Servers) {
			return fmt.Errorf("%s knows %d nodes of %d", n.Addr(), len(v.entries), len(c.Servers))
		}
		for i, m := range c.members {
			if e, ok := v.entries[m.id]; !ok || e.addr != c.Servers[i].Addr() || e.health != "" {
				return fmt.Errorf("%s knows %s as %v", n.Addr(), m.id, e)
			}
		}
	}
	return nil
}

// Addrs returns the "127.0.0.1:port" address of every server, the seed
// addresses of a cluster client.
func (c *RedisCluster) Addrs() []string {
	return addrsOf(c.Servers)
}

// Close kills every process and removes their directories. It is
// idempotent.
func (c *RedisCluster) Close() {
	for _, n := range c.Servers {
		n.close()
	}
}

// index returns n's place in Servers, or -1.
func (c *RedisCluster) index(n *Node) int { return slices.Index(c.Servers, n) }

// byID returns the server with node id id, or nil.
func (c *RedisCluster) byID(id string) *Node {
	for i, m := range c.members {
		if m.id == id {
			return c.Servers[i]
		}
	}
	return nil
}

// ReadOnlyGet is Get on a connection in READONLY mode, for a replica of a
// Redis Cluster: it answers from its own dataset instead of redirecting to
// its master (MOVED). The connection is back to READWRITE afterwards.
func (n *Node) ReadOnlyGet(ctx context.Context, key string) (value string, ok bool, err error) {
	c, err := n.redis()
	if err != nil {
		return "", false, err
	}
	// One pipeline goes down one connection, in order.
	res := c.DoMulti(ctx, c.B().Readonly().Build(), c.B().Get().Key(key).Build(), c.B().Readwrite().Build())
	if err := errors.Join(res[0].Error(), res[2].Error()); err != nil {
		return "", false, err
	}
	value, err = res[1].ToString()
	if rueidis.IsRedisNil(err) {
		return "", false, nil
	}
	return value, err == nil, err
}

// MasterOf returns the master that serves slot now: of the running
// servers that say they are a master serving it, the one with the
// greatest config epoch. That is the one the others follow once they hear
// of it: right after a failover or the end of a slot's migration, the
// former owner may still claim the slot for a moment, with a smaller
// epoch. Servers that do not answer within a second (paused) are not
// heard. During a migration the slot's master is the source until
// Finish.
func (c *RedisCluster) MasterOf(ctx context.Context, slot int) (*Node, error) {
	if slot < 0 || slot >= hashslot.Count {
		return nil, fmt.Errorf("redisproc: no slot %d", slot)
	}
	nodes, err := c.owners(ctx)
	if err != nil {
		return nil, err
	}
	if nodes[slot] == nil {
		return nil, fmt.Errorf("redisproc: no running master of the Redis Cluster serves slot %d", slot)
	}
	return nodes[slot], nil
}

// owners is each slot's master now, as the claims of the servers settle it.
func (c *RedisCluster) owners(ctx context.Context) ([]*Node, error) {
	claims, err := c.claims(ctx)
	if err != nil {
		return nil, err
	}
	return owners(claims)
}

// Masters returns the masters that serve at least one slot now (see
// MasterOf), in the order of Servers.
func (c *RedisCluster) Masters(ctx context.Context) ([]*Node, error) {
	nodes, err := c.owners(ctx)
	if err != nil {
		return nil, err
	}
	serving := map[*Node]bool{}
	for _, n := range nodes {
		serving[n] = true
	}
	var masters []*Node
	for _, n := range c.Servers {
		if serving[n] {
			masters = append(masters, n)
		}
	}
	return masters, nil
}

// Failover fails master over to one of its replicas as an operator does,
// with CLUSTER FAILOVER on the first running server, in the order of
// Servers, that says it replicates master. mode is "" (a plain manual
// failover: the replica has master pause its writers, catches up with it,
// then gets elected), "FORCE" (elected at once, without master's
// agreement; needs a majority of the masters) or "TAKEOVER" (no election:
// the replica takes a new epoch of its own and claims the slots; works
// with most masters down).
//
// An election can take a few seconds when failovers follow each other,
// for Redis Cluster spaces them: a replica that won an election less than
// 2s before (twice the node timeout, at least 2s) "wins" again at once
// with that election's epoch, smaller than master's, and is demoted again
// as soon as master hears of it; between 2s and 4s after it, it waits for
// 4s to pass before a new election; and a master votes about the replicas
// of one master at most once in twice the node timeout, so the replica
// loses the election and tries again 4s later. A replica gives up a
// manual failover that has not switched 5s after CLUSTER FAILOVER
// (CLUSTER_MF_TIMEOUT). So Failover asks again, until ctx ends, when
// nothing switched within 6s, or 2s after it saw such a stale win.
// Measured here: a failover takes 0.2s to 0.7s, settling included; one
// asked of a replica elected a second before, 3.5s to 4s.
//
// It returns the promoted replica once its claim won (it is a master with
// an epoch greater than master's) and the cluster has settled again: every
// running server names it the master of master's slots and answers
// cluster_state:ok, master, if running, has become its replica and
// synced, and every other running replica is linked to its master. So a
// Failover may follow at once. A server that is paused makes it wait
// until ctx ends. A plain failover of a master that is down or failed is
// refused by the replica, as FORCE is needed then.
func (c *RedisCluster) Failover(ctx context.Context, master *Node, mode string) (*Node, error) {
	return c.failover(ctx, master, mode, nil)
}

// The spacing of elections in Redis Cluster (clusterHandleSlaveFailover).
const (
	// electionTimeout is auth_timeout, max(2 × node timeout, 2s): how
	// long a replica's election stays open, and how long after a win the
	// replica, demoted again, would "win" a new manual failover at once
	// with the old election's epoch.
	electionTimeout = max(2*clusterNodeTimeout, 2*time.Second)
	// askAgain is how long Failover waits for a switch before it asks
	// again: once the replica gave the manual failover up.
	askAgain = manualFailoverTimeout + time.Second
)

// failover is Failover; promoted, if not nil, runs once the replica's
// claim won, before the cluster settles.
func (c *RedisCluster) failover(ctx context.Context, master *Node, mode string, promoted func()) (*Node, error) {
	args := []string{"CLUSTER", "FAILOVER"}
	switch mode = strings.ToUpper(mode); mode {
	case "":
	case "FORCE", "TAKEOVER":
		args = append(args, mode)
	default:
		return nil, fmt.Errorf("redisproc: failover mode %q; want \"\", FORCE or TAKEOVER", mode)
	}
	i := c.index(master)
	if i < 0 {
		return nil, fmt.Errorf("redisproc: %s is not a server of the Redis Cluster", master.Addr())
	}
	replica, old, err := c.replicaOf(ctx, i)
	if err != nil {
		return nil, err
	}
	// The promoted replica must claim the slots with a greater epoch than
	// master's, as far as anyone knows it.
	if master.running() {
		if v, err := c.view(ctx, master); err == nil && v.entries[v.self].epoch > old.epoch {
			old.epoch = v.entries[v.self].epoch
		}
	}
	for won := false; !won; {
		if _, err := replica.Do(ctx, args...); err != nil {
			return nil, fmt.Errorf("redisproc: %s on %s: %w", strings.Join(args, " "), replica.Addr(), err)
		}
		var last error
		for retry := time.Now().Add(askAgain); time.Now().Before(retry); {
			v, err := c.view(ctx, replica)
			if err == nil {
				switch self := v.entries[v.self]; {
				case self.replica:
					err = fmt.Errorf("%s is %s", replica.Addr(), self)
				case self.epoch <= old.epoch:
					// A stale win: it will be demoted at once.
					err = fmt.Errorf("%s claims the slots with epoch %d, %s's is %d", replica.Addr(), self.epoch, master.Addr(), old.epoch)
					if t := time.Now().Add(electionTimeout); t.Before(retry) {
						retry = t
					}
				default:
					won = true
				}
			}
			if won {
				break
			}
			if ctx.Err() == nil {
				last = err
			}
			if err := sleep(ctx, settlePoll); err != nil {
				return nil, fmt.Errorf("redisproc: failover of %s to %s: %w; last: %v", master.Addr(), replica.Addr(), err, last)
			}
		}
	}
	if promoted != nil {
		promoted()
	}
	id, oldID := c.members[c.index(replica)].id, c.members[i].id
	err = c.waitSettled(ctx, func(s *clusterState) error {
		if e := s.agreed[id]; e.replica || e.slots != old.slots {
			return fmt.Errorf("%s is %s; want master of %q", replica.Addr(), e, old.slots)
		}
		if e := s.agreed[oldID]; master.running() && (!e.replica || e.master != id) {
			return fmt.Errorf("%s is %s; want replica of %s", master.Addr(), e, id)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redisproc: failover of %s to %s did not settle: %w", master.Addr(), replica.Addr(), err)
	}
	return replica, nil
}

// replicaOf returns the first running server that says it replicates
// Servers[i], and Servers[i] as that replica sees it.
func (c *RedisCluster) replicaOf(ctx context.Context, i int) (*Node, *clusterEntry, error) {
	master, id := c.Servers[i], c.members[i].id
	for _, n := range c.Servers {
		if n == master || !n.running() {
			continue
		}
		v, err := c.view(ctx, n)
		if err != nil {
			return nil, nil, err
		}
		if self := v.entries[v.self]; !self.replica || self.master != id {
			continue
		}
		if e := v.entries[id]; e.slots != "" {
			return n, e, nil
		}
		return nil, nil, fmt.Errorf("redisproc: %s serves no slot to fail over", master.Addr())
	}
	return nil, nil, fmt.Errorf("redisproc: no running replica of %s to fail over to", master.Addr())
}

// FailoverLosingWrites fails master over, as Failover does, to a replica
// that lacks the writes write made on master: Redis replicates
// asynchronously and acknowledges a write before any replica has it, so a
// promoted replica may lack writes the master acknowledged. Here it lacks
// them for certain. mode is FORCE or TAKEOVER: a plain CLUSTER FAILOVER
// makes the replica catch up with the master before it takes over, so it
// loses nothing (here it would wait for writes that never come, and give
// up after 5s).
//
// It first waits until every replica connected to master has every write
// master had taken, from any client, so the writes made before the call
// are kept (it compares replication offsets: WAIT would only cover the
// writes of its own connection). Then it cuts replication off at master:
// its default user may no longer run PSYNC or SYNC (ACL SETUSER), and
// CLIENT KILL TYPE replica drops the replicas' links, so the replicas keep
// their data and their place in the cluster (the cluster bus is another
// port, and knows nothing of ACLs) but cannot sync again. It calls write
// with master, then has a replica fail over. Writes of other clients that
// come between the catch-up and the cut may be kept or lost. Every write
// master takes from the cut until it hears of the new master and turns
// into its replica (write's, and those of any other client still talking
// to it, also in the few milliseconds between the switch and that; it
// hears at once, for the new master sends every node a pong) is lost: the
// promoted replica never had them, the other replicas resync from it, and
// master, whose replication offset is now ahead of the new master's
// history, gets a full resync from it that replaces its dataset. When
// FailoverLosingWrites returns, no server has them.
//
// Once the replica is promoted, master's user gets PSYNC and SYNC back.
// (Cluster servers have no config file; the ACL lives in memory, and a
// restart would forget it anyway.)
//
// The limits: master must be a running master, and its connected
// replicas must catch up within 5s, or it fails before calling write
// (with a paused master, when ctx ends). The failover has the limits of
// Failover's mode: FORCE needs a majority of the masters to vote. A
// replica, cut off, never turns down a manual failover for its data age.
// When write fails, it fails too, without a failover, and gives master
// its permissions back: the replicas then resync and get the writes after
// all.
func (c *RedisCluster) FailoverLosingWrites(ctx context.Context, master *Node, mode string, write func(master *Node) error) (*Node, error) {
	if m := strings.ToUpper(mode); m != "FORCE" && m != "TAKEOVER" {
		return nil, fmt.Errorf("redisproc: FailoverLosingWrites needs mode FORCE or TAKEOVER, got %q: a plain CLUSTER FAILOVER loses no write", mode)
	}
	if r, err := role(ctx, master); err != nil || r.role != "master" {
		return nil, fmt.Errorf("redisproc: %s answers ROLE %v, %v; want master", master.Addr(), r, err)
	}
	return failoverLosingWrites(ctx, master, c.Servers, false, write, func(restore func()) (*Node, error) {
		return c.failover(ctx, master, mode, restore)
	})
}

// KillLosingWrites kills the master that serves slot, as a crash would,
// once its replicas are cut off from the writes that write makes (as
// FailoverLosingWrites cuts them off), and waits until the cluster has
// promoted one of them (after the node timeout) and it serves slot. It
// returns the killed master, which stays down: Restart brings it back,
// empty, as a replica. The writes are lost: no running server has them.
func (c *RedisCluster) KillLosingWrites(ctx context.Context, slot int, write func(master *Node) error) (*Node, error) {
	master, err := c.MasterOf(ctx, slot)
	if err != nil {
		return nil, err
	}
	_, err = failoverLosingWrites(ctx, master, c.Servers, false, write, func(func()) (*Node, error) {
		if err := master.Kill(); err != nil {
			return nil, err
		}
		for {
			if m, err := c.MasterOf(ctx, slot); err == nil && m != master {
				return m, nil
			}
			if err := sleep(ctx, settlePoll); err != nil {
				return nil, fmt.Errorf("redisproc: no replica of %s took slot %d over: %w", master.Addr(), slot, err)
			}
		}
	})
	return master, err
}

// SnapshotRestartLosingWrites has the master that serves slot save a
// snapshot, cuts its replicas off (as FailoverLosingWrites does), runs
// write, and restarts the master from the snapshot: the writes since the
// snapshot are lost, whether it comes back as the slot's master or a
// replica took over meanwhile (after the node timeout). It returns the
// master.
func (c *RedisCluster) SnapshotRestartLosingWrites(ctx context.Context, slot int, write func(master *Node) error) (*Node, error) {
	master, err := c.MasterOf(ctx, slot)
	if err != nil {
		return nil, err
	}
	if err := master.Save(ctx); err != nil {
		return nil, err
	}
	return failoverLosingWrites(ctx, master, c.Servers, false, write, func(func()) (*Node, error) {
		return master, master.RestartFromSnapshot()
	})
}
