package node

import (
	"context"
	"time"
)

// deadline is the context a sender goroutine gives DoMulti, reused batch
// after batch: context.WithDeadline costs a context, a timer and, once
// rueidis waits on it, a channel per batch, which was a sixth of what a
// contended cycle allocated. rueidis keeps no hold of a context after
// DoMulti returned, so the next batch may have it, re-armed, unless it
// fired: then the next batch gets a new one.
type deadline struct {
	context.Context // Background, for Value
	at              time.Time
	done            chan struct{} // closed when it fires
	timer           *time.Timer
}

// arm returns a context that ends at at: d re-armed, or a new one when d
// is nil (the first batch, or the last one's fired).
func (d *deadline) arm(at time.Time) *deadline {
	if d == nil {
		d = &deadline{Context: context.Background(), at: at, done: make(chan struct{})}
		d.timer = time.AfterFunc(time.Until(at), func() { close(d.done) })
		return d
	}
	d.at = at
	d.timer.Reset(time.Until(at))
	return d
}

// disarm stops d's timer once DoMulti returned; it reports whether d may
// be armed again: false when it fired, or is firing.
func (d *deadline) disarm() bool { return d.timer.Stop() }

func (d *deadline) Deadline() (time.Time, bool) { return d.at, true }

func (d *deadline) Done() <-chan struct{} { return d.done }

func (d *deadline) Err() error {
	select {
	case <-d.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}
