package actors

import "github.com/asynkron/protoactor-go/actor"

// Inbox is an actor without protoactor's registry: a Mailbox whose user
// messages one function handles, one at a time, in the order they were
// posted, on a dispatcher (or on a caller's goroutine: Ask). It has no
// PID and no supervisor, and costs nothing once nobody refers to it: for
// an actor that lives as long as an entry in a map, made and dropped as
// often as a lock is taken.
type Inbox struct {
	box     *Mailbox
	handle  func(msg any)
	onPanic func(reason, msg any)
}

// NewInbox makes an Inbox whose messages handle handles on dispatcher.
// A panic in handle goes to onPanic, and the inbox goes on with the next
// message.
func NewInbox(dispatcher actor.Dispatcher, handle func(msg any), onPanic func(reason, msg any)) *Inbox {
	in := &Inbox{box: newMailbox(), handle: handle, onPanic: onPanic}
	in.box.RegisterHandlers(in, dispatcher)
	return in
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

// InvokeUserMessage implements actor.MessageInvoker.
func (in *Inbox) InvokeUserMessage(msg any) { in.handle(msg) }

// InvokeSystemMessage implements actor.MessageInvoker: an Inbox gets none.
func (in *Inbox) InvokeSystemMessage(any) {}

// EscalateFailure implements actor.MessageInvoker.
func (in *Inbox) EscalateFailure(reason, msg any) { in.onPanic(reason, msg) }
