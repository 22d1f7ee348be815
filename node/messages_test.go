package node

import "testing"

// Outcomes print as the words the error texts and the README use.
func TestOutcomeString(t *testing.T) {
	for _, tt := range []struct {
		o    Outcome
		want string
	}{
		{Granted, "granted"},
		{Taken, "taken"},
		{Timeout, "timeout"},
		{Failed, "failed"},
		{0, "Outcome(0)"},
		{Failed + 1, "Outcome(5)"},
	} {
		if got := tt.o.String(); got != tt.want {
			t.Errorf("Outcome(%d).String() = %q, want %q", uint8(tt.o), got, tt.want)
		}
	}
}
