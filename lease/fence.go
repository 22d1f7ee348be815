package lease

import (
	"time"

	"github.com/redlease/redlease/node"
)

// startFence follows a won acquire round of a fenced lease: the token is
// one more than the largest fence counter the granting nodes reported, and
// the lease is held only once a quorum of those granting nodes has stored
// it (see "Fencing tokens" in doc.go for why each step is needed).
func (a *leaseActor) startFence() {
	a.phase = fencing
	var granting []int
	a.token = 0
	for i, v := range a.votes {
		if v.Outcome == node.Granted {
			granting = append(granting, i)
			a.token = max(a.token, v.Counter)
		}
	}
	a.token++
	n := len(a.cfg.Nodes)
	// Nodes that did not grant are never asked: their acknowledgement
	// would not count.
	a.tally = tally{n: n, refused: n - len(granting)}
	a.round++
	clear(a.votes)
	for _, i := range granting {
		a.system.Root.Send(a.cfg.Nodes[i], &node.Fence{
			Request:  node.Request{Key: a.cfg.Key, Value: a.cfg.Value, Round: a.round, ReplyTo: a.self},
			FenceKey: a.cfg.FenceKey, Token: a.token,
		})
	}
	a.owed += len(granting)
	a.setAlarm(time.Now().Add(a.cfg.NodeTimeout))
}
