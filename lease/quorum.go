package lease

import "github.com/redlease/redlease/node"

// Quorum is the number of grants a lease needs among n nodes: n/2+1.
func Quorum(n int) int { return n/2 + 1 }

// tally counts the votes of one round.
type tally struct {
	n       int // nodes
	granted int
	refused int // every answer but a grant: taken, absent, timeout, failed
	taken   int // not the lease's key: another owner's (Taken), or none (Absent)
}

func (t *tally) add(o node.Outcome) {
	if o == node.Granted {
		t.granted++
		return
	}
	t.refused++
	if o == node.Taken || o == node.Absent {
		t.taken++
	}
}

// won: a quorum granted.
func (t *tally) won() bool { return t.granted >= Quorum(t.n) }

// lost: so many refused that a quorum is out of reach.
func (t *tally) lost() bool { return t.refused > t.n-Quorum(t.n) }
