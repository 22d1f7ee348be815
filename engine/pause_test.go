package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlease/redlease/lease"
)

// pausedClock is the system's clock, whose readings a test moves on
// without running the timers made on it: the view of time of a process
// that was paused (SIGSTOP, a long GC, a virtual machine's) and has just
// gone on, before its timers' goroutines ran.
type pausedClock struct{ skew atomic.Int64 }

func (c *pausedClock) Now() time.Time { return time.Now().Add(time.Duration(c.skew.Load())) }

func (c *pausedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func (c *pausedClock) AfterFunc(d time.Duration, f func()) lease.Timer { return time.AfterFunc(d, f) }

// pause moves the clock on by d.
func (c *pausedClock) pause(d time.Duration) { c.skew.Add(int64(d)) }

// A holder paused past its lease's Until learns at its first question
// that the lease is gone, whichever it asks: Err, Done, or its Context's
// Err, Done and Cause, before the deadline's timer ran. (Before: Err was
// nil 5s past Until in 8 of 13 paused cycles, until the timer's
// goroutine got to run.)
func TestPausedHolderLearnsAtOnce(t *testing.T) {
	c := startNodes(t, 1)
	for _, ask := range []string{"Err", "Done", "Context().Err", "Context().Done"} {
		clock := new(pausedClock)
		e := newEngine(t, c.Addrs(), func(cfg *Config) { cfg.clock = clock })
		l, err := e.Acquire(t.Context(), "paused "+ask, WithTTL(10*time.Second)) // the last one's key lives on
		if err != nil {
			t.Fatal(err)
		}
		ctx := l.Context()
		if l.Err() != nil || ctx.Err() != nil {
			t.Fatalf("%s: a fresh lease says %v, its context %v", ask, l.Err(), ctx.Err())
		}
		clock.pause(time.Until(l.Until()) + time.Millisecond)
		var ended bool
		switch ask {
		case "Err":
			ended = l.Err() != nil
		case "Done":
			ended = isClosed(l.Done())
		case "Context().Err":
			ended = ctx.Err() != nil
		case "Context().Done":
			ended = isClosed(ctx.Done())
		}
		if !ended {
			t.Fatalf("%s: the lease is held %v past its Until", ask, time.Millisecond)
		}
		if err := l.Err(); !errors.Is(err, ErrExpired) {
			t.Fatalf("%s: Err = %v, want ErrExpired", ask, err)
		}
		if cause := context.Cause(ctx); !errors.Is(cause, ErrExpired) {
			t.Fatalf("%s: the context's cause is %v, want ErrExpired", ask, cause)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
