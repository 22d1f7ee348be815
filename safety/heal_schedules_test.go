package safety

import (
	"fmt"
	"testing"
	"time"

	"github.com/redlease/redlease/engine"
	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/internal/testwait"
)

// healRun is a run over nodes fresh nodes that served redlease before,
// for one fault at a time, as Run sets it up (but for the proxies).
func healRun(t *testing.T, nodes int) *run {
	t.Helper()
	c := redisproc.Start(t, nodes)
	seedEpoch(t, c)
	r := &run{cfg: withDefaults(Config{Nodes: nodes}), cluster: c, addrs: c.Addrs(), log: newEngineLog(c.Addrs())}
	t.Cleanup(r.closeEngines)
	return r
}

// FaultHeal, once: the lease loses its key on the last node (and regains
// it there at its next extension), then on every node; another owner takes
// and releases the resource in the gap. The lease's next extension must
// find it lost: its overlap with the owner in the gap is the lapse's (it
// ended by the validity it had at the lapse), and no holding goes on
// across the gap. An extension that set the absent keys before it knew of
// a quorum (go-redsync's WithSetNXOnExtend) would make it again, and hold
// on beside that owner.
func TestScheduleLapseOfEveryKey(t *testing.T) {
	for _, nodes := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d nodes", nodes), func(t *testing.T) {
			r := healRun(t, nodes)
			if err := r.heal(t.Context(), r.rand(0), nodes-1); err != nil {
				t.Fatalf("setup: heal fault not injected: %v", err)
			}
			overlaps, _ := r.rec.Check()
			ours, lapsed := split(overlaps, r.lapses)
			if len(ours) > 0 {
				t.Errorf("two holders across the gap: %v", ours)
			}
			if len(lapsed) != 1 {
				t.Errorf("setup: %d overlaps with an owner in the gap, want 1", len(lapsed))
			}
			if lost := r.lost.Load(); lost != 1 {
				t.Errorf("%d leases lost, want the one whose keys lapsed", lost)
			}
		})
	}
}

// A lease whose key a node lost with its whole dataset (FLUSHALL, the
// epoch marker with it) does not regain that node while it sits out its
// quarantine: a heal is refused there, as an acquire is. Once the
// quarantine is over, the next extension sets the key there again, with
// the lease's value.
func TestScheduleHealAfterAFlush(t *testing.T) {
	c := redisproc.Start(t, 3)
	seedEpoch(t, c)
	ctx := t.Context()
	const resource = "flushed"
	e := newEngine(t, engine.Config{Nodes: c.Addrs(), TTL: time.Second, HealthInterval: 50 * time.Millisecond})
	h := newHolders(t, c, resource)
	l, err := e.Acquire(ctx, resource, engine.WithAutoExtend(time.Minute))
	if err != nil {
		t.Fatalf("setup: %v", err)
	}
	h.held("A", l)
	h.mustOwn(2, l.Value())
	if _, err := c.Nodes[2].Do(ctx, "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	var until time.Time
	testwait.Eventually(t, 5*time.Second, "setup: node 3 quarantined", func() bool {
		until = e.Stats().Nodes[2].QuarantinedUntil
		return until.After(time.Now())
	})
	owns := func() bool {
		v, _, err := c.Nodes[2].Get(ctx, lockKey(resource))
		if err != nil {
			t.Fatal(err)
		}
		return v == l.Value()
	}
	testwait.Never(t, time.Until(until)-20*time.Millisecond, "A's key back on node 3 while it sits out its quarantine", owns)
	testwait.Eventually(t, 3*time.Second, "A's key back on node 3 after its quarantine", owns)
	if err := l.Err(); err != nil {
		t.Fatalf("A ended: %v", err)
	}
	// The node's answer counts the heal a moment after the key is there.
	testwait.Eventually(t, 2*time.Second, "the heal counted", func() bool { return e.Stats().Nodes[2].Healed > 0 })
	if got := e.Stats().Nodes[2].Healed; got != 1 {
		t.Errorf("Stats().Nodes[2].Healed = %d, want 1", got)
	}
	h.check()
}
