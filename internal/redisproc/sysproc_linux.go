package redisproc

import "syscall"

// sysProcAttr asks the kernel to SIGKILL redis-server if the process that
// started it dies without calling Close (a panic, a test timeout, Ctrl-C).
// Strictly the signal fires when the starting OS thread exits; Go only ends
// threads whose goroutine exits while locked with runtime.LockOSThread.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
