package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// heapProfile is -memprofile's file: written at the end of the suite, and
// (as FILE.held) while the held workload's leases are all held.
var heapProfile string

// startCPUProfile profiles this process into path until the returned
// function is called.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// writeHeapProfile writes the heap profile to -memprofile's file, with
// "."+when appended unless when is empty; nothing without -memprofile.
func writeHeapProfile(when string) {
	if heapProfile == "" {
		return
	}
	path := heapProfile
	if when != "" {
		path += "." + when
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.Lookup("heap").WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: -memprofile: %v\n", err)
	}
}
