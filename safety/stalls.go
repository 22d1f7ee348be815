package safety

import (
	"context"
	"sync"
	"time"
)

// stallTick is how often the stall watch wakes; a wake later than
// stallTick+stallMin counts the excess as a stall.
const (
	stallTick = 5 * time.Millisecond
	stallMin  = 20 * time.Millisecond
)

// stallWatch notes when this process's goroutines could not run: a
// goroutine that sleeps stallTick and wakes much later was held back, by
// a stop-the-world pause, by a machine whose cores the nodes and faults
// took, or by the run queue of the process itself. What holds it back
// holds back every goroutine: the lease's deadline timer, and the holder
// that waits on Done. That is the paused process of Redlock's critique,
// which no lock service can outrun; the checker tells it apart from a
// Done the engine closed late (checkDone).
type stallWatch struct {
	mu     sync.Mutex
	stalls []stall // in time order
}

// stall is a span in which the watch could not run.
type stall struct{ from, to time.Time }

// watch records stalls until ctx ends.
func (w *stallWatch) watch(ctx context.Context) {
	last := time.Now()
	for sleep(ctx, stallTick) {
		now := time.Now()
		if gap := now.Sub(last) - stallTick; gap > stallMin {
			w.mu.Lock()
			w.stalls = append(w.stalls, stall{from: now.Add(-gap), to: now})
			w.mu.Unlock()
		}
		last = now
	}
}

// within is how long the process stalled between from and to.
func (w *stallWatch) within(from, to time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var d time.Duration
	for i := len(w.stalls) - 1; i >= 0; i-- {
		s := w.stalls[i]
		if !s.to.After(from) {
			break
		}
		if lo, hi := later(s.from, from), earlier(s.to, to); hi.After(lo) {
			d += hi.Sub(lo)
		}
	}
	return d
}

// longest is the longest stall so far and how many there were.
func (w *stallWatch) longest() (time.Duration, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var d time.Duration
	for _, s := range w.stalls {
		d = max(d, s.to.Sub(s.from))
	}
	return d, len(w.stalls)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
