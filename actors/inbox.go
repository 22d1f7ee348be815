package actors

import "github.com/asynkron/protoactor-go/actor"

// Inbox is an actor without protoactor's registry: a Mailbox whose user
// messages a Handler handles, one at a time, in the order they were
// posted, on a dispatcher (or on a caller's goroutine: Ask). It has no
// PID and no supervisor, and costs nothing once nobody refers to it: for
// an actor that lives as long as an entry in a map, made and dropped as
// often as a lock is taken. Its zero value is unusable: Init it, once,
// where it will stay (it is meant to be a field of its handler).
type Inbox struct {
	box     Mailbox
	handler Handler
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
func (in *Inbox) Init(dispatcher actor.Dispatcher, h Handler) {
	in.handler = h
	in.box.run = in.box.process
	in.box.RegisterHandlers(in, dispatcher)
}

// Post queues msg; a dispatcher worker handles it.
func (in *Inbox) Post(msg any) { in.box.PostUserMessage(msg) }

// Ask queues msg and, when the inbox was idle, handles it on the calling
// goroutine (with at most a few messages posted meanwhile): for a caller
// that waits for the answer next, holding no lock the handler may take.
func (in *Inbox) Ask(msg any) {
	if in.box.Offer(msg) {
		in.box.Run()
	}
}

// Queued is the number of messages waiting in the inbox.
func (in *Inbox) Queued() int { return in.box.UserMessageCount() }

// InvokeUserMessage implements actor.MessageInvoker.
func (in *Inbox) InvokeUserMessage(msg any) { in.handler.Receive(msg) }

// InvokeSystemMessage implements actor.MessageInvoker: an Inbox gets none.
func (in *Inbox) InvokeSystemMessage(any) {}

// EscalateFailure implements actor.MessageInvoker.
func (in *Inbox) EscalateFailure(reason, msg any) { in.handler.Crashed(reason, msg) }
