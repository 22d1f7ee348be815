package actors

import (
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// NewSystem returns an actor system whose own log lines (protoactor writes
// colour to stderr by default) go to logger instead, or nowhere when logger
// is nil. The system starts no goroutines of its own.
func NewSystem(logger *slog.Logger) *actor.ActorSystem {
	if logger == nil {
		logger = Discard
	}
	logger = logger.With("component", "protoactor")
	return actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return logger }),
		actor.WithDeadLetterRequestLogging(false),
	)
}

// Discard is a logger that drops everything: redlease's default.
var Discard = slog.New(slog.DiscardHandler)

// After delivers msg to pid once d has passed and returns the timer, so the
// caller can Stop it. A waiting timer costs no goroutine.
func After(system *actor.ActorSystem, d time.Duration, pid *actor.PID, msg any) *time.Timer {
	return time.AfterFunc(d, func() { system.Root.Send(pid, msg) })
}

// Recover, deferred at the top of a Receive, turns a panic into a call of
// onPanic with the panic's value, so an actor can end its work with an error
// instead of being restarted by protoactor with its state wiped.
func Recover(onPanic func(reason any)) {
	if r := recover(); r != nil {
		onPanic(r)
	}
}

// Late marks a reply that may reach an actor after it stopped. protoactor
// logs such dead letters unless the message says not to.
type Late struct{}

// IgnoreDeadLetterLogging tells protoactor not to log this dead letter.
func (Late) IgnoreDeadLetterLogging() {}

// Props are the props of redlease actors made by produce (never
// restarted: Recover ends their work instead), on NewMailbox, run by
// dispatcher, or by protoactor's default when dispatcher is nil. One
// Props may spawn many actors.
func Props(produce actor.Producer, dispatcher actor.Dispatcher) *actor.Props {
	return props(produce, dispatcher, NewMailbox)
}

// PropsWithMailbox are Props that also hand each actor's Mailbox to got
// as the actor is spawned (for Offer and Run), right after produce made
// the actor.
func PropsWithMailbox(produce actor.Producer, dispatcher actor.Dispatcher, got func(*Mailbox)) *actor.Props {
	return props(produce, dispatcher, func() actor.Mailbox {
		m := newMailbox()
		got(m)
		return m
	})
}

func props(produce actor.Producer, dispatcher actor.Dispatcher, mailbox actor.MailboxProducer) *actor.Props {
	opts := []actor.PropsOption{actor.WithMailbox(mailbox)}
	if dispatcher != nil {
		opts = append(opts, actor.WithDispatcher(dispatcher))
	}
	return actor.PropsFromProducer(produce, opts...)
}
