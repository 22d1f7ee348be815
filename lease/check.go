package lease

import (
	"context"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/redlease/redlease/actors"
	"github.com/redlease/redlease/node"
)

// A check round reads, on every node at once, whether a lease's key holds
// its value and for how long (node.Check), and changes nothing: the
// engine's Lease.Check, and its Resume, which takes a lease of an earlier
// process as held on the nodes' word (Config.Resumed).

// Check sends a node.Check of key and value to every node at once, and
// returns their votes, by node, once all answered (a node actor answers
// every command by its node timeout), and the round's start. When ctx
// ends or stop closes first, it returns at once, with ok false.
func (p *Pool) Check(ctx context.Context, stop <-chan struct{}, key, value string) (votes []node.Vote, start time.Time, ok bool) {
	n := len(p.shared.Nodes)
	in := make(chan *node.Vote, n) // each node answers once: never full
	pid := p.system.Root.Spawn(actors.Props(func() actor.Actor {
		return actor.ReceiveFunc(func(c actor.Context) {
			if v, ok := c.Message().(*node.Vote); ok {
				in <- v
			}
		})
	}, nil))
	defer p.system.Root.Stop(pid) // later votes are dead letters, unlogged (node.Vote is Late)
	start = p.clock.Now()
	c := &node.Check{Request: node.Request{Key: key, Value: value, Round: 1, ReplyTo: pid, Sent: start}}
	for _, to := range p.shared.Nodes {
		p.system.Root.Send(to, c)
	}
	votes = make([]node.Vote, n)
	for range n {
		select {
		case v := <-in:
			votes[v.Node] = *v
			v.Free()
		case <-ctx.Done():
			return votes, start, false
		case <-stop:
			return votes, start, false
		}
	}
	return votes, start, true
}

// Reading is what a check round's votes say of a value.
type Reading struct {
	Holding int // nodes whose key holds the value now
	// TTL is what a quorum still guarantees: the least remaining TTL
	// among the Quorum nodes holding the value whose keys live longest,
	// as they answered; 0 below a quorum.
	TTL time.Duration
	// Until is the validity a quorum's keys give, by the acquire's rule:
	// the round's start plus TTL, less the drift (Drift(TTL)), since each
	// node answered after the start; zero below a quorum.
	Until time.Time
	Start time.Time   // the round's
	Votes []node.Vote // the round's, by node
}

// Read reads the votes of a check round that started at start.
func Read(votes []node.Vote, start time.Time, driftFactor float64) Reading {
	var buf [16]time.Duration // 16 nodes without allocating
	ttls := buf[:0]
	for _, v := range votes {
		if v.Outcome == node.Granted {
			ttls = append(ttls, v.TTL)
		}
	}
	r := Reading{Holding: len(ttls), Start: start, Votes: votes}
	q := Quorum(len(votes))
	if len(ttls) < q {
		return r
	}
	slices.Sort(ttls)
	r.TTL = ttls[len(ttls)-q]
	r.Until = start.Add(r.TTL - Drift(r.TTL, driftFactor))
	return r
}

// Quorum reports whether a quorum of the nodes holds the value.
func (r Reading) Quorum() bool { return r.Holding >= Quorum(len(r.Votes)) }

// Resumes says whether a lease of ttl, read now, may be held on r's word
// (Config.Resumed): nil when a quorum holds its value with more than
// EndMargin(ttl) of validity left; otherwise why not: an error matching
// ErrLeaseLost when so many nodes answered that their key is not the
// value's (another owner's, or none) that no quorum can hold it, as a
// Release tells; errExpiresSoon when the quorum's keys expire too soon; else
// a refusal counting what the nodes answered (some did not answer, or
// sit out a quarantine: the value may still be held).
func (r Reading) Resumes(now time.Time, ttl time.Duration) error {
	n, notMine := len(r.Votes), 0
	for _, v := range r.Votes {
		if v.Outcome == node.Taken || v.Outcome == node.Absent {
			notMine++
		}
	}
	switch {
	case r.Quorum() && r.Until.Sub(now) > EndMargin(ttl):
		return nil
	case r.Quorum():
		return errExpiresSoon
	case n-notMine < Quorum(n):
		return lost(refused(r.Votes, true))
	}
	return refused(r.Votes, true)
}

// Resumed starts a lease held already, under its Value, by an earlier
// holder (the engine's Resume): a check round that started at Start found
// a quorum holding Key with Value, valid until Until (Reading.Until). The
// lease runs no acquire round; its token is Token.
type Resumed struct {
	Start, Until time.Time
	Token        uint64
}

// resume holds a lease on a check round's word (Config.Resumed). Its
// first automatic extension comes at a third of what is left of its
// validity, or of its TTL if less: a lease resumed with little left must
// not wait a third of its TTL.
func (a *leaseActor) resume() {
	r := a.cfg.Resumed
	a.cfg.Resumed = nil // needed no more
	a.start, a.token = r.Start, r.Token
	a.hold(r.Until, r.Start.Add(min(a.cfg.TTL, r.Until.Sub(r.Start))/ExtendDivisor))
}
