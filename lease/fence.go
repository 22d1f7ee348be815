package lease

import (
	"github.com/redlease/redlease/node"
)

// startFence follows a won acquire round of a fenced lease: the token is
// one more than the largest fence counter the granting nodes reported, and
// the lease is held only once a quorum of those granting nodes has stored
// it (see "Fencing tokens" in doc.go for why each step is needed).
//
// The round's validity still counts from the acquire round's start.
func (a *leaseActor) startFence() {
	var granting []int
	a.token = 0
	for i, v := range a.votes {
		if v.Outcome == node.Granted {
			granting = append(granting, i)
			a.token = max(a.token, v.Counter)
		}
	}
	a.token++
	// Nodes that did not grant are never asked: their acknowledgement
	// would not count.
	a.startVote(fencing, a.fenceCmd, granting, a.now())
}

func (a *leaseActor) fenceCmd(r node.Request) node.Command {
	return &node.Fence{Request: r, FenceKey: a.cfg.FenceKey, Token: a.token}
}
