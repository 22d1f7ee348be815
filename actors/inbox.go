package actors

import (
	"runtime"
	"sync"
)

// Inbox is an actor without protoactor's registry: a queue whose messages
// a Handler handles, one at a time, in the order they were posted, on a
// dispatcher (or on a caller's goroutine: Ask). It has no PID, no
// supervisor and no system messages, and costs nothing once nobody refers
// to it: for an actor that lives as long as an entry in a map, made and
// dropped as often as a lock is taken. It keeps no room for messages
// until two are queued at once. Its zero value is unusable: Init it,
// once, where it will stay (it is meant to be a field of its handler).
type Inbox struct {
	mu        sync.Mutex
	q         ring
	scheduled bool // a run is scheduled or running

	handler    Handler
	dispatcher *Dispatcher
}

// Handler is what an Inbox hands its messages to.
type Handler interface {
	// Receive handles msg.
	Receive(msg any)
	// Crashed: Receive panicked with reason on msg; the inbox goes on
	// with the next message.
	Crashed(reason, msg any)
}

// Init readies in to hand its messages to h, on dispatcher.
func (in *Inbox) Init(dispatcher *Dispatcher, h Handler) {
	in.handler, in.dispatcher = h, dispatcher
}

// Post queues msg; a dispatcher worker handles it.
func (in *Inbox) Post(msg any) {
	in.mu.Lock()
	in.q.push(msg)
	idle := !in.scheduled
	in.scheduled = true
	in.mu.Unlock()
	if idle {
		in.dispatcher.schedule(in)
	}
}

// Ask handles msg on the calling goroutine when the inbox is idle (then
// with at most runLimit messages posted meanwhile), and queues it behind
// the others otherwise: for a caller that waits for the answer next,
// holding no lock the handler may take.
func (in *Inbox) Ask(msg any) {
	in.mu.Lock()
	if in.scheduled {
		in.q.push(msg)
		in.mu.Unlock()
		return
	}
	in.scheduled = true // the queue is empty: msg is the next
	in.mu.Unlock()
	in.handle(msg, runLimit)
}

// Queued is the number of messages waiting in the inbox.
func (in *Inbox) Queued() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return int(in.q.n)
}

// run is a dispatcher worker's run.
func (in *Inbox) run() { in.handle(nil, -1) }

// handle hands msg (unless nil), then the queued messages, to the handler
// until the queue is empty, handing the rest to a dispatcher run after
// limit messages (< 0: no limit).
func (in *Inbox) handle(msg any, limit int) {
	defer func() {
		if r := recover(); r != nil {
			in.handler.Crashed(r, msg)
			in.dispatcher.schedule(in) // still scheduled: go on with the rest
		}
	}()
	for handled, t := 0, in.dispatcher.Throughput(); ; handled++ {
		if msg == nil {
			in.mu.Lock()
			switch {
			case in.q.n == 0:
				in.scheduled = false
				in.mu.Unlock()
				return
			case handled == limit:
				in.mu.Unlock()
				in.dispatcher.schedule(in) // still scheduled: a worker goes on
				return
			}
			msg = in.q.pop()
			in.mu.Unlock()
		}
		if t > 0 && handled > 0 && handled%t == 0 {
			runtime.Gosched()
		}
		in.handler.Receive(msg)
		msg = nil
	}
}
