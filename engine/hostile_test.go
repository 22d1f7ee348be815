package engine

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/internal/testwait"
)

// Bad input gets a clear error before anything is sent; odd but valid
// input works and locks exactly its own key.
func TestHostileInput(t *testing.T) {
	c := startNodes(t, 3)
	e := newEngine(t, c.Addrs())
	ctx := t.Context()
	for _, tc := range []struct {
		name     string
		resource string
		opts     []Option
		wantErr  string // empty: must work
	}{
		{"empty resource", "", nil, "resource must not be empty"},
		{"1 MiB resource", strings.Repeat("x", 1<<20), nil, "1048576 bytes long, at most 8192"},
		{"binary resource", "\x00\xff\n\r{}\x7f", nil, ""},
		{"braces", "a}b{c", nil, ""},
		{"unicode", "rés/ø:≠", nil, ""},
		{"longest allowed", strings.Repeat("y", MaxResourceLen), nil, ""},
		{"negative TTL", "r", []Option{WithTTL(-time.Second)}, "WithTTL must be > 0, got -1s"},
		{"TTL below drift", "r", []Option{WithTTL(time.Millisecond)}, "WithTTL must exceed the drift allowance (2.01ms), got 1ms"},
		{"TTL at node timeout", "r", []Option{WithTTL(DefaultNodeTimeout)}, "WithTTL must exceed NodeTimeout"},
		{"TTL above MaxTTL", "r", []Option{WithTTL(time.Hour)}, "WithTTL must not exceed MaxTTL (10s), got 1h0m0s (a larger Config.MaxTTL allows it"},
		{"zero maxHold", "r", []Option{WithAutoExtend(0)}, "WithAutoExtend maxHold must be > 0, got 0s"},
		{"negative maxHold", "r", []Option{WithAutoExtend(-time.Minute)}, "WithAutoExtend maxHold must be > 0, got -1m0s"},
		{"nil retry", "r", []Option{WithRetry(nil)}, "WithRetry needs a BackOff factory, got nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testwait.Eventually(t, 5*time.Second, "earlier leases' actors done with their releases", func() bool { return e.Stats().Leases == 0 })
			l, err := e.TryAcquire(ctx, tc.resource, tc.opts...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to say %q", err, tc.wantErr)
				}
				if l != nil || e.Stats().Leases != 0 {
					t.Fatalf("lease %v, %d lease actors after a refused call", l, e.Stats().Leases)
				}
				if keys, _ := c.Nodes[0].Keys(ctx, DefaultKeyPrefix+"{*"); len(keys) != 0 {
					t.Fatalf("keys after a refused call: %q", keys)
				}
				return
			}
			if err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			defer l.Release(ctx)
			// The exact key, on every node (the last grants may still be on
			// their way when Acquire returns at quorum).
			for i, n := range c.Nodes {
				testwait.Eventually(t, time.Second, fmt.Sprintf("node %d: the lease's value at the exact key", i), func() bool {
					v, _, err := n.Get(ctx, DefaultKeyPrefix+"{"+tc.resource+"}")
					if err != nil {
						t.Fatal(err)
					}
					return v == l.Value()
				})
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			waitGone(t, c, tc.resource)
		})
	}
	// Keys stay apart: a resource whose name holds braces is not another's.
	a, err := e.Acquire(ctx, "a}b")
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.TryAcquire(ctx, "a")
	if err != nil {
		t.Fatalf("%q held blocks %q: %v", "a}b", "a", err)
	}
	_, _ = a.Release(ctx), b.Release(ctx)
}

