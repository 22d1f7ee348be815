package errtext

import (
	"errors"
	"strings"
	"testing"
)

func TestErrorf(t *testing.T) {
	lost := errors.New(Prefix + "lease lost")
	refused := errors.New(Prefix + "a quorum of nodes refused")
	inner := Errorf("extension failed: %w", refused)
	outer := Errorf(Prefix+"%w: %w", lost, inner)

	const want = "redlease: lease lost: extension failed: a quorum of nodes refused"
	if got := outer.Error(); got != want {
		t.Fatalf("text %q, want %q", got, want)
	}
	if n := strings.Count(outer.Error(), Prefix); n != 1 {
		t.Fatalf("%d prefixes in %q, want 1", n, outer)
	}
	for _, target := range []error{lost, inner, refused} {
		if !errors.Is(outer, target) {
			t.Errorf("errors.Is(%q, %q) = false", outer, target)
		}
	}
	if Bare(nil) != "" || Bare(errors.New("other: x")) != "other: x" {
		t.Fatal("Bare changed an error without the prefix")
	}
	joined := Errorf(Prefix+"not acquired: %w", errors.Join(errors.New("context canceled"), lost))
	if got, want := joined.Error(), "redlease: not acquired: context canceled\nlease lost"; got != want {
		t.Fatalf("joined text %q, want %q", got, want)
	}
}
