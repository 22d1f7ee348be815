// Package actors holds the protoactor-go plumbing that redlease's node and
// lease actors share: an actor system that logs only where it is told to,
// a mailbox and a dispatcher that allocate nothing per message, panic
// containment for Receive, and timers that deliver a message instead of
// running code on their own goroutine.
//
// It imports nothing else of redlease; everything else may import it.
//
// It is the engine's machinery: its exported names serve the other
// packages of this module and carry no compatibility promise. Users
// import package engine.
package actors
