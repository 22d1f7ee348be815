package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redlease/redlease/internal/redisproc"
)

// Two deployments on one server, in databases 0 and 1 with the default
// KeyPrefix (staging beside production), and a SWAPDB 0 1 on a server
// with DEBUG off, as Redis ships (a loss is then read at each probe, not
// in each batch): the data an engine of database 0 meets is the other
// deployment's, with its marker. The marker names its database, so the
// engine does not trust it: without the database in it, the markers were
// twins, and a running engine granted a resource that the other
// database's data did not hold, while its own lease held it.
func TestSwappedDatabaseIsNotTrusted(t *testing.T) {
	bothWays(t, swappedDatabase)
}

// bothWays runs f with a TryAcquire's options that take each way a node
// checks the marker: plain (a SET in a transaction), and through the
// script (a fenced acquire).
func bothWays(t *testing.T, f func(t *testing.T, opts []Option)) {
	t.Run("plain", func(t *testing.T) { f(t, nil) })
	t.Run("script", func(t *testing.T) { f(t, []Option{WithFencing()}) })
}

func swappedDatabase(t *testing.T, opts []Option) {
	c, err := redisproc.StartBenchNodes(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	in := func(db int) func(*Config) {
		return func(cfg *Config) { cfg.Client = rueidis.ClientOption{SelectDB: db}; cfg.HealthInterval = time.Hour }
	}
	for db := range 2 {
		cfg := Config{Nodes: c.Addrs()}
		in(db)(&cfg)
		if err := MarkNew(t.Context(), cfg); err != nil {
			t.Fatal(err)
		}
	}
	a := newEngine(t, c.Addrs(), in(0))
	b := newEngine(t, c.Addrs(), in(0))
	other := newEngine(t, c.Addrs(), in(1))
	held, err := a.Acquire(t.Context(), "x")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []*Engine{b, other} { // both have used the node: they trust it
		l, err := e.Acquire(t.Context(), "warm")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Nodes[0].Do(t.Context(), "SWAPDB", "0", "1"); err != nil {
		t.Fatal(err)
	}
	l, err := b.TryAcquire(t.Context(), "x", opts...)
	if err == nil {
		t.Fatalf("after SWAPDB, %s granted x in database 0 while %s holds it", l.Value(), held.Value())
	}
	if !errors.Is(err, ErrQuarantined) && !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("after SWAPDB: %v", err)
	}
	t.Logf("after SWAPDB: %v", err)
}

// A writable replica resynced from its own replica (a botched failback:
// with replica-read-only no, an operator makes node n1 a replica of Y,
// which replicates n1): its run id, replication id, losses and marker
// are all unchanged, and it takes writes. A node that is not a master
// never grants: the batch reads its role with its replication id.
func TestWritableReplicaDoesNotGrant(t *testing.T) {
	bothWays(t, writableReplica)
}

func writableReplica(t *testing.T, opts []Option) {
	c, err := redisproc.StartBenchNodes(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	n1, y := c.Nodes[0], c.Nodes[1]
	if err := y.ReplicaOf(t.Context(), n1); err != nil { // n1 draws a new replication id here
		t.Fatal(err)
	}
	cfg := Config{Nodes: []string{n1.Addr()}, HealthInterval: time.Hour}
	if err := MarkNew(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, cfg.Nodes, func(c *Config) { *c = cfg })
	l, err := e.Acquire(t.Context(), "warm")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	replid, _ := n1.Info(t.Context(), "replication", "master_replid")
	if _, err := n1.Do(t.Context(), "CONFIG", "SET", "replica-read-only", "no"); err != nil {
		t.Fatal(err)
	}
	if err := n1.ReplicaOf(t.Context(), y); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = n1.Do(t.Context(), "REPLICAOF", "NO", "ONE") })
	if now, _ := n1.Info(t.Context(), "replication", "master_replid"); now != replid {
		t.Logf("the replication id changed (%s, was %s): the marker check alone refuses", now, replid)
	}
	if l, err := e.TryAcquire(t.Context(), "x", opts...); err == nil {
		t.Fatalf("a replica granted %s", l.Value())
	} else {
		t.Logf("on the replica: %v", err)
	}
}
