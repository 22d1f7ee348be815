package node

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Outcomes print as the words the error texts and docs/GUIDE.md (Errors) use.
func TestOutcomeString(t *testing.T) {
	for _, tt := range []struct {
		o    Outcome
		want string
	}{
		{Granted, "granted"},
		{Taken, "taken"},
		{Timeout, "timeout"},
		{Failed, "failed"},
		{Absent, "absent"},
		{0, "Outcome(0)"},
		{Absent + 1, "Outcome(6)"},
	} {
		if got := tt.o.String(); got != tt.want {
			t.Errorf("Outcome(%d).String() = %q, want %q", uint8(tt.o), got, tt.want)
		}
	}
}

// The batch script's fence idle time is FenceIdle: the one rule written on
// both sides, checked here so neither changes alone.
func TestFenceIdleAgreesWithTheScript(t *testing.T) {
	m := regexp.MustCompile(`(?m)^local fenceIdle = (\d+)$`).FindStringSubmatch(batchLua)
	if m == nil {
		t.Fatal("batch.lua has no 'local fenceIdle = <ms>'")
	}
	if ms, _ := strconv.ParseInt(m[1], 10, 64); ms != FenceIdle.Milliseconds() {
		t.Fatalf("batch.lua's fenceIdle is %d ms, FenceIdle %v", ms, FenceIdle)
	}
}

// The batch script counts the same commands as losses as Go does
// (lossCommands; epoch.lua takes them as arguments).
func TestLossCommandsAgreeWithTheScript(t *testing.T) {
	m := regexp.MustCompile(`local lossCommands = \{([^}]*)\}`).FindStringSubmatch(batchLua)
	if m == nil {
		t.Fatal("batch.lua has no 'local lossCommands = {...}'")
	}
	var lua []string
	for _, c := range strings.Split(m[1], ",") {
		lua = append(lua, strings.Trim(strings.TrimSpace(c), "'"))
	}
	if !slices.Equal(lua, lossCommands) {
		t.Fatalf("batch.lua counts %q as losses, Go %q", lua, lossCommands)
	}
}