// Nodes that must not vote are refused at New, with what is wrong.
func TestNewRejectsBadNodes(t *testing.T) {
	c := startNodes(t, 3)
	addrs := c.Addrs()
	_, port, _ := net.SplitHostPort(addrs[0])

	// One server under two names would vote twice.
	_, err := New(Config{Nodes: []string{addrs[0], "localhost:" + port, addrs[1]}})
	if err == nil || !strings.Contains(err.Error(), "are the same server") {
		t.Fatalf("same server twice: err = %v", err)
	}

	// A read-only replica cannot hold locks.
	if _, err := c.Nodes[2].Do(t.Context(), "REPLICAOF", "127.0.0.1", port); err != nil {
		t.Fatal(err)
	}
	_, err = New(Config{Nodes: addrs})
	if err == nil || !strings.Contains(err.Error(), "Nodes[2]") || !strings.Contains(err.Error(), "read-only replica") {
		t.Fatalf("replica: err = %v", err)
	}
	if _, err := c.Nodes[2].Do(t.Context(), "REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
	// Its promotion, and node 1's first replica, drew new replication
	// ids: both nodes may have lost keys now, as far as engines can tell.
	if err := MarkNew(t.Context(), Config{Nodes: addrs}); err != nil {
		t.Fatal(err)
	}

	// A node that evicts keys with a TTL when its memory fills would
	// forget a lease and grant it again; UnsafeEviction accepts it.
	for _, arg := range [][]string{{"maxmemory", "64mb"}, {"maxmemory-policy", "volatile-ttl"}} {
		if _, err := c.Nodes[1].Do(t.Context(), "CONFIG", "SET", arg[0], arg[1]); err != nil {
			t.Fatal(err)
		}
	}
	_, err = New(Config{Nodes: addrs})
	if !errors.Is(err, ErrEvicting) || !strings.Contains(err.Error(), "Nodes[1]") || !strings.Contains(err.Error(), "volatile-ttl") {
		t.Fatalf("evicting node: err = %v", err)
	}
	e, err := New(Config{Nodes: addrs, UnsafeEviction: true})
	if err != nil {
		t.Fatalf("evicting node with UnsafeEviction: %v", err)
	}
	l, err := e.TryAcquire(t.Context(), "evicting")
	if err != nil {
		t.Fatalf("TryAcquire with UnsafeEviction: %v", err)
	}
	if s := fmt.Sprint(l.Release(t.Context()), e.Close()); s != "<nil> <nil>" {
		t.Fatal(s)
	}
}

// An address that accepts connections but never answers is bounded by
// ConnectTimeout; with a majority of such nodes New fails, naming them.
func TestNewWithSilentNodes(t *testing.T) {
	c := startNodes(t, 1)
	var silent []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				t.Cleanup(func() { conn.Close() })
			}
		}()
		silent = append(silent, ln.Addr().String())
	}
	start := time.Now()
	_, err := New(Config{Nodes: append(c.Addrs(), silent...), ConnectTimeout: 300 * time.Millisecond})
	if err == nil {
		t.Fatal("New with 2 of 3 nodes silent succeeded")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("New took %v with a 300ms ConnectTimeout", took)
	}
	for _, a := range silent {
		if !strings.Contains(err.Error(), a) {
			t.Fatalf("error does not name %s: %v", a, err)
		}
	}
	var ae *AcquireError
	if errors.As(err, &ae) {
		t.Fatal("New returned an AcquireError")
	}
}

// MarkNew and InspectNodes (so redlease mark-new and nodes) refuse one
// server under two names as New does (issue 45, item 7): before, MarkNew
// marked it twice and said nothing, and InspectNodes reported two
// healthy nodes.
func TestMarkNewAndInspectRefuseTheSameServerTwice(t *testing.T) {
	c := redisproc.Start(t, 3)
	addrs := c.Addrs()
	_, port, _ := net.SplitHostPort(addrs[0])
	cfg := Config{Nodes: []string{addrs[0], "localhost:" + port, addrs[1]}}
	if err := MarkNew(t.Context(), cfg); err == nil || !strings.Contains(err.Error(), "are the same server") {
		t.Fatalf("MarkNew of one server under two names: %v, want it refused", err)
	}
	if marker, ok, _ := c.Nodes[0].Get(t.Context(), DefaultKeyPrefix+"lineage"); ok {
		t.Fatalf("MarkNew refused, yet node 0 holds a marker %q", marker)
	}
	reports, err := InspectNodes(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if reports[0].Err != nil || reports[1].Err == nil || !strings.Contains(reports[1].Err.Error(), "are the same server") {
		t.Fatalf("InspectNodes: %v / %v, want the second name refused as the same server", reports[0].Err, reports[1].Err)
	}
}
