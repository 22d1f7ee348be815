package main

import (
	"strings"
	"testing"
)

// The scanner counts the commands of a request stream however the writes
// split it, bulk strings holding RESP's own bytes included.
func TestRespScannerCounts(t *testing.T) {
	stream := "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\n*1\r\n$\r\n" + // a value that looks like a command
		"*1\r\n$4\r\nPING\r\n" +
		"*6\r\n$7\r\nEVALSHA\r\n$40\r\n" + strings.Repeat("a", 40) + "\r\n$1\r\n1\r\n$1\r\nk\r\n$0\r\n\r\n$2\r\n10\r\n"
	for cut := range len(stream) + 1 {
		for cut2 := cut; cut2 <= len(stream); cut2 += 7 {
			var s respScanner
			got := s.scan([]byte(stream[:cut])) + s.scan([]byte(stream[cut:cut2])) + s.scan([]byte(stream[cut2:]))
			if got != 3 || s.state != atCommand {
				t.Fatalf("split at %d and %d: %d commands (state %d), want 3", cut, cut2, got, s.state)
			}
		}
	}
}
