package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/internal/testwait"
)

// expiry is when the lock key of resource expires on n (PEXPIRETIME: the
// node's own reading, free of when the test asks); zero when it has none.
func expiry(t *testing.T, n *redisproc.Node, resource string) time.Time {
	t.Helper()
	v, err := n.Do(t.Context(), "PEXPIRETIME", lockKey(resource))
	ms, ok := v.(int64)
	if err != nil || !ok {
		t.Fatalf("PEXPIRETIME on %s: %v (%v)", n.Addr(), v, err)
	}
	if ms < 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// A lease that lost its key on one node regains it there at its next
// extension, with its own value and no longer to live than its keys on the
// other nodes. The heal's TTL is what the TTL has left since the round
// started: with one node stalled, the round is decided late, and the
// healed key expires with the prompt node's key, well before the stalled
// node's, which the round extended only as the stall ended.
func TestExtensionHealsALostKey(t *testing.T) {
	const resource, ttl, stall = "healed", 2 * time.Second, 300 * time.Millisecond
	c := startNodes(t, 3)
	e := newEngine(t, c.Addrs(), func(cfg *Config) { cfg.NodeTimeout = 2 * stall })
	ctx := t.Context()
	l, err := e.Acquire(ctx, resource, WithTTL(ttl), WithAutoExtend(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	lost, healthy := c.Nodes[2], c.Nodes[:2]
	lose := func() {
		t.Helper()
		if _, err := lost.Do(ctx, "DEL", lockKey(resource)); err != nil {
			t.Fatal(err)
		}
	}
	regained := func(what string) {
		t.Helper()
		testwait.Eventually(t, ttl, what, func() bool {
			v, _, err := lost.Get(ctx, lockKey(resource))
			if err != nil {
				t.Fatal(err)
			}
			return v == l.Value()
		})
	}

	lose()
	waitExtended(t, l, 1, 2*ttl)
	regained("the key back on node 3 after an auto-extension")
	// Read the healed key first: an extension meanwhile only moves the
	// others' later. The heal's own trip to its node may have taken longer
	// than the extensions' did, by slack at most on a loaded machine.
	const slack = 50 * time.Millisecond
	healed := expiry(t, lost, resource)
	for i, n := range healthy {
		if other := expiry(t, n, resource); healed.After(other.Add(slack)) {
			t.Errorf("the healed key expires %v after node %d's", healed.Sub(other), i+1)
		}
	}
	if got := e.Stats().Nodes[2].Healed; got != 1 {
		t.Errorf("Stats().Nodes[2].Healed = %d, want 1", got)
	}

	// Right after an extension (not one whose event waited in the
	// channel): the next one is a third of the TTL away.
	for len(l.Events()) > 0 {
		<-l.Events()
	}
	waitExtended(t, l, 1, 2*ttl)
	lose()
	if _, err := healthy[1].Stall(stall); err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx); err != nil {
		t.Fatalf("Extend with node 2 stalled: %v", err)
	}
	regained("the key back on node 3 after a round decided late")
	healed = expiry(t, lost, resource)
	prompt, late := expiry(t, healthy[0], resource), expiry(t, healthy[1], resource)
	if d := healed.Sub(prompt); d < -slack || d > slack {
		t.Errorf("the healed key expires %v from the prompt node's, want with it", d)
	}
	if d := late.Sub(healed); d < stall/2 {
		t.Errorf("the healed key expires %v before the stalled node's, want about %v: a heal for the whole TTL?", d, stall)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Release answers once a quorum deleted the key: the third node's
	// delete may still be on its way.
	testwait.Eventually(t, time.Second, "every key deleted after the release", func() bool {
		return fmt.Sprint(values(t, c, resource)) == "[  ]"
	})
}
