package engine

import (
	"sync"

	"github.com/redlease/redlease/lease"
)

// replies keeps the buffered reply channels of the calls a lease actor
// answers: one per Acquire and one per Release would be four allocations
// of an acquire+release cycle's fifteen (Extend's too). A channel goes back only after
// its one answer was received (the actor answers every call exactly
// once), never when its caller gave up first: the late answer still
// lands in it.
type replies[T any] struct{ pool sync.Pool }

func (r *replies[T]) get() chan T {
	if c, ok := r.pool.Get().(chan T); ok {
		return c
	}
	return make(chan T, 1)
}

// put takes back c, empty: its answer was received.
func (r *replies[T]) put(c chan T) { r.pool.Put(c) }

var (
	acquireReplies replies[lease.Result]
	releaseReplies replies[lease.ReleaseResult]
	extendReplies  replies[lease.ExtendResult]
)
