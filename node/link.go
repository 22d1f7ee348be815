package node

import (
	"time"
)

// The link a node sits behind, and how many batches go on its wire at
// once (see flush).

// overlapWires is how many batches may be on a node's wire at once, with
// Config.Overlap; else one, on a fast link. With one, a command that came
// while a batch was out waits for it to return: on one node, most of a
// contended hand-off's time was its release and the next acquire each
// waiting so. A second batch goes, with the commands whose keys the first
// does not carry (rueidis pipelines both on the one connection), when a
// command a hand-off waits for (entry.urgent) is queued, or overlapAt
// commands are. The first costs a write (a system call) per such command
// instead of one per batch: on one node that is two per hand-off, and the
// hand-off takes a quarter less time. The second keeps the node busy while
// the client reads the batch on the wire's answers. On five nodes, on a
// machine whose cores the client and the nodes share, both cost more than
// they saved.
const overlapWires = 2

// Behind a slow link. A node whose recent batches all took at least
// slowLink to come back (link.slow) is behind a network hop, not the
// loopback or a rack's switch, where the batches' own work makes their
// round trip. There up to maxWire batches may be on the wire: a batch
// goes, beside those out, with the commands whose keys they do not
// carry, deepEvery after the last one went (a timer sees to it), however
// few commands queued. A command then waits about deepEvery for a batch
// rather than a round trip of the link, while the answers of a batch,
// which come back together and make the next commands together, still go
// out together.
const (
	maxWire   = 8
	slowLink  = 500 * time.Microsecond
	deepEvery = 100 * time.Microsecond
)

// link is the smallest round trip of a node's batches in the last one or
// two linkWindows: what the link costs, beyond the batches' own work.
//
// A link is slow only on a whole window's evidence, of linkSamples batches
// at least: the first batches of a node (its script loaded, its marker
// written, its process still warming) are slow on any link. A misjudged
// slow link costs for good: the second batch it sends beside the first
// turns rueidis' connection from writing and reading on the caller's
// goroutine to its background writer and reader, for the connection's life
// (measured on 5 nodes, contended: 0.87x the cycles/s of one batch at a
// time).
type link struct {
	min, prev time.Duration // prev: the last whole window's, 0 if too few batches
	n         int           // batches in this window
	since     time.Time
}

const (
	linkWindow  = 500 * time.Millisecond
	linkSamples = 16
)

func (l *link) add(now time.Time, rtt time.Duration) {
	if now.Sub(l.since) >= linkWindow {
		l.prev = 0
		if l.n >= linkSamples {
			l.prev = l.min
		}
		l.min, l.n, l.since = rtt, 1, now
		return
	}
	l.min = min(l.min, rtt)
	l.n++
}

// slow reports whether the node is behind a slow link: the smallest round
// trip of the last whole window, and of this one, is slowLink or more.
func (l *link) slow() bool { return l.prev > 0 && min(l.min, l.prev) >= slowLink }

// overlapAt is how many queued commands make a second batch worth its
// write: measured on one node, uncontended (go run ./bench -n 1 -clients
// redlease -workers 16,128,512), 4 to 32 all beat waiting, 8 the most.
const overlapAt = 8
