// Package node runs one actor per Redis master. The node actor owns that
// node's connection, turns the acquire, extend, fence and release commands
// of every lease into pipelined batches, and answers each command with
// exactly one Vote, by the command's deadline.
//
// Batching is self-clocked: while one batch is on the wire, commands queue in
// the actor's mailbox; when the batch returns, everything that queued goes
// out in one DoMulti, which rueidis writes with one syscall. Under load the
// batches grow and the cost per command falls; when idle, a command goes out
// at once.
//
// Commands take effect on a node in the order they reached its actor, so a
// lease's release never overtakes its acquire:
//   - one connection at a time (Conn): a batch never moves to a pooled one;
//   - a new connection carries commands only after a probe: the probe learns
//     which server process it reached (a restart may have lost keys) and
//     kills the previous connection on the server, so nothing that an
//     abandoned connection sent can run after what the new one sends;
//   - a batch runs as calls of one script (batch.lua), each carrying up to
//     maxScriptOps commands in order; a call that meets NOSCRIPT (the
//     server's cache lost the script) is sent again in full with every
//     call after it, in order (every command is idempotent).
//
// A Watcher, beside the actor and on a connection of its own, hears the
// releases the release script announces (waiting callers wake on them).
//
// A release that got no answer is sent again, first, once the node answers,
// while its key may live and until Stop, which drops it: the key then
// expires by its TTL. Receive never waits on Redis. The node's one
// sender goroutine runs the actor's mailbox between the batches and probes
// it puts on the wire, which report back with a message: a command goes
// from the lease actor to this goroutine, not through a dispatcher worker
// first.
//
// It is the engine's machinery: its exported names serve the other
// packages of this module and carry no compatibility promise. Users
// import package engine.
package node
