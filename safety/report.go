package safety

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redlease/redlease/engine"
	"github.com/redlease/redlease/internal/redisproc"
)

// The run's report: what it found, and how it says it.

// Report is what a Run saw.
type Report struct {
	Duration         time.Duration
	Seed             uint64      // Config.Seed, or the one drawn: the schedule, to run again
	Acquisitions     int         // leases held
	AcquireFailures  int         // acquisitions that gave up (retries exhausted or a node fault)
	Overlaps         []Overlap   // must be empty
	OverlapStale     StaleWrites // what fencing made of the stale holders' writes in Overlaps
	TokenRegressions int         // must be 0
	Writes           int         // accepted by the fenced store
	StaleRejected    int         // writes the store refused thanks to fencing
	LatePauses       int         // holders that paused past their validity before writing
	Lost             int         // leases that ended with ErrLeaseLost
	EndedWithoutDone int         // leases whose Done was still open after their deadline, beyond what the process stalled; must be 0
	StalledDone      int         // leases whose Done was late only by what the process stalled (see stallWatch)
	Stalls           int         // spans in which the process's goroutines could not run for over 20ms
	LongestStall     time.Duration
	Blocked          int            // resources a dead process left held on a quorum past a TTL (FaultKilledAfterRelease); must be 0
	StaleResumes     int            // leases released (a quorum deleted their keys) that Resume took up again; must be 0
	Stranded         int            // failovers behind one address (FaultOneAddress) whose new master no engine used within a quarantine and some seconds; must be 0
	Faults           map[string]int // injected, by kind
	AcquireP99       time.Duration  // all nodes up
	AcquireP99Down   time.Duration  // one node dead or paused

	// ClockJumps are the clock steps injected. ClockOverlaps are the
	// overlapping holdings they explain: the first holding's key sat on a
	// node when its clock stepped past the key's expiry, and the second
	// was acquired after the step began. Redlock promises nothing then, so
	// OK ignores them; ClockStale shows what fencing made of the stale
	// holders' writes in them.
	ClockJumps    []ClockJump
	ClockOverlaps []Overlap
	ClockStale    StaleWrites
	// ClockRegressions counts the tokens that did not increase because
	// the token before them came from a node clock ahead of the host's:
	// the fencing argument assumes node clocks differ by less than the
	// restart quarantine (see package lease). TokenRegressions excludes
	// them.
	ClockRegressions int

	// Lapses are the lapses of every key of a held lease that FaultHeal
	// injected: Redlock's timing broken for that lease, as a clock step
	// on every node would break it. LapseOverlaps are the overlapping
	// holdings they explain (see Lapse), which OK ignores: another owner
	// in the gap, until the lease's next extension finds it lost.
	Lapses        []Lapse
	LapseOverlaps []Overlap

	// Timeline lists the faults injected, in order, to read overlaps by.
	Timeline []Injected

	log *engineLog // the engines' node warnings, printed beside overlaps
}

// Injected is one fault: its kind, the node it hit (an index into
// the run's nodes; the first of them, for faults that hit several; -1 for
// none) and when it started and ended.
type Injected struct {
	Kind       string
	Node       int
	Start, End time.Time
}

// near returns the faults that were under way from a second before the
// first holding of o was acquired until the second was.
func (r Report) near(o Overlap) []Injected {
	var near []Injected
	for _, f := range r.Timeline {
		if !f.Start.After(o.Second.Acquired) && f.End.After(o.First.Acquired.Add(-time.Second)) {
			near = append(near, f)
		}
	}
	return near
}

// ClockJump is one step of the wall clock of node Node (an index into
// the run's nodes): it happened between From and To (when TIME read the new
// clock), to Ahead of the host's clock.
type ClockJump struct {
	Node     int
	From, To time.Time
	Ahead    time.Duration
	// Keys maps each lock key on the node just before the step to its
	// owner value: the keys the step may have expired early. The node's
	// writes are paused from before that read until after the step, so
	// none is missing.
	Keys map[string]string
}

// explains reports whether the jump cut the first holding of o short: its
// key sat on the node when the clock stepped, and the second holding was
// acquired after that.
func (j ClockJump) explains(o Overlap) bool {
	return j.Keys[lockKey(o.First.Resource)] == o.First.Value && o.First.End.After(j.From) &&
		o.Second.Acquired.After(j.From)
}

// lockKeysScript answers every lock key of a node with its owner value,
// flat: key, value, key, value. One script, so the pairs are consistent.
const lockKeysScript = `#!lua flags=no-writes
local out = {}
for _, k in ipairs(redis.call('KEYS', ARGV[1])) do
  out[#out + 1] = k
  out[#out + 1] = redis.call('GET', k)
end
return out`

// lockKeys reads the lock keys of n and their owner values.
func lockKeys(ctx context.Context, n *redisproc.Node) (map[string]string, error) {
	v, err := n.Do(ctx, "EVAL", lockKeysScript, "0", lockKey("*"))
	if err != nil {
		return nil, err
	}
	flat, _ := v.([]any)
	keys := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		k, _ := flat[i].(string)
		val, _ := flat[i+1].(string)
		keys[k] = val
	}
	return keys, nil
}

// OK reports whether every safety property held. Overlaps that a clock
// jump explains do not count; a write that fencing let through after a
// newer holder's does, wherever it happened.
func (r Report) OK() bool {
	return len(r.Overlaps) == 0 && r.TokenRegressions == 0 && r.EndedWithoutDone == 0 && r.Blocked == 0 && r.StaleResumes == 0 && r.Stranded == 0 &&
		r.OverlapStale.Failed == 0 && r.ClockStale.Failed == 0
}

