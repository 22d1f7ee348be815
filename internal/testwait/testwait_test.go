package testwait

import (
	"sync/atomic"
	"testing"
	"time"
)

// fake records a failure where testing.T would stop the test.
type fake struct {
	testing.TB
	failed string
}

func (f *fake) Helper() {}

func (f *fake) Fatalf(format string, args ...any) {
	f.failed = format
	panic(f) // in place of runtime.Goexit: run stops here
}

// run calls wait with a fake and reports whether it failed.
func run(wait func(testing.TB)) (failed bool) {
	f := &fake{}
	defer func() {
		if r := recover(); r != nil && r != f {
			panic(r)
		}
		failed = f.failed != ""
	}()
	wait(f)
	return false
}

func TestEventually(t *testing.T) {
	var n atomic.Int32
	if run(func(tb testing.TB) {
		Eventually(tb, time.Second, "the third call", func() bool { return n.Add(1) == 3 })
	}) {
		t.Fatal("failed on a condition that came true")
	}
	if !run(func(tb testing.TB) { Eventually(tb, 20*time.Millisecond, "never", func() bool { return false }) }) {
		t.Fatal("passed on a condition that never came true")
	}
}

func TestNever(t *testing.T) {
	if run(func(tb testing.TB) { Never(tb, 20*time.Millisecond, "true", func() bool { return false }) }) {
		t.Fatal("failed on a condition that stayed false")
	}
	var n atomic.Int32
	if !run(func(tb testing.TB) { Never(tb, time.Second, "the third call", func() bool { return n.Add(1) == 3 }) }) {
		t.Fatal("passed on a condition that came true")
	}
}
