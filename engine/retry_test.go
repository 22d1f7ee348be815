package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// WithRetryDelay's waits stay within [min, max] and double from min: from
// the fourth on (10, 20, 40, 80ms), the interval is max, randomized by
// ±50%, so no wait is below max/2.
func TestRetryDelaySchedule(t *testing.T) {
	const lo, hi = 10 * time.Millisecond, 80 * time.Millisecond
	b := WithRetryDelay(lo, hi).newBackOff()
	for i := range 50 {
		d := b.NextBackOff()
		if d < lo || d > hi {
			t.Fatalf("wait %d: %v, want within [%v, %v]", i, d, lo, hi)
		}
		if i >= 3 && d < hi/2 {
			t.Fatalf("wait %d: %v, want at least %v once the interval reached max", i, d, hi/2)
		}
	}
	if d := WithRetryDelay(lo, lo).newBackOff().NextBackOff(); d != lo {
		t.Errorf("min = max: wait %v, want %v", d, lo)
	}
}

// The retry options: bad input is refused, whatever comes after it;
// WithRetry and WithRetryDelay set one schedule, the last given wins;
// WithRetryAttempts leaves the schedule alone.
func TestRetryOptions(t *testing.T) {
	e := &Engine{cfg: Config{Nodes: []string{"127.0.0.1:1"}}.withDefaults()}
	zero := WithRetry(func() backoff.BackOff { return &backoff.ZeroBackOff{} })
	delay := WithRetryDelay(time.Millisecond, time.Second)
	for _, tc := range []struct {
		name     string
		opts     []Option
		wantErr  string // "": valid
		schedule string // the type the winning schedule makes
		attempts int
	}{
		{"zero min", []Option{WithRetryDelay(0, time.Second)}, "WithRetryDelay needs 0 < min <= max, got min 0s, max 1s", "", 0},
		{"negative min", []Option{WithRetryDelay(-time.Second, time.Second)}, "got min -1s, max 1s", "", 0},
		{"max below min", []Option{WithRetryDelay(time.Second, time.Millisecond)}, "got min 1s, max 1ms", "", 0},
		{"bad delay overridden", []Option{WithRetryDelay(0, 0), zero}, "WithRetryDelay needs 0 < min <= max", "", 0},
		{"zero attempts", []Option{WithRetryAttempts(0)}, "WithRetryAttempts needs n >= 1, got 0", "", 0},
		{"negative attempts", []Option{WithRetryAttempts(-3)}, "WithRetryAttempts needs n >= 1, got -3", "", 0},
		{"default", nil, "", "*backoff.ExponentialBackOff", 0},
		{"delay", []Option{delay}, "", "engine.boundedBackOff", 0},
		{"delay, then WithRetry", []Option{delay, zero}, "", "*backoff.ZeroBackOff", 0},
		{"WithRetry, then delay", []Option{zero, delay}, "", "engine.boundedBackOff", 0},
		{"attempts keep WithRetry's schedule", []Option{zero, WithRetryAttempts(3)}, "", "*backoff.ZeroBackOff", 3},
		{"attempts, last wins", []Option{WithRetryAttempts(3), WithRetryAttempts(1)}, "", "*backoff.ExponentialBackOff", 1},
	} {
		o, err := e.options(tc.opts)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err = %v, want it to say %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := fmt.Sprintf("%T", o.newBackOff()); got != tc.schedule || o.attempts != tc.attempts {
			t.Errorf("%s: schedule %s, attempts %d; want %s, %d", tc.name, got, o.attempts, tc.schedule, tc.attempts)
		}
	}
}

// On real nodes, with a quorum down: WithRetryAttempts bounds the rounds,
// and WithRetryDelay's waits come between them (two waits of at least
// 40ms between three rounds; the default schedule would wait about 6ms).
func TestRetryOptionsOnNodes(t *testing.T) {
	c := startNodes(t, 3)
	e := newEngine(t, c.Addrs())
	for _, i := range []int{1, 2} {
		if err := c.Nodes[i].Kill(); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	_, err := e.Acquire(t.Context(), "r", WithRetryDelay(40*time.Millisecond, 40*time.Millisecond), WithRetryAttempts(3))
	took := time.Since(start)
	var ae *AcquireError
	if !errors.As(err, &ae) || ae.Attempts != 3 {
		t.Fatalf("Acquire with 2 of 3 down: %v; want an *AcquireError after 3 attempts", err)
	}
	if took < 80*time.Millisecond {
		t.Errorf("3 attempts took %v: want at least 2 waits of 40ms between them", took)
	}
	_, err = e.TryAcquire(t.Context(), "r", WithRetryAttempts(5))
	if !errors.As(err, &ae) || ae.Attempts != 1 {
		t.Fatalf("TryAcquire with WithRetryAttempts(5): %v; want one attempt", err)
	}
}

// A failed Acquire leaves no trace that refuses the next caller: its
// lease actor leaves the line before it answers, so that a TryAcquire
// made at once finds the line empty (before, 7 of 300 were refused in
// the engine, "this engine holds the resource"; TestRetryOptionsOnNodes
// failed so about once in 100 runs).
func TestFailedAcquireLeavesNoTrace(t *testing.T) {
	c := startNodes(t, 3)
	e := newEngine(t, c.Addrs())
	for _, i := range []int{1, 2} {
		if err := c.Nodes[i].Kill(); err != nil {
			t.Fatal(err)
		}
	}
	refused := 0
	for range 300 {
		if _, err := e.Acquire(t.Context(), "r", WithRetryAttempts(1)); err == nil {
			t.Fatal("Acquire won with 2 of 3 nodes down")
		}
		if _, err := e.TryAcquire(t.Context(), "r"); errors.Is(err, errHeldHere) {
			refused++
		}
	}
	if refused > 0 {
		t.Fatalf("%d of 300 TryAcquires made right after a failed Acquire were refused in the engine", refused)
	}
}
