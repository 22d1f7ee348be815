package safety

import (
	"fmt"
	"testing"
	"time"
)

func TestRecorderCheck(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var rec Recorder
	a := rec.Held("r", "A", "va", at(0), at(100), 1)
	rec.Ended(a, at(50), at(100)) // released early
	rec.Held("r", "B", "vb", at(60), at(160), 2)
	rec.Held("r", "C", "vc", at(150), at(250), 2) // overlaps B; token not larger
	rec.Held("other", "D", "vd", at(155), at(255), 1)
	overlaps, regressions := rec.Check()
	if len(overlaps) != 1 || overlaps[0].First.Holder != "B" || overlaps[0].Second.Holder != "C" {
		t.Fatalf("overlaps = %v, want B then C", overlaps)
	}
	if len(regressions) != 1 || regressions[0].Before.Holder != "B" || regressions[0].After.Holder != "C" {
		t.Fatalf("regressions = %v, want B then C", regressions)
	}
	if rec.Count() != 4 {
		t.Fatalf("Count = %d", rec.Count())
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

func TestClockJumpExplains(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	j := ClockJump{Node: 2, From: at(100), To: at(102), Ahead: time.Second,
		Keys: map[string]string{lockKey("r"): "va", lockKey("s"): "vx"}}
	first := Holding{Resource: "r", Value: "va", Acquired: at(50), End: at(300)}
	second := Holding{Resource: "r", Value: "vb", Acquired: at(150), End: at(400)}
	for _, tc := range []struct {
		name          string
		first, second Holding
		want          bool
	}{
		{"its key was on the node", first, second, true},
		{"another owner's key was there", Holding{Resource: "r", Value: "vother", Acquired: at(50), End: at(300)}, second, false},
		{"no key of that resource", Holding{Resource: "t", Value: "va", Acquired: at(50), End: at(300)}, Holding{Resource: "t", Acquired: at(150)}, false},
		{"second acquired before the step", first, Holding{Resource: "r", Acquired: at(90)}, false},
		{"first ended before the step", Holding{Resource: "r", Value: "va", Acquired: at(50), End: at(99)}, second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Overlap{tc.first, tc.second}
			if got := j.explains(o); got != tc.want {
				t.Fatalf("explains = %v, want %v", got, tc.want)
			}
			ours, clock := splitClock([]Overlap{o}, []ClockJump{j})
			if got := len(clock) == 1; got != tc.want || len(ours)+len(clock) != 1 {
				t.Fatalf("splitClock = %d ours, %d clock", len(ours), len(clock))
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
		{Report{Overlaps: []Overlap{o}}, false},
		{Report{TokenRegressions: 1}, false},
		{Report{EndedWithoutDone: 1}, false},
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
