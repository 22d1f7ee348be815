//go:build !linux

package redisproc

// lockFile is only needed for installing with apt-get, on Linux.
func lockFile(string) (func(), error) { return nil, errNoLock }
