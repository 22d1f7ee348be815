// Package node runs one actor per Redis master. The node actor owns that
// node's connection, turns the acquire, extend and release commands of every
// lease into pipelined batches, and answers each command with exactly one
// Vote, by the command's deadline.
//
// Batching is self-clocked: while one batch is on the wire, commands queue in
// the actor; when the batch returns, everything that queued goes out in one
// DoMulti, which rueidis writes with one syscall. Under load the batches grow
// and the cost per command falls; when idle, a command goes out at once.
// Commands reach Redis in the order they reached the actor, on one
// connection, so a lease's release never overtakes its acquire.
//
// Receive never waits on Redis: batches run on their own goroutine and
// report back with a message.
package node
