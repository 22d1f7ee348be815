package lease

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestDrift(t *testing.T) {
	tests := []struct {
		ttl    time.Duration
		factor float64
		want   time.Duration
	}{
		{10 * time.Second, 0.01, 102 * time.Millisecond},         // 100ms + 2ms
		{time.Second, 0.01, 12 * time.Millisecond},               // 10ms + 2ms
		{time.Second, 0.1, 102 * time.Millisecond},               // 100ms + 2ms
		{100 * time.Millisecond, 0.01, 3 * time.Millisecond},     // 1ms + 2ms
		{3 * time.Millisecond, 0.01, 2030 * time.Microsecond},    // 30µs + 2ms
		{2 * time.Millisecond, 0.01, 2020 * time.Microsecond},    // 20µs + 2ms
		{150 * time.Nanosecond, 0.01, 2000001 * time.Nanosecond}, // 1.5ns truncates to 1ns
		{0, 0.01, 2 * time.Millisecond},                          // the floor alone
		{10 * time.Second, 0.25, 2502 * time.Millisecond},        // 2.5s + 2ms
	}
	for _, tt := range tests {
		if got := Drift(tt.ttl, tt.factor); got != tt.want {
			t.Errorf("Drift(%v, %v) = %v, want %v", tt.ttl, tt.factor, got, tt.want)
		}
	}
}

func TestValidity(t *testing.T) {
	tests := []struct {
		ttl, elapsed time.Duration
		factor       float64
		want         time.Duration
	}{
		{10 * time.Second, 0, 0.01, 9898 * time.Millisecond},                     // 10s − 102ms
		{10 * time.Second, 50 * time.Millisecond, 0.01, 9848 * time.Millisecond}, // 10s − 50ms − 102ms
		{time.Second, 990 * time.Millisecond, 0.01, -2 * time.Millisecond},       // 1s − 990ms − 12ms
		{time.Second, 988 * time.Millisecond, 0.01, 0},                           // exactly used up
		{time.Second, 987 * time.Millisecond, 0.01, time.Millisecond},            // 1s − 987ms − 12ms
		{100 * time.Millisecond, 0, 0.01, 97 * time.Millisecond},                 // 100ms − 3ms
		{100 * time.Millisecond, 97 * time.Millisecond, 0.01, 0},                 // 100ms − 97ms − 3ms
		{3 * time.Millisecond, 0, 0.01, 970 * time.Microsecond},                  // 3ms − 2.03ms
		{3 * time.Millisecond, time.Millisecond, 0.01, -30 * time.Microsecond},   // 3ms − 1ms − 2.03ms
		{10 * time.Second, 3 * time.Second, 0.25, 4498 * time.Millisecond},       // 10s − 3s − 2.502s
	}
	for _, tt := range tests {
		if got := validity(tt.ttl, tt.elapsed, tt.factor); got != tt.want {
			t.Errorf("validity(%v, %v, %v) = %v, want %v", tt.ttl, tt.elapsed, tt.factor, got, tt.want)
		}
	}
}

// The end margin: a fiftieth of the TTL, between 2ms and 100ms.
func TestEndMargin(t *testing.T) {
	tests := []struct{ ttl, want time.Duration }{
		{0, 2 * time.Millisecond},
		{50 * time.Millisecond, 2 * time.Millisecond}, // 1ms: the floor
		{100 * time.Millisecond, 2 * time.Millisecond},
		{time.Second, 20 * time.Millisecond},
		{3 * time.Second, 60 * time.Millisecond}, // the held benchmark's TTL
		{5 * time.Second, 100 * time.Millisecond},
		{10 * time.Second, 100 * time.Millisecond}, // 200ms: the cap
		{time.Hour, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := EndMargin(tt.ttl); got != tt.want {
			t.Errorf("EndMargin(%v) = %v, want %v", tt.ttl, got, tt.want)
		}
	}
}

// A lease ends its end margin before Until: the state says it is due then,
// not before.
func TestStateEndsBeforeUntil(t *testing.T) {
	const ttl = 3 * time.Second
	s := newState("r", 2)
	start := time.Now()
	until := start.Add(ttl)
	s.hold(start, until, EndMargin(ttl), ErrExpired)
	if !s.Until().Equal(until) {
		t.Fatalf("Until = %v, want the validity deadline %v", s.Until(), until)
	}
	if s.expireIfDue(until.Add(-EndMargin(ttl) - time.Nanosecond)) {
		t.Fatal("ended before its end margin")
	}
	if !s.expireIfDue(until.Add(-EndMargin(ttl))) {
		t.Fatal("not ended at Until minus the end margin")
	}
	if !errors.Is(s.Err(), ErrExpired) {
		t.Fatalf("Err = %v, want ErrExpired", s.Err())
	}
}

// A lease's events wait for its first Events call as they would in its
// channel: the same ones are kept, dropped and closed after, whenever the
// holder first asks.
func TestEventsBeforeAndAfterTheFirstCall(t *testing.T) {
	until := time.Now()
	evs := []Event{{Kind: Acquired, Until: until}}
	for i := range 5 {
		evs = append(evs, Event{Kind: Extended, Until: until.Add(time.Duration(i+1) * time.Second)})
	}
	evs = append(evs, Event{Kind: Released, Until: until.Add(5 * time.Second), Err: ErrReleased})
	for asked := range len(evs) + 1 { // Events first called after this many events
		s := newState("r", 4)
		s.token, s.start = 7, until.Add(-time.Second) // as hold sets them, before the first event
		var ch <-chan Event
		var kept []bool
		for i, ev := range evs {
			if i == asked {
				ch = s.Events()
			}
			ev.Resource, ev.Token = "r", 7
			kept = append(kept, s.deliver(ev))
		}
		if ch == nil {
			ch = s.Events()
		}
		if want := []bool{true, true, true, false, false, false, true}; !slices.Equal(kept, want) {
			t.Fatalf("asked after %d: delivered %v, want %v", asked, kept, want)
		}
		var got []Event
	read:
		for {
			select {
			case ev, ok := <-ch:
				if !ok {
					break read
				}
				got = append(got, ev)
			case <-time.After(time.Second):
				t.Fatalf("asked after %d: the channel was not closed after %+v", asked, got)
			}
		}
		want := []Event{evs[0], evs[1], evs[2], evs[6]}
		for i := range want {
			want[i].Resource, want[i].Token = "r", 7
		}
		if !slices.EqualFunc(got, want, func(a, b Event) bool {
			return a.Kind == b.Kind && a.Until.Equal(b.Until) && a.Err == b.Err && a.Resource == b.Resource && a.Token == b.Token
		}) {
			t.Fatalf("asked after %d: got %+v, want %+v", asked, got, want)
		}
	}
}
