package lease

import (
	"fmt"
	"strings"
)

// phase is where a lease is. Every change of phase goes through to, which
// refuses a move that edges lacks; the package doc draws edges (as
// TestDiagramIsTheEdgeTable checks). Each failed acquire round, and every
// end of a held lease but its deadline, sends release to every node
// first. A held lease between rounds parks (see leaseActor): that is its
// body's state, not a phase; the next message for it binds it an actor,
// in the phase it parked in.
type phase uint8

const (
	idle       phase = iota // no lease: before begin, and once done
	acquiring               // an acquire round is out
	fencing                 // won; writing the token back to the granting nodes
	backingOff              // between acquire rounds
	waiting                 // for the holder's release or its keys' expiry (Config.Line); see waitReason
	failing                 // gave up; the Result goes out once owed votes are in
	held                    // the lease is held
	extending               // held, with an extend round out
	releasing               // ended by Release; answering it once a quorum confirmed
	ended                   // the lease is over; done once owed votes are in
	phases                  // the number of phases
)

var phaseNames = [phases]string{"idle", "acquiring", "fencing", "backingOff", "waiting", "failing",
	"held", "extending", "releasing", "ended"}

func (p phase) String() string {
	if p < phases {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// edge is a move of the state machine: from any of from, to to, for why.
type edge struct {
	from []phase
	to   phase
	why  string
}

// edges is the lease state machine. The package doc draws it.
var edges = []edge{
	{[]phase{idle}, acquiring, "begin"},
	{[]phase{idle}, waiting, "begin, WaitFirst: to hear the release of the lease before it in its engine's line"},
	{[]phase{idle}, held, "begin, Resumed: a check round found a quorum holding the lease's value"},
	{[]phase{acquiring}, fencing, "a quorum in time, with a FenceKey"},
	{[]phase{acquiring, fencing}, held, "a quorum in time (fencing: of the granting nodes)"},
	{[]phase{acquiring}, acquiring, "refused by an owner whose release was heard since, or with a recheck owed: at once"},
	{[]phase{acquiring}, waiting, "refused, with a Line: one other owner holds a quorum, or a split vote"},
	{[]phase{acquiring, fencing}, backingOff, "refused, timeout, won too late; attempts left"},
	{[]phase{acquiring, fencing, backingOff, waiting}, failing, "out of attempts or backoff, a quarantine past the deadline, Cancel, Close"},
	{[]phase{backingOff}, acquiring, "the alarm, a Wake"},
	{[]phase{waiting}, acquiring, "a Wake (granted, named next, a recheck), the alarm (see waitReason)"},
	{[]phase{held}, extending, "the alarm (auto-extension), Extend"},
	{[]phase{extending}, held, "a quorum in time (Extended); refused, timeout, too slow (ExtendFailed)"},
	{[]phase{held, extending}, releasing, "Release"},
	{[]phase{held, extending}, ended, "the deadline, Close, a quorum without the lease's key (Lost), a crash"},
	{[]phase{releasing}, ended, "a quorum deleted the key, or so many lack it that none can"},
	{[]phase{failing, releasing, ended}, idle, "the owed votes are in, or the linger alarm: done"},
	{[]phase{acquiring, fencing, backingOff, waiting, held, extending}, idle, "the actor stops (a crash, the pool closing)"},
}

// allowed is edges as a lookup: allowed[from][to].
var allowed = func() (m [phases][phases]bool) {
	for _, e := range edges {
		for _, f := range e.from {
			m[f][e.to] = true
		}
	}
	return m
}()

// to moves the lease to phase p. A move the table lacks is a bug: it
// panics, which ends the lease as a crash does (see crash).
func (a *leaseActor) to(p phase) {
	if !allowed[a.phase][p] {
		panic(fmt.Sprintf("redlease: lease phase %v -> %v is not in the edge table", a.phase, p))
	}
	a.phase = p
}

// diagram renders edges as the package doc draws them.
func diagram() string {
	var b strings.Builder
	for _, e := range edges {
		from := make([]string, len(e.from))
		for i, f := range e.from {
			from[i] = f.String()
		}
		fmt.Fprintf(&b, "%s -- %s -->\n    %v\n", strings.Join(from, ", "), e.why, e.to)
	}
	return b.String()
}

// holding reports whether the lease is held (extending included).
func (a *leaseActor) holding() bool { return a.phase == held || a.phase == extending }

// waitReason is what a waiting lease waits for, and so what its alarm
// means: the cause of the round the alarm starts.
type waitReason uint8

const (
	// waitHearing: the next caller in its engine's line waits to hear the
	// release of the lease before it (Config.WaitFirst), at most
	// NodeTimeout/YieldDivisor.
	waitHearing waitReason = iota + 1
	// waitExpiry: the keys in the way expire, as the refusing nodes said.
	waitExpiry
	// waitFallback: the backoff bounds the wait: no announcement can come,
	// or nobody knows when the keys expire.
	waitFallback
	// waitRace: a release named nobody (or was missed): race after
	// raceDelay.
	waitRace
	// waitTurn: a release named another waiter next; this one lets it go
	// first, and races only if no release comes meanwhile.
	waitTurn
	// waitSplit: waiters that woke together split the nodes; each draws a
	// new delay.
	waitSplit
)

// cause is the WakeCause of the round the alarm starts.
func (r waitReason) cause() WakeCause {
	switch r {
	case waitExpiry:
		return WakeExpiry
	case waitRace, waitTurn:
		return WakeRelease
	case waitSplit:
		return WakeSplit
	}
	return WakeFallback
}
