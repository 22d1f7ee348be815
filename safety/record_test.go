package safety

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// pair names two holdings by holder: an overlap or a regression.
type pair struct{ first, second string }

func TestRecorderCheck(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// held is one recorded holding: valid from acquired to until (ms), and,
	// when ended is set, stopped at ended (Ended caps it at until).
	type held struct {
		resource, holder       string
		acquired, until, ended int
		token                  uint64
	}
	tests := []struct {
		name        string
		holdings    []held // in recording order
		overlaps    []pair
		regressions []pair
	}{
		{name: "one after the other", holdings: []held{
			{"r", "A", 0, 100, 0, 1}, {"r", "B", 150, 250, 0, 2},
		}},
		{name: "overlap", holdings: []held{
			{"r", "A", 0, 100, 0, 1}, {"r", "B", 99, 200, 0, 2},
		}, overlaps: []pair{{"A", "B"}}},
		{name: "adjacent: acquired at the instant the other ended", holdings: []held{
			{"r", "A", 0, 100, 0, 1}, {"r", "B", 100, 200, 0, 2},
		}},
		{name: "released early, then another", holdings: []held{
			{"r", "A", 0, 100, 50, 1}, {"r", "B", 60, 160, 0, 2},
		}},
		{name: "stopped late counts until the validity deadline", holdings: []held{
			{"r", "A", 0, 100, 120, 1}, {"r", "B", 110, 210, 0, 2},
		}},
		{name: "one long holding overlaps two later ones", holdings: []held{
			{"r", "A", 0, 300, 0, 1}, {"r", "B", 50, 100, 0, 2}, {"r", "C", 150, 200, 0, 3},
		}, overlaps: []pair{{"A", "B"}, {"A", "C"}}},
		{name: "recorded out of order", holdings: []held{
			{"r", "B", 99, 200, 0, 2}, {"r", "A", 0, 100, 0, 1},
		}, overlaps: []pair{{"A", "B"}}},
		{name: "other resources never overlap", holdings: []held{
			{"r", "A", 0, 100, 0, 1}, {"s", "B", 50, 150, 0, 1},
		}},
		{name: "equal token", holdings: []held{
			{"r", "A", 0, 100, 0, 5}, {"r", "B", 150, 250, 0, 5},
		}, regressions: []pair{{"A", "B"}}},
		{name: "lower token, and an overlap", holdings: []held{
			{"r", "A", 0, 100, 0, 5}, {"r", "B", 50, 250, 0, 4},
		}, overlaps: []pair{{"A", "B"}}, regressions: []pair{{"A", "B"}}},
		{name: "no fencing: zero tokens are no regression", holdings: []held{
			{"r", "A", 0, 100, 0, 0}, {"r", "B", 150, 250, 0, 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rec Recorder
			for _, h := range tt.holdings {
				got := rec.Held(h.resource, h.holder, "v"+h.holder, at(h.acquired), at(h.until), h.token)
				if h.ended != 0 {
					rec.Ended(got, at(h.ended), at(h.until))
				}
			}
			if rec.Count() != len(tt.holdings) {
				t.Fatalf("Count = %d, want %d", rec.Count(), len(tt.holdings))
			}
			overlaps, regressions := rec.Check()
			var gotO, gotR []pair
			for _, o := range overlaps {
				gotO = append(gotO, pair{o.First.Holder, o.Second.Holder})
			}
			for _, g := range regressions {
				gotR = append(gotR, pair{g.Before.Holder, g.After.Holder})
			}
			if !slices.Equal(gotO, tt.overlaps) {
				t.Errorf("overlaps %v, want %v", gotO, tt.overlaps)
			}
			if !slices.Equal(gotR, tt.regressions) {
				t.Errorf("regressions %v, want %v", gotR, tt.regressions)
			}
		})
	}
}

func TestStale(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	second := Holding{Acquired: at(100), Wrote: at(110), Accepted: true}
	for _, tc := range []struct {
		name          string
		first, second Holding
		want          StaleWrites
	}{
		{"no write", Holding{}, second, StaleWrites{}},
		{"wrote before the newer holder acquired", Holding{Wrote: at(90), Accepted: true}, second, StaleWrites{}},
		{"refused", Holding{Wrote: at(120)}, second, StaleWrites{Rejected: 1}},
		{"accepted, newer holder not written yet", Holding{Wrote: at(105), Accepted: true}, second, StaleWrites{Early: 1}},
		{"accepted, newer holder never wrote", Holding{Wrote: at(105), Accepted: true}, Holding{Acquired: at(100)}, StaleWrites{Early: 1}},
		{"accepted after the newer holder wrote", Holding{Wrote: at(120), Accepted: true}, second, StaleWrites{Failed: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Stale([]Overlap{{tc.first, tc.second}}); got != tc.want {
				t.Fatalf("Stale = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A clock jump explains an overlap whose first holding's key sat on the
// node when its clock stepped, the second acquired after the step. A
// lapse explains one whose first holding is the lease whose keys lapsed,
// the second acquired after the lapse, as long as the lease ended by the
// validity it had then.
func TestExplains(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	held := func(resource, value string, end int) Holding {
		return Holding{Resource: resource, Value: value, Acquired: at(50), End: at(end)}
	}
	j := ClockJump{Node: 2, From: at(100), To: at(102), Ahead: time.Second,
		Keys: map[string]string{lockKey("r"): "va", lockKey("s"): "vx"}}
	l := Lapse{Resource: "r", Value: "va", At: at(100), Until: at(500)}
	first, second := held("r", "va", 300), Holding{Resource: "r", Value: "vb", Acquired: at(150), End: at(400)}
	for _, tc := range []struct {
		name          string
		why           explainer
		first, second Holding
		want          bool
	}{
		{"jump: its key was on the node", j, first, second, true},
		{"jump: another owner's key was there", j, held("r", "vother", 300), second, false},
		{"jump: no key of that resource", j, held("t", "va", 300), Holding{Resource: "t", Acquired: at(150)}, false},
		{"jump: second acquired before the step", j, first, Holding{Resource: "r", Acquired: at(90)}, false},
		{"jump: first ended before the step", j, held("r", "va", 99), second, false},
		{"lapse: lost at its next extension", l, first, second, true},
		{"lapse: ended at its validity then", l, held("r", "va", 500), second, true},
		{"lapse: held on past it", l, held("r", "va", 501), second, false},
		{"lapse: another lease", l, held("r", "vx", 300), second, false},
		{"lapse: another resource", l, held("s", "va", 300), Holding{Resource: "s", Acquired: at(150)}, false},
		{"lapse: second acquired before it", l, first, Holding{Resource: "r", Acquired: at(90)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Overlap{tc.first, tc.second}
			if got := tc.why.explains(o); got != tc.want {
				t.Fatalf("explains = %v, want %v", got, tc.want)
			}
			ours, explained := split([]Overlap{o}, []explainer{tc.why})
			if got := len(explained) == 1; got != tc.want || len(ours)+len(explained) != 1 {
				t.Fatalf("split = %d ours, %d explained", len(ours), len(explained))
			}
		})
	}
}

func TestReportOK(t *testing.T) {
	o := Overlap{Holding{Resource: "r"}, Holding{Resource: "r"}}
	for _, tc := range []struct {
		rep  Report
		want bool
	}{
		{Report{}, true},
		{Report{ClockOverlaps: []Overlap{o}, ClockStale: StaleWrites{Rejected: 3, Early: 1}}, true},
		{Report{LapseOverlaps: []Overlap{o}}, true},
		{Report{Overlaps: []Overlap{o}}, false},
		{Report{TokenRegressions: 1}, false},
		{Report{EndedWithoutDone: 1}, false},
		{Report{StaleResumes: 1}, false},
		{Report{ClockOverlaps: []Overlap{o}, ClockStale: StaleWrites{Failed: 1}}, false},
		{Report{OverlapStale: StaleWrites{Failed: 1}}, false},
	} {
		if got := tc.rep.OK(); got != tc.want {
			t.Errorf("OK() = %v for %s", got, fmt.Sprintf("%+v", tc.rep))
		}
	}
}

func TestRegressionAheadOfHost(t *testing.T) {
	at := time.Now()
	host := uint64(at.UnixMicro())
	for _, tc := range []struct {
		token uint64
		want  bool
	}{
		{host - 5, false},                    // an ordinary token: a node clock at or before the host's
		{host + 500, false},                  // within the slack for one per acquisition
		{host + 600_000, true},               // 600ms ahead: a node whose clock ran ahead
		{host + uint64(time.Hour/1e3), true}, // far ahead
	} {
		g := Regression{Before: Holding{Acquired: at, Token: tc.token}, After: Holding{Token: host}}
		if got := g.aheadOfHost(); got != tc.want {
			t.Errorf("token host%+d: aheadOfHost = %v, want %v", int64(tc.token-host), got, tc.want)
		}
	}
}
