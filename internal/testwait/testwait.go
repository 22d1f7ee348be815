// Package testwait waits in tests for what can be observed, instead of
// sleeping for a guess: Eventually for something that must happen, Never
// for something that must not within a bounded time. For tests only.
package testwait

import (
	"testing"
	"time"
)

// interval is how often a condition is asked: short beside the waits it
// replaces, long enough that a condition asking a Redis node is no load.
const interval = 5 * time.Millisecond

// Eventually calls cond until it returns true, and fails t (FailNow) with
// what if limit passes first. cond is called at once, then every few
// milliseconds, on the calling goroutine, which must be the test's.
func Eventually(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(interval)
	}
}

// Never calls cond for d, and fails t (FailNow) with what as soon as it
// returns true. It proves an absence only as far as d goes: d must be long
// enough that what it rules out would have shown by then.
func Never(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if cond() {
			t.Fatalf("%s, within %v", what, d)
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(interval)
	}
}
