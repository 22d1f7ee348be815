package redisproc

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/hashslot"
)

// clusterQuiet fails the test if a server's log shows a hitch: a node
// failed by the others (FAIL), the cluster failing, or a manual failover
// given up. Nothing in these tests should cause one.
func clusterQuiet(t *testing.T, c *RedisCluster) {
	t.Helper()
	for _, n := range c.Servers {
		log, err := os.ReadFile(filepath.Join(n.dir, "redis.log"))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(log), "\n") {
			for _, bad := range []string{"as failing (quorum reached)", "FAIL message received", "Cluster state changed: fail", "Manual failover timed out"} {
				if strings.Contains(line, bad) {
					t.Errorf("%s: %s", n.Addr(), line)
				}
			}
		}
	}
}

// startRedisCluster is StartRedisClusterT, with clusterQuiet run at the end
// of the test.
func startRedisCluster(t *testing.T, masters, replicasEach int) *RedisCluster {
	t.Helper()
	start := time.Now()
	c := StartRedisClusterT(t, masters, replicasEach)
	t.Logf("StartRedisCluster(%d, %d) took %v", masters, replicasEach, time.Since(start))
	t.Cleanup(func() { clusterQuiet(t, c) }) // before Close removes the logs
	return c
}

// keyOn returns a key, with prefix, whose slot master serves now.
func keyOn(t *testing.T, ctx context.Context, c *RedisCluster, master *Node, prefix string) string {
	t.Helper()
	for i := range 1000 {
		k := fmt.Sprintf("%s%d", prefix, i)
		if m, err := c.MasterOf(ctx, hashslot.Of(k)); err != nil {
			t.Fatal(err)
		} else if m == master {
			return k
		}
	}
	t.Fatalf("no key with prefix %q on %s", prefix, master.Addr())
	return ""
}

// wantShard fails the test unless master serves slot and every server
// of replicas answers ROLE slave of it (connected), and the cluster is
// settled.
func wantShard(t *testing.T, ctx context.Context, c *RedisCluster, slot int, master *Node, replicas ...*Node) {
	t.Helper()
	if m, err := c.MasterOf(ctx, slot); err != nil || m != master {
		t.Fatalf("MasterOf(%d) = %v, %v; want %s", slot, m, err, master.Addr())
	}
	wantRole(t, ctx, master, "master")
	for _, r := range replicas {
		wantRole(t, ctx, r, "slave of "+master.Addr()+" (connected)")
	}
	if _, err := c.settled(ctx); err != nil {
		t.Fatalf("not settled: %v", err)
	}
}

// replicatedTo writes key on master and waits until its replicas have it.
func replicatedTo(t *testing.T, ctx context.Context, master *Node, key string, replicas ...*Node) {
	t.Helper()
	if err := master.Set(ctx, key, "v", 0); err != nil {
		t.Fatal(err)
	}
	if n, err := master.Do(ctx, "WAIT", strconv.Itoa(len(replicas)), "5000"); err != nil || n != int64(len(replicas)) {
		t.Fatalf("WAIT = %v, %v; want %d replicas", n, err, len(replicas))
	}
	for _, r := range replicas {
		if v, ok, err := r.ReadOnlyGet(ctx, key); err != nil || !ok || v != "v" {
			t.Fatalf("%s: GET %s = %q, %v, %v after WAIT", r.Addr(), key, v, ok, err)
		}
	}
}

// askingDo sends ASKING then one command to n on one connection, as a
// client does after an ASK redirection.
func askingDo(ctx context.Context, n *Node, args ...string) (any, error) {
	c, err := n.redis()
	if err != nil {
		return nil, err
	}
	res := c.DoMulti(ctx, c.B().Asking().Build(), c.B().Arbitrary(args[0]).Args(args[1:]...).Build())
	if err := res[0].Error(); err != nil {
		return nil, err
	}
	return res[1].ToAny()
}

