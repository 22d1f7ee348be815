package lease

// phase is where a lease is. What moves it on (votes of the current round,
// the alarm, calls):
//
//	acquiring  -- a quorum, in time -->            held, or fencing with a FenceKey
//	           -- refused, timeout, too slow -->   backingOff, or failing when out of attempts
//	fencing    -- a quorum of the granting nodes -> held
//	           -- refused, timeout, too slow -->   backingOff, or failing
//	           -- one other owner holds a quorum --> waiting (with a Line)
//	backingOff -- alarm, Wake -->                  acquiring
//	waiting    -- Wake, alarm (expiry, backoff) --> acquiring
//	acquiring, fencing, backingOff, waiting -- Cancel, Close --> failing
//	held       -- alarm (auto-extension), Extend --> extending
//	extending  -- a quorum, in time -->            held (Extended)
//	           -- refused, timeout, too slow -->   held (ExtendFailed)
//	           -- a quorum holds another key -->   ended (Lost)
//	held, extending -- deadline, Close -->         ended
//	held, extending -- Release -->                 releasing
//	releasing  -- a quorum confirmed, or all answered -> ended
//	failing, ended -- the owed votes are in, or the linger alarm --> done:
//	           the actor is idle, or stops
//
// Each failed acquire round, and every end of a held lease but its
// deadline, sends release to every node first.
type phase uint8

const (
	acquiring  phase = iota // an acquire round is out
	fencing                 // won; writing the token back to the granting nodes
	backingOff              // between acquire rounds
	waiting                 // for the holder's release or its keys' expiry (Config.Line)
	failing                 // gave up; the Result goes out once owed votes are in
	held                    // the lease is held
	extending               // held, with an extend round out
	releasing               // ended by Release; answering it once a quorum confirmed
	ended                   // the lease is over; done once owed votes are in
)

// holding reports whether the lease is held (extending included).
func (a *leaseActor) holding() bool { return a.phase == held || a.phase == extending }
