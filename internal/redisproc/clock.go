package redisproc

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

//go:embed clockshim/clockshim.c
var clockShimSource []byte

// clockEnv names the offset file for the shim (see clockshim.c).
const clockEnv = "REDISPROC_CLOCK_FILE"

// clockSlack absorbs TIME's microsecond resolution when a node's clock is
// checked against the host's: both read the same clock plus an offset.
const clockSlack = time.Millisecond

// shim is the clock shim, built once per process.
var shim struct {
	once sync.Once
	path string
	err  error
}

// clockShim returns the path of the compiled shim, building it into the
// user's cache directory (named by the source's hash) unless it is there.
func clockShim() (string, error) {
	shim.once.Do(func() { shim.path, shim.err = buildShim() })
	return shim.path, shim.err
}

func buildShim() (string, error) {
	var ccPath string
	var err error
	if cc := os.Getenv("CC"); cc != "" {
		if ccPath, err = exec.LookPath(cc); err != nil {
			return "", fmt.Errorf("redisproc: clock jumps preload a small library built with a C compiler, and CC=%q is not on PATH", cc)
		}
	} else if ccPath, err = system.find(compilerTool); err != nil {
		return "", fmt.Errorf("%w (clock jumps preload a small library built with a C compiler)", err)
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	dir = filepath.Join(dir, "redlease-redisproc")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("redisproc: %w", err)
	}
	sum := sha256.Sum256(clockShimSource)
	path := filepath.Join(dir, fmt.Sprintf("clockshim-%x.so", sum[:8]))
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	src, err := os.CreateTemp(dir, "clockshim-*.c")
	if err != nil {
		return "", fmt.Errorf("redisproc: %w", err)
	}
	defer os.Remove(src.Name())
	_, err = src.Write(clockShimSource)
	if cerr := src.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("redisproc: %w", err)
	}
	// Build beside the final name and rename: concurrent test binaries
	// may build at once, and each rename puts a complete file in place.
	tmp := src.Name() + ".so"
	defer os.Remove(tmp)
	if out, err := exec.Command(ccPath, "-shared", "-fPIC", "-O2", "-Wall", "-o", tmp, src.Name()).CombinedOutput(); err != nil {
		return "", fmt.Errorf("redisproc: building the clock shim with %s: %v\n%s", ccPath, err, out)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("redisproc: %w", err)
	}
	return path, nil
}

// RestartClockAhead kills the process if it is running and starts a new
// one with an empty dataset, as Restart does, whose wall clock runs ahead
// of the host's by d (negative: behind). From then on the node keeps its
// own clock across Restart and RestartFromSnapshot, and SetClockAhead
// moves it without a restart. CLOCK_MONOTONIC is not moved, as on a host
// whose clock was stepped. It returns once TIME from the new process
// reads d ahead of the host. Linux only.
func (n *Node) RestartClockAhead(d time.Duration) error {
	shimPath, err := clockShim()
	if err != nil {
		return err
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return errClosed
	}
	n.stopLocked()
	if n.clock == nil {
		if n.clock, err = newClockFile(filepath.Join(n.dir, "clock"), shimPath); err != nil {
			n.mu.Unlock()
			return err
		}
	}
	n.clock.set(d)
	err = os.Remove(n.snapshot())
	if err == nil || errors.Is(err, os.ErrNotExist) {
		err = n.relaunchLocked()
	}
	n.mu.Unlock()
	if err != nil {
		return err
	}
	return n.checkClock(d)
}

// SetClockAhead moves the wall clock of a node started by
// RestartClockAhead to d ahead of the host's, at once and without a
// restart: keys whose expiry time it passes expire, as when NTP steps a
// machine's clock. It returns once TIME reads the new clock (at once if
// the node is not running: the next process starts with it).
func (n *Node) SetClockAhead(d time.Duration) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return errClosed
	}
	if n.clock == nil {
		n.mu.Unlock()
		return fmt.Errorf("redisproc: %s runs on the host's clock: start it with RestartClockAhead first", n.Addr())
	}
	n.clock.set(d)
	running := n.cmd != nil
	n.mu.Unlock()
	if !running {
		return nil
	}
	return n.checkClock(d)
}

// ClockAhead is how far the node's wall clock runs ahead of the host's:
// 0 unless RestartClockAhead or SetClockAhead moved it.
func (n *Node) ClockAhead() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.clock == nil {
		return 0
	}
	return n.clock.get()
}

// checkClock reads TIME and fails unless it is the host's time plus want.
func (n *Node) checkClock(want time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	before := time.Now()
	t, err := n.Time(ctx)
	after := time.Now()
	if err != nil {
		return fmt.Errorf("redisproc: checking the clock of %s: %w", n.Addr(), err)
	}
	lo, hi := before.Add(want-clockSlack), after.Add(want+clockSlack)
	if t.Before(lo) || t.After(hi) {
		return fmt.Errorf("redisproc: %s: TIME reads %v ahead of the host, want %v",
			n.Addr(), t.Sub(before).Round(time.Millisecond), want)
	}
	return nil
}

// Time returns the node's wall clock, read with TIME.
func (n *Node) Time(ctx context.Context) (time.Time, error) {
	v, err := n.Do(ctx, "TIME")
	if err != nil {
		return time.Time{}, err
	}
	parts, ok := v.([]any)
	if !ok || len(parts) != 2 {
		return time.Time{}, fmt.Errorf("redisproc: TIME answered %#v", v)
	}
	var secs [2]int64
	for i, p := range parts {
		s, ok := p.(string)
		if !ok {
			return time.Time{}, fmt.Errorf("redisproc: TIME answered %#v", v)
		}
		if secs[i], err = strconv.ParseInt(s, 10, 64); err != nil {
			return time.Time{}, fmt.Errorf("redisproc: TIME answered %#v: %w", v, err)
		}
	}
	return time.Unix(secs[0], secs[1]*int64(time.Microsecond)), nil
}