// TestRedisCluster checks a started cluster, then moves slots, then
// restarts servers, on one cluster: each start takes 2s.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	c := startRedisCluster(t, 3, 1)
	ctx := ctxTimeout(t, 25*time.Second)
	t.Run("Start", func(t *testing.T) {
		if len(c.Servers) != 6 {
			t.Fatalf("%d servers, want 6", len(c.Servers))
		}
		seen := map[string]bool{}
		for i, a := range c.Addrs() {
			if a != c.Servers[i].Addr() || seen[a] {
				t.Fatalf("Addrs() = %v", c.Addrs())
			}
			seen[a] = true
		}

		// Every server agrees on the slot map, with the masters in order.
		s, err := c.settled(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range []string{"0-5460", "5461-10921", "10922-16383"} {
			if e := s.agreed[c.members[i].id]; e.replica || e.slots != want {
				t.Errorf("%s is %s; want master of %s", c.Servers[i].Addr(), e, want)
			}
		}
		for _, n := range c.Servers {
			if state, err := n.Do(ctx, "CLUSTER", "INFO"); err != nil || !strings.Contains(fmt.Sprint(state), "cluster_state:ok") || !strings.Contains(fmt.Sprint(state), "cluster_slots_assigned:16384") {
				t.Errorf("%s: CLUSTER INFO = %v, %v", n.Addr(), state, err)
			}
		}
		masters, err := c.Masters(ctx)
		if err != nil || !slices.Equal(masters, c.Servers[:3]) {
			t.Fatalf("Masters = %v, %v; want the first three servers", masters, err)
		}
		for i, slots := range [][2]int{{0, 5460}, {5461, 10921}, {10922, 16383}} {
			for _, slot := range slots {
				wantShard(t, ctx, c, slot, c.Servers[i], c.Servers[3+i])
			}
		}

		// A key written through its slot's master is on its replica, which
		// answers a plain GET with MOVED to the master; another master
		// refuses it with MOVED.
		for i := range 3 {
			master, replica := c.Servers[i], c.Servers[3+i]
			k := keyOn(t, ctx, c, master, "k")
			replicatedTo(t, ctx, master, k, replica)
			want := fmt.Sprintf("MOVED %d %s", hashslot.Of(k), master.Addr())
			if _, _, err := replica.Get(ctx, k); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("plain GET on the replica: %v; want %s", err, want)
			}
			if err := c.Servers[(i+1)%3].Set(ctx, k, "x", 0); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("SET on another master: %v; want %s", err, want)
			}
		}

		// Slot is CLUSTER KEYSLOT.
		keys := []string{"", "foo", "{", "}", "{}", "{}a", "a{}", "{a}", "a{b}c", "{a}{b}", "{{a}}", "}{a}", "a{b", "{user1000}.following"}
		rng := rand.New(rand.NewPCG(1, 2))
		for range 200 {
			b := make([]byte, rng.IntN(12))
			for i := range b {
				b[i] = "ab{}xyz\x00\xff"[rng.IntN(9)]
			}
			keys = append(keys, string(b))
		}
		for _, k := range keys {
			if v, err := c.Servers[0].Do(ctx, "CLUSTER", "KEYSLOT", k); err != nil || v != int64(hashslot.Of(k)) {
				t.Errorf("CLUSTER KEYSLOT %q = %v, %v; Slot = %d", k, v, err, hashslot.Of(k))
			}
		}
	})
	t.Run("MigrateSlot", func(t *testing.T) {
		from, to := c.Servers[0], c.Servers[1]
		ttl := time.Minute

		// MigrateSlot in one go.
		k := keyOn(t, ctx, c, from, "ttl")
		if err := from.Set(ctx, k, "v", ttl); err != nil {
			t.Fatal(err)
		}
		before, err := from.PTTL(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := c.MigrateSlot(ctx, hashslot.Of(k), to); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		t.Logf("MigrateSlot took %v", took)
		after, err := to.PTTL(ctx, k)
		if err != nil || after > before || after < before-took-100*time.Millisecond {
			t.Fatalf("PTTL after MigrateSlot = %v, %v; before %v, and the move took %v", after, err, before, took)
		}
		wantShard(t, ctx, c, hashslot.Of(k), to, c.Servers[4])
		if _, _, err := from.Get(ctx, k); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("MOVED %d %s", hashslot.Of(k), to.Addr())) {
			t.Errorf("GET on the former master: %v; want MOVED to %s", err, to.Addr())
		}
		if v, ok, err := c.Servers[4].ReadOnlyGet(ctx, k); err != nil || !ok || v != "v" {
			t.Errorf("the new master's replica: GET = %q, %v, %v", v, ok, err)
		}

		// Half moved: one key moved, one not.
		tag := keyOn(t, ctx, c, from, "")
		moved, stays := "{"+tag+"}moved", "{"+tag+"}stays"
		slot := hashslot.Of(tag)
		for _, key := range []string{moved, stays} {
			if err := from.Set(ctx, key, key, ttl); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.StartSlotMigration(ctx, slot, to, "other"); err == nil {
			t.Fatal("StartSlotMigration moved a key of another slot")
		}
		m, err := c.StartSlotMigration(ctx, slot, to, moved)
		if err != nil {
			t.Fatal(err)
		}
		if m.Slot != slot || m.From != from || m.To != to {
			t.Fatalf("migration %d from %s to %s", m.Slot, m.From.Addr(), m.To.Addr())
		}
		ask := fmt.Sprintf("ASK %d %s", slot, to.Addr())
		if _, _, err := from.Get(ctx, moved); err == nil || !strings.Contains(err.Error(), ask) {
			t.Errorf("GET of the moved key on the source: %v; want %s", err, ask)
		}
		if err := from.Set(ctx, "{"+tag+"}new", "v", ttl); err == nil || !strings.Contains(err.Error(), ask) {
			t.Errorf("SET of a new key on the source: %v; want %s", err, ask)
		}
		if v, ok, err := from.Get(ctx, stays); err != nil || !ok || v != stays {
			t.Errorf("GET of the other key on the source = %q, %v, %v", v, ok, err)
		}
		if _, err := from.Do(ctx, "MGET", moved, stays); err == nil || !strings.Contains(err.Error(), "TRYAGAIN") {
			t.Errorf("MGET of both keys on the source: %v; want TRYAGAIN", err)
		}
		if _, _, err := to.Get(ctx, moved); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("MOVED %d %s", slot, from.Addr())) {
			t.Errorf("plain GET on the destination: %v; want MOVED to the source", err)
		}
		if v, err := askingDo(ctx, to, "GET", moved); err != nil || v != moved {
			t.Errorf("ASKING GET on the destination = %v, %v", v, err)
		}
		if owner, err := c.MasterOf(ctx, slot); err != nil || owner != from {
			t.Errorf("MasterOf(%d) while half moved = %v, %v; want the source", slot, owner, err)
		}
		if err := m.Finish(ctx); err != nil {
			t.Fatal(err)
		}
		wantShard(t, ctx, c, slot, to, c.Servers[4])
		for _, key := range []string{moved, stays} {
			if v, ok, err := to.Get(ctx, key); err != nil || !ok || v != key {
				t.Errorf("GET %s on the destination = %q, %v, %v", key, v, ok, err)
			}
			if d, err := to.PTTL(ctx, key); err != nil || d <= 0 || d > ttl {
				t.Errorf("PTTL %s on the destination = %v, %v", key, d, err)
			}
		}
		if keys, err := from.Do(ctx, "CLUSTER", "COUNTKEYSINSLOT", strconv.Itoa(slot)); err != nil || keys != int64(0) {
			t.Errorf("the source has %v keys left in the slot, %v", keys, err)
		}
	})
	t.Run("RestartKeepsIdentity", func(t *testing.T) {
		master, replica := c.Servers[0], c.Servers[3]
		k := keyOn(t, ctx, c, master, "k")
		replicatedTo(t, ctx, master, k, replica)
		for _, n := range []*Node{replica, master} {
			id, err := n.Do(ctx, "CLUSTER", "MYID")
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := n.Restart(); err != nil {
				t.Fatal(err)
			}
			if id2, err := n.Do(ctx, "CLUSTER", "MYID"); err != nil || id2 != id {
				t.Fatalf("%s: CLUSTER MYID after Restart = %v, %v; want %v", n.Addr(), id2, err, id)
			}
			if err := c.waitSettled(ctx, nil); err != nil {
				t.Fatalf("after the restart of %s: %v", n.Addr(), err)
			}
			t.Logf("%s settled %v after its Restart began", n.Addr(), time.Since(start))
			wantShard(t, ctx, c, hashslot.Of(k), master, replica)
			if n == replica { // it got the key back from its master
				if v, ok, err := replica.ReadOnlyGet(ctx, k); err != nil || !ok || v != "v" {
					t.Errorf("restarted replica: GET %s = %q, %v, %v", k, v, ok, err)
				}
			}
		}
		// The restarted master came back empty, and its replica resynced that.
		for _, n := range []*Node{master, replica} {
			if _, ok, err := n.ReadOnlyGet(ctx, k); err != nil || ok {
				t.Errorf("%s: GET %s after the master's restart: %v, %v; want no key", n.Addr(), k, ok, err)
			}
		}
	})
}

