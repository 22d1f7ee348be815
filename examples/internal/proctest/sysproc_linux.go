package proctest

import "syscall"

// sysProcAttr asks the kernel to SIGKILL the child if the test process
// dies without its cleanups (a panic, a test timeout). Strictly the signal
// fires when the starting OS thread exits; Go ends a thread only when its
// goroutine exits while locked to it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
