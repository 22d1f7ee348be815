package safety

import "testing"

// A seed fixes every stream of the run's choices, and streams differ;
// without one, a random seed is drawn, for the report to give.
func TestSeedFixesTheChoices(t *testing.T) {
	a, b := &run{cfg: withDefaults(Config{Seed: 7})}, &run{cfg: withDefaults(Config{Seed: 7})}
	for _, stream := range []uint64{0, startStreams, joinStreams + 3} {
		if x, y := a.rand(stream).Uint64(), b.rand(stream).Uint64(); x != y {
			t.Fatalf("stream %d: seed 7 drew %d and %d", stream, x, y)
		}
	}
	if a.rand(startStreams).Uint64() == a.rand(startStreams+1).Uint64() {
		t.Fatal("two workers' streams drew the same first choice")
	}
	if c := withDefaults(Config{}); c.Seed == 0 {
		t.Fatal("no seed drawn for a run without one")
	}
}
