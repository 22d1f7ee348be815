//go:build !linux

package redisproc

import (
	"errors"
	"time"
)

// clockFile is Linux only: the shim is an ELF library for LD_PRELOAD.
type clockFile struct{ path, shim string }

func newClockFile(path, shim string) (*clockFile, error) {
	return nil, errors.New("redisproc: clock jumps need Linux (an LD_PRELOAD library)")
}

func (c *clockFile) set(time.Duration)  {}
func (c *clockFile) get() time.Duration { return 0 }
func (c *clockFile) close()             {}
