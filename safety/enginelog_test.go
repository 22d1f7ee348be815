package safety

import (
	"testing"
	"time"
)

// The engine log keeps redlease's lines, names nodes by index, and gives
// an overlap the lines of its two engines: of their nodes, and of their
// leases on its resource only.
func TestEngineLog(t *testing.T) {
	l := newEngineLog([]string{"127.0.0.1:1", "127.0.0.1:2"})
	start := time.Now()
	l.logger("e0").Warn("redlease: node down", "node", "127.0.0.1:2")
	l.logger("e0").Info("redlease: acquired", "resource", "r1")
	l.logger("e0").Info("redlease: acquired", "resource", "r2")
	l.logger("e1").Info("actor started") // protoactor's: not kept
	l.logger("e2").Warn("redlease: node down", "node", "127.0.0.1:1")
	l.logger("e1").Debug("redlease: vote", "resource", "r1") // below Info

	got := l.between(start, time.Now(), "r1", "e0", "e1")
	var texts []string
	for _, line := range got {
		texts = append(texts, line.Engine+": "+line.Text)
	}
	want := []string{"e0: node down node=node 1", "e0: acquired resource=r1"}
	if len(texts) != len(want) {
		t.Fatalf("lines %q, want %q", texts, want)
	}
	for i := range want {
		if texts[i] != want[i] {
			t.Fatalf("lines %q, want %q", texts, want)
		}
	}
	if engineOf("idle2@3.1s") != "idle2" || engineOf("e1/w3") != "e1" {
		t.Fatal("engineOf")
	}
}
