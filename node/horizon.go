package node

import (
	_ "embed"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// The longest TTL in use. A node that lost its data must sit out until
// every lease it may have held has expired: the longest TTL any engine
// uses on it, which one engine's Config cannot know (a deployment beside
// it may use longer leases: two holders in 4 of 4 runs of such a
// schedule before this). So every engine records the TTLs it uses on the
// nodes it uses them on, where the others read them: the TTL record
// (RecordKey), beside the epoch marker, holds the longest TTL used there
// lately and lives at least that long after each use. A batch carries the
// record's update first when its longest TTL is more than the record is
// known to hold, or would outlive it (so about once per TTL); every probe
// reads it. An engine's quarantines last Config.Quarantine or the longest
// TTL its probes found recorded on any of its nodes, whichever is longer,
// and a quarantine under way grows when a probe finds a longer one: the
// restarted node lost its own record, but the lease's other nodes (a
// quorum) keep theirs. A single node that restarts empty within a probe
// interval of another engine's first use of a longer TTL takes that use's
// record with it: there Config.Quarantine (MaxTTL by default) is all that
// is left.

//go:embed record.lua
var recordLua string

// RecordKey is the TTL record beside the epoch marker epochKey (on a
// cluster's shard, a slot's marker: the record shares its hash tag).
func RecordKey(epochKey string) string { return epochKey + recordSuffix }

const recordSuffix = ":ttl"

// recordCmd updates the TTL record key for a batch whose longest TTL is
// ttl (EVAL: about once per TTL, so the script's bytes cost little, and a
// node whose script cache lost it still runs it).
func recordCmd(c rueidis.Client, key string, ttl time.Duration) rueidis.Completed {
	return c.B().Eval().Script(recordLua).Numkeys(1).Key(key).
		Arg(strconv.FormatInt(ttl.Milliseconds(), 10), strconv.FormatInt((recordSlack*ttl).Milliseconds(), 10)).Build()
}

// Horizon is the longest TTL recorded on an engine's nodes, as their
// latest probes (and record updates) found it: the engine's node actors
// share one, and quarantine for at least that long.
type Horizon struct {
	mu   sync.Mutex
	seen map[string]time.Duration // by node (Config.Addr)
}

// saw notes what node's record holds now and returns the longest of all.
func (h *Horizon) saw(node string, d time.Duration) time.Duration {
	if h == nil {
		return d
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen == nil {
		h.seen = make(map[string]time.Duration)
	}
	h.seen[node] = d
	var longest time.Duration
	for _, d := range h.seen {
		longest = max(longest, d)
	}
	return longest
}

// recorded is what the node actor knows its node's TTL record holds: at
// least ttl until until (this engine's clock).
type recorded struct {
	ttl   time.Duration
	until time.Time
}

// due reports the TTL a batch sent at now must record first, if any: its
// longest, when the record is not known to hold it for as long.
func (r *recorded) due(now time.Time, longest time.Duration) time.Duration {
	if longest <= 0 || longest <= r.ttl && !now.Add(longest).After(r.until) {
		return 0
	}
	// Assumed written: a batch that follows on the wire runs after it.
	// A failed update forgets it (sent.recordFailed).
	r.ttl, r.until = longest, now.Add(recordSlack*longest)
	return longest
}

// recordSlack: the record lives this many TTLs after an update, so that
// updates come about once per TTL.
const recordSlack = 2
