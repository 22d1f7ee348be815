//go:build !linux

package proctest

import "syscall"

// sysProcAttr has no parent-death signal outside Linux; the test's
// cleanup is the only guarantee there.
func sysProcAttr() *syscall.SysProcAttr { return nil }
