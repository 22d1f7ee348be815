package safety

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/internal/testwait"
)

// The eviction fault injects under load (issue 27, item 10): memory the
// node cannot evict (here another client's keys without a TTL; under
// load, the engines' buffers) outgrows the headroom the fault gave it, and
// its writes meet "OOM command not allowed". It must fill on, and the node
// evict.
func TestEvictionFaultUnderLoad(t *testing.T) {
	c := redisproc.Start(t, 1)
	n := c.Nodes[0]
	r := &run{cluster: c}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	before, err := n.Info(ctx, "stats", "evicted_keys")
	if err != nil {
		t.Fatal(err)
	}

	// Once the fault set its limit, before it fills, a client that does
	// not read its replies (a worker starved of CPU, under load) asks for
	// a 1 MB value 40 times: the replies wait in the node's memory, which
	// it cannot evict.
	if err := n.Set(ctx, "big", strings.Repeat("y", 1<<20), 0); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- r.evict(ctx, n, 10*time.Millisecond) }()
	// The fault sets a limit far above the node's use first, and waits two
	// probes (200ms) before it fills: long beside a poll.
	testwait.Eventually(t, 10*time.Second, "setup: the fault's memory limit set", func() bool {
		limit, _ := n.Info(ctx, "memory", "maxmemory")
		return limit != "0"
	})
	conn, err := net.Dial("tcp", n.Addr())
	if err != nil {
		t.Fatalf("setup: %v", err)
	}
	defer conn.Close() // after the fault: the replies wait until then
	if _, err := conn.Write([]byte(strings.Repeat("GET big\r\n", 40))); err != nil {
		t.Fatalf("setup: %v", err)
	}
	err = <-errc
	cancel()
	if err != nil {
		t.Fatalf("eviction fault not injected: %v", err)
	}
	after, err := n.Info(t.Context(), "stats", "evicted_keys")
	if err != nil {
		t.Fatal(err)
	}
	if atoi(after) <= atoi(before) {
		t.Fatalf("the node evicted nothing (evicted_keys %s, then %s)", before, after)
	}
	if policy, _ := n.Info(t.Context(), "memory", "maxmemory_policy"); policy != "noeviction" {
		t.Fatalf("maxmemory-policy left at %s", policy)
	}
}