func TestRedisClusterFailover(t *testing.T) {
	t.Parallel()
	c := startRedisCluster(t, 3, 1)
	ctx := ctxTimeout(t, 25*time.Second)
	// failover fails shard i's master over and checks the outcome: the
	// new master has every slot of the old one, which follows it, and
	// the data.
	failover := func(i int, mode string, old, replica *Node) {
		t.Helper()
		k := keyOn(t, ctx, c, old, "k")
		replicatedTo(t, ctx, old, k, replica)
		start := time.Now()
		next, err := c.Failover(ctx, old, mode)
		if err != nil {
			t.Fatalf("Failover %q: %v", mode, err)
		}
		t.Logf("Failover %q of %s took %v", mode, old.Addr(), time.Since(start))
		if next != replica {
			t.Fatalf("Failover %q promoted %s, want %s", mode, next.Addr(), replica.Addr())
		}
		first, last := masterSlots(i, 3)
		for _, slot := range []int{first, last} {
			wantShard(t, ctx, c, slot, next, old)
		}
		if v, ok, err := next.Get(ctx, k); err != nil || !ok || v != "v" {
			t.Errorf("new master: GET %s = %q, %v, %v", k, v, ok, err)
		}
		replicatedTo(t, ctx, next, "{"+k+"}after", old)
	}
	// Back and forth at once: the third is asked of a replica that won an
	// election a second or so before, whose first "win" is stale.
	failover(0, "FORCE", c.Servers[0], c.Servers[3])
	failover(0, "FORCE", c.Servers[3], c.Servers[0])
	failover(0, "FORCE", c.Servers[0], c.Servers[3])
	failover(1, "TAKEOVER", c.Servers[1], c.Servers[4])
	failover(2, "", c.Servers[2], c.Servers[5])
	masters, err := c.Masters(ctx)
	if err != nil || !slices.Equal(masters, c.Servers[3:]) {
		t.Fatalf("Masters = %v, %v; want the last three servers", masters, err)
	}

	if _, err := c.Failover(ctx, c.Servers[3], "NOW"); err == nil {
		t.Error("Failover with mode NOW did not fail")
	}
	if _, err := c.Failover(ctx, c.Servers[0], ""); err == nil {
		t.Error("Failover of a replica did not fail")
	}
}

