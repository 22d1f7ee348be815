package redisproc

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// clockFile holds a node's clock offset in nanoseconds, in 8 bytes of a
// file that the node's process maps too (see clockshim.c): a store here is
// the node's next reading of the clock.
type clockFile struct {
	path string // for the process's environment
	shim string // the library to preload
	mem  []byte // the file's 8 bytes, mapped shared
}

func newClockFile(path, shim string) (*clockFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("redisproc: %w", err)
	}
	defer f.Close() // the mapping outlives the descriptor
	if err := f.Truncate(8); err != nil {
		return nil, fmt.Errorf("redisproc: %w", err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, 8, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("redisproc: mapping %s: %w", path, err)
	}
	return &clockFile{path: path, shim: shim, mem: mem}, nil
}

// word is the offset as the shim reads it: a native int64, page-aligned,
// so loads and stores of it are atomic.
func (c *clockFile) word() *int64 { return (*int64)(unsafe.Pointer(&c.mem[0])) }

func (c *clockFile) set(d time.Duration) { atomic.StoreInt64(c.word(), int64(d)) }

func (c *clockFile) get() time.Duration { return time.Duration(atomic.LoadInt64(c.word())) }

func (c *clockFile) close() { _ = syscall.Munmap(c.mem) }
