//go:build unix

package main

import (
	"os"
	"syscall"
)

// stopSelf stops this process with SIGSTOP, as the -stall flag asks; it
// returns once something sent SIGCONT.
func stopSelf() error { return syscall.Kill(os.Getpid(), syscall.SIGSTOP) }
