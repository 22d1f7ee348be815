package safety

import (
	"testing"
	"time"

	"github.com/redlease/redlease/engine"
)

// A node whose answers take longer than a probe's first bound (a link as
// slow as a process starved of CPU makes it) serves again once a probe
// waits long enough: each probe that runs out of time gives the next one
// twice as long. With a fixed bound every probe failed and the node
// stayed down for good; under a loaded CI machine, that was every node
// of a bounded run for minutes on end.
func TestProbeOutlastsASlowLink(t *testing.T) {
	_, p := proxiedNode(t)
	e := newEngine(t, engine.Config{Nodes: []string{p.Addr()}, TTL: 10 * time.Second, HealthInterval: 100 * time.Millisecond})
	events, cancel := e.Subscribe(64)
	defer cancel()
	// Each chunk waits 120ms each way: a probe's round trip is at least
	// 240ms, beyond its first 100ms bound, within its fourth.
	p.SetDelay(120 * time.Millisecond)
	deadline := time.After(15 * time.Second)
	down := false
	for {
		select {
		case ev := <-events:
			switch ev.Kind {
			case engine.NodeDown:
				down = true
			case engine.NodeServing:
				if down {
					t.Logf("down, then serving again behind the slow link")
					return
				}
			}
		case <-deadline:
			t.Fatalf("no probe succeeded behind the slow link in 15s (down: %v): %+v", down, e.Stats().Nodes)
		}
	}
}
