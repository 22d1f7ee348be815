// Package actors holds the protoactor-go plumbing that redlease's node and
// lease actors share: an actor system that logs only where it is told to,
// panic containment for Receive, and timers that deliver a message instead
// of running code on their own goroutine.
//
// It imports nothing else of redlease; everything else may import it.
package actors
