//go:build unix && !linux

package main

import (
	"os"
	"syscall"
)

// stopSelf stops this process with SIGSTOP, as the -stall flag asks; it
// returns once something sent SIGCONT (and may run on for a moment before
// the signal stops this thread).
func stopSelf() error { return syscall.Kill(os.Getpid(), syscall.SIGSTOP) }
