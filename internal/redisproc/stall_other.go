//go:build !linux

package redisproc

import "errors"

// sleeping needs /proc/PID/wchan.
func sleeping(int) (bool, error) {
	return false, errors.New("redisproc: Stall needs Linux (/proc/PID/wchan)")
}
