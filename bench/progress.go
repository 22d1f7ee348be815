package main

import (
	"context"
	"os"
	"strings"
	"sync"
	"time"
)

// progress shows on stderr which run is going and how long is left. On a
// terminal the line of the current run is rewritten in place; elsewhere
// each run gets one line, written when it starts and completed when it
// ends.
type progress struct {
	f       *os.File
	tty     bool
	label   string
	open    bool // a line without its newline is on screen
	lastLen int
}

func newProgress(f *os.File) *progress {
	fi, err := f.Stat()
	return &progress{f: f, tty: err == nil && fi.Mode()&os.ModeCharDevice != 0}
}

// begin opens the line of a run.
func (p *progress) begin(label string) {
	p.label, p.open = label, true
	if !p.tty {
		p.f.WriteString(label)
		return
	}
	p.line(label + " …")
}

// status rewrites the open line on a terminal.
func (p *progress) status(s string) {
	if p.tty && p.open {
		p.line(p.label + " … " + s)
	}
}

// tick refreshes the status until the returned function is called, which
// reports the number of writes tick made: the benchmark subtracts them
// from the process's write syscalls.
func (p *progress) tick(ctx context.Context, deadline time.Time, left func(runLeft time.Duration) string) (stop func() int64) {
	if !p.tty {
		return func() int64 { return 0 }
	}
	done := make(chan struct{})
	var writes int64
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			p.status(left(max(0, time.Until(deadline))))
			writes++
			select {
			case <-t.C:
			case <-done:
				return
			case <-ctx.Done():
				return
			}
		}
	})
	return func() int64 {
		close(done)
		wg.Wait()
		return writes
	}
}

// end completes the line of a run with its summary.
func (p *progress) end(summary string) {
	if !p.open {
		return
	}
	p.open = false
	if !p.tty {
		p.f.WriteString(": " + summary + "\n")
		return
	}
	p.line(p.label + ": " + summary)
	p.f.WriteString("\n")
	p.lastLen = 0
}

// abort ends an open line without a summary.
func (p *progress) abort() {
	if p.open {
		p.open = false
		p.f.WriteString("\n")
		p.lastLen = 0
	}
}

// line rewrites the terminal line with s, blanking what a longer previous
// text left behind, in one write.
func (p *progress) line(s string) {
	n := len([]rune(s))
	pad := ""
	if p.lastLen > n {
		pad = strings.Repeat(" ", p.lastLen-n)
	}
	p.lastLen = n
	p.f.WriteString("\r" + s + pad)
}
