//go:build !unix

package main

import "errors"

func stopSelf() error { return errors.New("-stall needs SIGSTOP, a Unix signal") }
