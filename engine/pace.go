package engine

import (
	"sync/atomic"
	"time"
)

// pacer spaces out the calls that answer without blocking on anything
// (Stats, Subscribe): each call takes the next slot of cost, and sleeps
// until it when the calls come faster than that. A call now and then
// never waits; a loop of callers is held to one call per cost and parks
// in between. Without it, such a loop never blocks, keeps every P busy,
// and Go's scheduler notices a node's answer only when a P idles (or
// every 10ms): the engine's own work (a release, an extension, each
// waiting on a node's answer) waits behind the loop at every hop and
// misses the node timeout. A refused TryAcquire waits for its
// resource's gate instead (see gate), which a release opens early.
type pacer struct{ next atomic.Int64 } // the next free slot, in ns since paceEpoch

// paceEpoch is the origin of a pacer's slots (monotonic).
var paceEpoch = time.Now()

// paceCost is the slot of a paced call: some ten times what Stats costs
// with a few nodes and resources, so that a loop of them takes about a
// tenth of a core (the race detector makes everything some ten times
// costlier, the slot too).
const paceCost = 20 * time.Microsecond * raceSlowdown

// wait takes the next slot and sleeps until it.
func (p *pacer) wait() {
	now := int64(time.Since(paceEpoch))
	for {
		next := p.next.Load()
		at := max(next, now)
		if p.next.CompareAndSwap(next, at+int64(paceCost)) {
			if d := time.Duration(at - now); d > 0 {
				time.Sleep(d)
			}
			return
		}
	}
}