// String reports the guarantees; ClockReport the clock jumps.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: %d acquisitions (%d gave up), %d overlaps, %d token regressions, %d writes, %d stale writes rejected (%d holders paused past their validity), %d lost leases, %d ended without Done; acquire p99 %v (all up), %v (one node down); faults %v",
		r.Duration.Round(time.Second), r.Acquisitions, r.AcquireFailures, len(r.Overlaps), r.TokenRegressions,
		r.Writes, r.StaleRejected, r.LatePauses, r.Lost, r.EndedWithoutDone,
		r.AcquireP99.Round(time.Microsecond), r.AcquireP99Down.Round(time.Microsecond), r.Faults)
	fmt.Fprintf(&b, "; %d keys blocked by a dead process; %d released leases resumed; %d failovers behind one address not come back from; %d process stalls, longest %v (%d late Dones they explain); seed %d",
		r.Blocked, r.StaleResumes, r.Stranded, r.Stalls, r.LongestStall.Round(time.Millisecond), r.StalledDone, r.Seed)
	r.writeOverlaps(&b, r.Overlaps, true)
	if len(r.Overlaps) > 0 {
		fmt.Fprintf(&b, "\n  stale holders' writes in these overlaps: %v", r.OverlapStale)
	}
	return b.String()
}

// ClockReport tells the clock jumps apart from the guarantees: the
// overlaps they explain and what fencing did with the stale writes.
func (r Report) ClockReport() string {
	var b strings.Builder
	fmt.Fprintf(&b, "clock jumps (outside Redlock's assumptions, not violations): %d steps of a node's clock by more than a TTL; %d overlaps they explain; stale holders' writes in them: %v; %d token regressions after a token from a clock ahead",
		len(r.ClockJumps), len(r.ClockOverlaps), r.ClockStale, r.ClockRegressions)
	r.writeOverlaps(&b, r.ClockOverlaps, false)
	fmt.Fprintf(&b, "\nlapses of every key of a lease (outside them too): %d; %d overlaps they explain (another owner in the gap, before the lease learned it was lost)",
		len(r.Lapses), len(r.LapseOverlaps))
	return b.String()
}

// writeOverlaps writes the first overlaps, each with the faults around it
// (times from the second holder's acquisition) and, with logs, what the
// two holders' engines logged of their nodes meanwhile.
func (r Report) writeOverlaps(b *strings.Builder, overlaps []Overlap, logs bool) {
	for i, o := range overlaps {
		if i == 5 {
			fmt.Fprintf(b, "\n  ... %d more", len(overlaps)-5)
			break
		}
		fmt.Fprintf(b, "\n  overlap: %v", o)
		for _, f := range r.near(o) {
			where := ""
			if f.Node >= 0 {
				where = fmt.Sprintf(" on node %d", f.Node)
			}
			fmt.Fprintf(b, "\n    %s%s from %v to %v", f.Kind, where,
				f.Start.Sub(o.Second.Acquired).Round(time.Millisecond), f.End.Sub(o.Second.Acquired).Round(time.Millisecond))
		}
		if !logs || r.log == nil {
			continue
		}
		for _, l := range r.log.between(o.First.Acquired.Add(-time.Second), o.Second.Acquired.Add(100*time.Millisecond),
			o.First.Resource, engineOf(o.First.Holder), engineOf(o.Second.Holder)) {
			fmt.Fprintf(b, "\n    %v %s: %s", l.At.Sub(o.Second.Acquired).Round(time.Millisecond), l.Engine, l.Text)
		}
	}
}

// explainer is a broken timing assumption that explains some overlaps:
// a ClockJump, a Lapse.
type explainer interface{ explains(o Overlap) bool }

// split sets apart the overlaps that one of why explains.
func split[E explainer](overlaps []Overlap, why []E) (ours, explained []Overlap) {
	for _, o := range overlaps {
		if slices.ContainsFunc(why, func(e E) bool { return e.explains(o) }) {
			explained = append(explained, o)
		} else {
			ours = append(ours, o)
		}
	}
	return ours, explained
}

func (r *run) progress(ctx context.Context, start time.Time) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	last := -1
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			ov, _ := r.rec.Check()
			w, s := r.store.Counts()
			r.cfg.Logf("safety: %v: %d acquisitions, %d overlaps (clock jumps included), %d writes, %d stale rejected",
				time.Since(start).Round(time.Second), r.rec.Count(), len(ov), w, s)
			if n := r.rec.Count(); n == last {
				r.stalled()
			} else {
				last = n
			}
		}
	}
}

func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)*99/100]
}

// stalled logs why no worker acquired anything lately: the workers' last
// error and what the first engine says of its nodes.
func (r *run) stalled() {
	if err := r.lastErr.Load(); err != nil {
		r.cfg.Logf("safety: stalled; a worker's last error: %v", *err)
	}
	r.mu.Lock()
	var e *engine.Engine
	if len(r.engines) > 0 {
		e = r.engines[0]
	}
	r.mu.Unlock()
	if e != nil {
		for _, n := range e.Stats().Nodes {
			r.cfg.Logf("safety: stalled: node %s: down %v pending %d quarantined %v slots out %d restarts %d",
				n.Addr, n.Down, n.Pending, time.Until(n.QuarantinedUntil).Round(time.Millisecond), n.QuarantinedSlots, n.Restarts)
			for _, sh := range n.Shards {
				r.cfg.Logf("safety: stalled:   shard %s: down %v pending %d quarantined %v slots out %d",
					sh.Addr, sh.Down, sh.Pending, time.Until(sh.QuarantinedUntil).Round(time.Millisecond), sh.QuarantinedSlots)
			}
		}
	}
}
