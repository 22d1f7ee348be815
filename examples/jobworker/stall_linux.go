package main

import (
	"os"
	"runtime"
	"syscall"
)

// stopSelf stops this process with SIGSTOP, as the -stall flag asks, and
// returns once something sent SIGCONT. The signal goes to the calling
// thread (tgkill), which then stops before it returns from the system
// call; the whole process stops with it. Sent to the process (kill), it
// would be taken by the main thread, and this one could run on, and
// write, until that thread got a core to stop the others.
func stopSelf() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}
