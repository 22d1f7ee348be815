// Package safety checks redlease's guarantees on real Redis nodes while it
// breaks them. Several engines with many goroutines each contend for a few
// resources; every holder records its holding (resource, acquired-at,
// Until, token) on this process's monotonic clock and writes to a fenced
// in-memory store. Meanwhile the checker kills nodes and restarts them
// without persistence, pauses them (SIGSTOP/SIGCONT), slows their links
// through a TCP proxy, and makes some holders pause past their validity
// before writing.
//
// The Report counts acquisitions, overlapping holdings of one resource
// (must be 0), stale writes the store rejected thanks to fencing, tokens
// that did not increase, lost leases, and leases whose Done did not close
// by their deadline (must be 0). Run drives all of it; Recorder and Store
// are the pieces, for tests that force a scenario of their own.
//
//	go run ./safety/cmd/safety -duration 10m
package safety
