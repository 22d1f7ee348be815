package safety

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/redisproc"
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
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			if limit, _ := n.Info(ctx, "memory", "maxmemory"); limit != "0" {
				break
			}
			time.Sleep(time.Millisecond)
		}
		conn, err := net.Dial("tcp", n.Addr())
		if err != nil {
			t.Errorf("setup: %v", err)
			return
		}
		defer conn.Close()
		if _, err := conn.Write([]byte(strings.Repeat("GET big\r\n", 40))); err != nil {
			t.Errorf("setup: %v", err)
		}
		<-ctx.Done()
	})
	err = r.evict(ctx, n, 10*time.Millisecond)
	cancel()
	wg.Wait()
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
