package redisproc

import (
	"fmt"
	"os"
	"strings"
)

// sleeping reports whether the main thread of pid waits in nanosleep (as
// DEBUG SLEEP does), not in epoll (idle) or on the CPU.
func sleeping(pid int) (bool, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid))
	if err != nil {
		return false, fmt.Errorf("redisproc: %w", err)
	}
	return strings.Contains(string(b), "nanosleep"), nil
}
