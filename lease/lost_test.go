package lease

import (
	"errors"
	"testing"

	"github.com/redlease/redlease/internal/errtext"
	"github.com/redlease/redlease/node"
)

// A lost lease's error reads, and unwraps, as the one fmt would have made
// at once: only when its text is made changed.
func TestLostErrorAsFormatted(t *testing.T) {
	cause := &ExtendError{Cause: errRefused, Nodes: []NodeOutcome{{Addr: "127.0.0.1:1", Outcome: node.Taken}}}
	err := lost(cause)
	if want := errtext.Errorf(errtext.Prefix+"%w: %w", ErrLeaseLost, cause).Error(); err.Error() != want {
		t.Fatalf("text %q, want %q", err, want)
	}
	var ee *ExtendError
	if !errors.Is(err, ErrLeaseLost) || !errors.Is(err, errRefused) || !errors.As(err, &ee) || ee != cause {
		t.Fatalf("%v does not unwrap to ErrLeaseLost and its cause", err)
	}
}
