// Package lease runs one actor per lease: it asks every node actor at once,
// counts votes, decides at quorum, computes validity on the monotonic clock,
// cleans up after failed rounds, retries with randomized backoff, and ends
// the lease (closing Done) when it is released, its validity deadline
// passes, or the engine closes.
//
// # Lifecycle of a lease actor
//
//  1. acquiring: a round sends Acquire to all N nodes and counts votes for
//     that round only (votes carry the round number; older ones are
//     dropped). N/2+1 grants with positive validity make the lease held; a
//     quorum that became impossible, or the node timeout, fails the round.
//  2. A failed round sends Release to all N nodes at once, then waits a
//     randomized backoff (waiting) and tries again, until the attempt
//     budget, the backoff or the caller's context says stop (failing).
//  3. held: a timer fires at the validity deadline and ends the lease with
//     ErrExpired. Release ends it with ErrReleased.
//  4. After the end (or the final failure) the actor waits for the votes it
//     is still owed, bounded by the node timeout, then stops. Nothing it
//     sent is left unanswered, so nothing is left running.
package lease