func TestRedisClusterFailoverLosingWrites(t *testing.T) {
	t.Parallel()
	c := startRedisCluster(t, 3, 1)
	ctx := ctxTimeout(t, 25*time.Second)
	if _, err := c.FailoverLosingWrites(ctx, c.Servers[0], "", func(*Node) error {
		t.Error("write called for a plain failover")
		return nil
	}); err == nil {
		t.Error("FailoverLosingWrites with a plain failover did not fail")
	}
	for i, mode := range []string{"FORCE", "TAKEOVER"} {
		old, replica := c.Servers[i], c.Servers[3+i]
		kept, lost := keyOn(t, ctx, c, old, "kept"), keyOn(t, ctx, c, old, "lost")
		replicatedTo(t, ctx, old, kept, replica)
		// Kept too: written just before the call, on a connection of its
		// own, with no WAIT.
		other := "{" + kept + "}other"
		if _, err := command(old.Addr(), "SET", other, "v"); err != nil {
			t.Fatal(err)
		}

		start := time.Now()
		next, err := c.FailoverLosingWrites(ctx, old, mode, func(m *Node) error {
			if m != old {
				t.Errorf("write got %s, want the master %s", m.Addr(), old.Addr())
			}
			if err := m.Set(ctx, lost, "v", 0); err != nil {
				return err
			}
			// Given time to replicate, it still does not.
			time.Sleep(100 * time.Millisecond)
			if _, ok, err := replica.ReadOnlyGet(ctx, lost); err != nil || ok {
				t.Errorf("replica %s got the write: %v, %v", replica.Addr(), ok, err)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("FailoverLosingWrites %s: %v", mode, err)
		}
		t.Logf("FailoverLosingWrites %s of %s took %v", mode, old.Addr(), time.Since(start))
		if next != replica {
			t.Fatalf("promoted %s, want %s", next.Addr(), replica.Addr())
		}
		wantShard(t, ctx, c, hashslot.Of(lost), next, old)
		for _, n := range []*Node{old, next} {
			// KEYS answers from the server's own dataset, replica or not.
			keys, err := n.Keys(ctx, "*")
			slices.Sort(keys)
			if want := []string{kept, other}; err != nil || !slices.Equal(keys, want) {
				t.Errorf("%s has keys %q, %v; want %q", n.Addr(), keys, err, want)
			}
		}
		if v, err := old.Do(ctx, "ACL", "LIST"); err != nil || strings.Contains(fmt.Sprint(v), "sync") {
			t.Errorf("ACL LIST of the old master = %v, %v", v, err)
		}
		// The old master, a replica now, syncs from the new one.
		replicatedTo(t, ctx, next, lost, old)
	}
}

func TestParseClusterNodes(t *testing.T) {
	t.Parallel()
	a, b, c := strings.Repeat("a", 40), strings.Repeat("b", 40), strings.Repeat("c", 40)
	text := a + " 127.0.0.1:7000@17000 myself,master - 0 0 3 connected 0-100 102 [101->-" + b + "] [200-<-" + b + "]\n" +
		b + " 127.0.0.1:7001@17001,host.example master,fail? - 1700000000000 1700000000000 5 disconnected 101 103-16383\n" +
		c + " 127.0.0.1:7002@17002 slave " + a + " 0 1700000000000 3 connected\n"
	v, err := parseClusterNodes(text)
	if err != nil {
		t.Fatal(err)
	}
	if v.self != a || len(v.entries) != 3 {
		t.Fatalf("self %s, %d entries", v.self, len(v.entries))
	}
	ea, eb, ec := v.entries[a], v.entries[b], v.entries[c]
	if ea.addr != "127.0.0.1:7000" || ea.replica || ea.epoch != 3 || ea.slots != "0-100 102" || !ea.linked || ea.health != "" ||
		!slices.Equal(ea.moving, []string{"[101->-" + b + "]", "[200-<-" + b + "]"}) {
		t.Errorf("myself: %+v", ea)
	}
	if eb.addr != "127.0.0.1:7001" || eb.health != "fail?" || eb.linked || eb.slots != "101 103-16383" || eb.moving != nil {
		t.Errorf("failing master: %+v", eb)
	}
	if !ec.replica || ec.master != a || ec.epoch != 3 || ec.slots != "" {
		t.Errorf("replica: %+v", ec)
	}
	for slot, want := range map[int]bool{0: true, 100: true, 101: false, 102: true, 103: false, 200: false} {
		if ea.owns(slot) != want {
			t.Errorf("owns(%d) = %v", slot, !want)
		}
	}
	claims := []claim{{&Node{port: 7000}, ea}, {&Node{port: 7001}, eb}, {&Node{port: 7002}, ec}}
	nodes, err := owners(claims)
	if err != nil || nodes[0] != claims[0].node || nodes[101] != claims[1].node || nodes[16383] != claims[1].node {
		t.Errorf("owners = %v, %v", nodes[:2], err)
	}
	eb.slots = "0" // a claim on slot 0 with a greater epoch wins it
	if nodes, err := owners(claims); err != nil || nodes[0] != claims[1].node || nodes[1] != claims[0].node {
		t.Errorf("owners with a conflict = %v, %v", nodes[:2], err)
	}
	eb.epoch = 3
	if _, err := owners(claims); err == nil {
		t.Error("owners of a slot claimed with equal epochs did not fail")
	}
	if _, err := parseClusterNodes(b + " 127.0.0.1:7001@17001 master - 0 0 5 connected\n"); err == nil {
		t.Error("a view without myself parsed")
	}
}
