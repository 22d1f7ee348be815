//go:build !linux

package redisproc

import "syscall"

// sysProcAttr has no parent-death signal outside Linux; Close is the only
// guarantee there.
func sysProcAttr() *syscall.SysProcAttr { return nil }
