package lease

import (
	"errors"
	"testing"
)

// Done is made on demand: asked for before the end, it closes at the end;
// asked for after, it is closed already. Either way Err says why.
func TestDoneAskedBeforeAndAfterTheEnd(t *testing.T) {
	errEnd := errors.New("end")

	before := newState("r", 2)
	done := before.Done()
	if before.Ended() || before.Err() != nil {
		t.Fatal("a new lease has ended")
	}
	select {
	case <-done:
		t.Fatal("Done closed before the end")
	default:
	}
	before.finish(errEnd)
	select {
	case <-done:
	default:
		t.Fatal("Done asked for before the end did not close at it")
	}

	after := newState("r", 2)
	after.finish(errEnd)
	select {
	case <-after.Done():
	default:
		t.Fatal("Done asked for after the end is not closed")
	}
	for _, st := range []*State{before, after} {
		if !st.Ended() || !errors.Is(st.Err(), errEnd) {
			t.Fatalf("Ended %v, Err %v after the end", st.Ended(), st.Err())
		}
	}
}
