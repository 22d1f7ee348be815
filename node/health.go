package node

import (
	"bufio"
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/redlease/redlease/actors"
)

// Errors a node votes with when it is not asked at all.
var (
	// ErrNodeDown: the node failed its last batches or probes; commands
	// fail at once until a probe succeeds.
	ErrNodeDown = errors.New("redlease: node down")
	// ErrQuarantined: the node lost its data (a restart without
	// persistence) and refuses acquires until every lease it may have
	// held has expired.
	ErrQuarantined = errors.New("redlease: node restarted without its data: quarantined")
)

// epochMissing is the acquire script's answer when the node has no epoch
// key: it lost its data since the key was set.
const epochMissing = -1

// Info is what a health probe learns of a node.
type Info struct {
	RunID   string        // changes with every restart
	Uptime  time.Duration // since the process started
	Replica bool          // a read-only replica, useless for locking
	Epoch   bool          // the epoch key exists: the node kept its data
}

// Probe asks a node for its run id, uptime, role and epoch key, in one
// round trip.
func Probe(ctx context.Context, c rueidis.Client, epochKey string) (Info, error) {
	res := c.DoMulti(ctx,
		c.B().Info().Section("server").Build(),
		c.B().Info().Section("replication").Build(),
		c.B().Exists().Key(epochKey).Build())
	server, err := res[0].ToString()
	if err != nil {
		return Info{}, err
	}
	repl, err := res[1].ToString()
	if err != nil {
		return Info{}, err
	}
	exists, err := res[2].AsInt64()
	if err != nil {
		return Info{}, err
	}
	info := Info{RunID: infoField(server, "run_id"), Replica: infoField(repl, "role") == "slave", Epoch: exists == 1}
	if s, err := strconv.ParseInt(infoField(server, "uptime_in_seconds"), 10, 64); err == nil {
		info.Uptime = time.Duration(s) * time.Second
	}
	if info.RunID == "" {
		return Info{}, errors.New("redlease: INFO server has no run_id")
	}
	return info, nil
}

func infoField(info, name string) string {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// health is what the node actor knows of its node.
type health struct {
	runID           string
	down            bool
	failures        int       // consecutive failed batches or probes
	quarantineUntil time.Time // acquires refused before it
	epochPending    bool      // restore the epoch key before the next acquire
	probeDue        bool
}

func (h *health) quarantined(now time.Time) bool { return now.Before(h.quarantineUntil) }

// epochDue: the quarantine is over and the epoch key must be restored, in
// front of the next batch, so the acquires after it pass the check.
func (h *health) epochDue(now time.Time) bool { return h.epochPending && !h.quarantined(now) }

type (
	healthTick struct{ actors.Late }
	probed     struct {
		actors.Late
		at   time.Time
		info Info
		err  error
	}
)

// sent reports a finished batch back to the node actor, returning the
// batch's slice for reuse.
type sent struct {
	actors.Late
	batch    []entry
	size     int  // entries sent
	epochSet bool // the epoch key was restored
	failed   int  // entries that got no answer from Redis
	lostData bool // an acquire found the epoch key missing
}

func (a *nodeActor) quarantineOn() bool { return a.cfg.Quarantine >= 0 }

// start takes the probe New made; a node that was unreachable then is
// probed first thing.
func (a *nodeActor) start(first *Info) {
	if first == nil {
		a.health.probeDue = true
		return
	}
	a.firstContact(time.Now(), *first)
}

// firstContact: a node without the epoch key is fresh or lost its data in
// a restart; either way any lease it held was set before it started, so it
// refuses acquires until Quarantine has passed since then. A node up for
// longer than that (a fresh deployment on Redis that has been running) is
// used at once.
func (a *nodeActor) firstContact(at time.Time, info Info) {
	a.health.runID = info.RunID
	if !info.Epoch && a.quarantineOn() {
		a.lostData(at.Add(-info.Uptime), "no epoch key")
	}
}

// lostData quarantines the node until Quarantine after since, the moment
// it lost its data.
func (a *nodeActor) lostData(since time.Time, why string) {
	a.health.epochPending = true
	until := since.Add(a.cfg.Quarantine)
	a.health.quarantineUntil = until
	a.stats.QuarantineUntil.Store(until.UnixNano())
	if time.Now().Before(until) {
		a.stats.Restarts.Add(1)
		a.cfg.Logger.Warn("redlease: node lost its data; refusing acquires until every lease it held expired",
			"node", a.cfg.Addr, "why", why, "until", until)
	}
}

func (a *nodeActor) probeTimeout() time.Duration { return max(a.cfg.Timeout, 100*time.Millisecond) }

func (a *nodeActor) probe(deadline time.Time) {
	m := &probed{at: time.Now()}
	client, err := a.conn.get()
	if err == nil {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		m.info, err = Probe(ctx, client, a.cfg.EpochKey)
		cancel()
	}
	m.err = err
	a.system.Root.Send(a.self, m)
}

func (a *nodeActor) probeDone(m *probed) {
	defer a.armProbe()
	if m.err != nil {
		a.failure(m.err)
		return
	}
	a.health.failures = 0
	if m.info.Replica {
		a.setDown(true, errors.New("the node is a read-only replica"))
		return
	}
	a.setDown(false, nil)
	switch {
	case a.health.runID == "":
		a.firstContact(m.at, m.info)
	case m.info.RunID != a.health.runID:
		a.health.runID = m.info.RunID
		if a.quarantineOn() {
			a.lostData(m.at.Add(-m.info.Uptime), "restarted (new run_id)")
		}
	case !m.info.Epoch && !a.health.epochPending && a.quarantineOn():
		a.lostData(m.at, "epoch key gone (FLUSHALL?)")
	}
}

func (a *nodeActor) batchDone(m *sent) {
	if m.epochSet {
		a.health.epochPending = false
	}
	if m.lostData && a.quarantineOn() && !a.health.epochPending {
		// Until the probe tells when it restarted, count from now.
		a.lostData(time.Now(), "an acquire found no epoch key")
		a.health.probeDue = true
	}
	switch {
	case m.failed == 0:
		a.health.failures = 0
		a.setDown(false, nil)
	case m.failed == m.size:
		a.failure(nil)
	}
}

// failure counts a batch or probe that got no answer; two in a row mark
// the node down, so that rounds stop waiting on it.
func (a *nodeActor) failure(err error) {
	a.health.failures++
	if a.health.failures >= 2 {
		a.setDown(true, err)
	}
}

func (a *nodeActor) setDown(down bool, err error) {
	if a.health.down == down {
		return
	}
	a.health.down = down
	a.stats.Down.Store(down)
	if down {
		a.cfg.Logger.Warn("redlease: node down; failing its commands fast until a probe succeeds", "node", a.cfg.Addr, "err", err)
		a.armProbe()
	} else {
		a.cfg.Logger.Info("redlease: node up again", "node", a.cfg.Addr)
	}
}

// armProbe schedules the next probe: every HealthInterval, five times as
// often while the node is down.
func (a *nodeActor) armProbe() {
	if a.timer != nil {
		a.timer.Stop()
	}
	d := a.cfg.HealthInterval
	if a.health.down {
		d /= 5
	}
	a.timer = actors.After(a.system, d, a.self, &healthTick{})
}
