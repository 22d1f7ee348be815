package actors

import (
	"runtime"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

// NewMailbox is a protoactor MailboxProducer (actor.WithMailbox) for
// redlease's actors. protoactor's default mailbox allocates a method value
// every time it goes from idle to busy, a queue node per system message
// and two queues per actor: together a fifth of the allocations of an
// acquire+release cycle. This one allocates only when a queue grows.
// It keeps the default's order: system messages first, user messages in
// the order they were posted, at most Throughput of them per run before
// yielding.
func NewMailbox() actor.Mailbox { return newMailbox() }

func newMailbox() *Mailbox {
	m := &Mailbox{}
	m.run = m.process // once: scheduling it allocates nothing
	return m
}

// Mailbox is the mailbox NewMailbox makes. Besides protoactor's
// interface it lets a caller that will wait for an actor's answer run the
// actor itself (Offer, Run).
type Mailbox struct {
	mu        sync.Mutex
	user, sys ring
	scheduled bool // a run is scheduled or running
	suspended bool // user messages wait (protoactor's SuspendMailbox)

	invoker    actor.MessageInvoker
	dispatcher actor.Dispatcher
	run        func()
}

func (m *Mailbox) PostUserMessage(msg any) { m.post(&m.user, msg) }

func (m *Mailbox) PostSystemMessage(msg any) { m.post(&m.sys, msg) }

func (m *Mailbox) post(q *ring, msg any) {
	if m.push(q, msg) {
		m.dispatcher.Schedule(m.run)
	}
}

// push queues msg and reports whether the mailbox was idle: whoever
// pushed must then see that it runs.
func (m *Mailbox) push(q *ring, msg any) (idle bool) {
	m.mu.Lock()
	q.push(msg)
	idle = !m.scheduled
	m.scheduled = true
	m.mu.Unlock()
	return idle
}

// Offer posts msg as a user message, as protoactor's Send does (no
// envelope, no middleware), except that a mailbox that was idle is not
// scheduled: Offer reports true, and the caller must then call Run, soon
// and holding no lock the actor may take. A caller that is about to wait
// for the actor's answer does the actor's work itself that way, instead of
// handing it to a dispatcher worker and sleeping until the worker ran: one
// goroutine hand-off less per call.
func (m *Mailbox) Offer(msg any) (run bool) { return m.push(&m.user, msg) }

// Schedule has a dispatcher worker run the mailbox: after Offer reported
// true, for a caller that will not wait for the actor.
func (m *Mailbox) Schedule() { m.dispatcher.Schedule(m.run) }

// Run handles the mailbox's messages on the calling goroutine, as a
// dispatcher worker would, but at most runLimit of them: the rest go to a
// dispatcher run, so that a busy actor does not take the caller's
// goroutine over. Only after Offer reported true.
func (m *Mailbox) Run() { m.handle(runLimit) }

// runLimit bounds the messages Run handles.
const runLimit = 8

// DrainUser takes the user messages still queued out of the mailbox and
// hands them to f, in order: for an actor that is stopping, to answer
// what it will never handle.
func (m *Mailbox) DrainUser(f func(msg any)) {
	m.mu.Lock()
	msgs := make([]any, 0, m.user.n)
	for m.user.n > 0 {
		msgs = append(msgs, m.user.pop())
	}
	m.mu.Unlock()
	for _, msg := range msgs {
		f(msg)
	}
}

func (m *Mailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.invoker, m.dispatcher = invoker, dispatcher
}

func (m *Mailbox) Start() {}

func (m *Mailbox) UserMessageCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return int(m.user.n)
}

// process handles messages until both queues are empty (or only user
// messages are left while suspended), yielding every Throughput messages.
func (m *Mailbox) process() { m.handle(-1) }

// handle is process, handing the rest to a dispatcher run after limit
// messages (< 0: no limit).
func (m *Mailbox) handle(limit int) {
	var msg any
	handled := 0
	defer func() {
		if r := recover(); r != nil {
			m.invoker.EscalateFailure(r, msg)
			m.dispatcher.Schedule(m.run) // still scheduled: go on with the rest
		}
	}()
	for i, t := 0, m.dispatcher.Throughput(); ; i++ {
		if i == t {
			i = 0
			runtime.Gosched()
		}
		m.mu.Lock()
		system := m.sys.n > 0
		if handled == limit && (system || !m.suspended && m.user.n > 0) {
			m.mu.Unlock()
			m.dispatcher.Schedule(m.run) // still scheduled: a worker goes on
			return
		}
		switch {
		case system:
			msg = m.sys.pop()
			if m.sys.n == 0 {
				// System messages are rare (Started, then Stop): an idle
				// actor, or one that holds a lease, need not keep room
				// for them.
				m.sys = ring{}
			}
		case !m.suspended && m.user.n > 0:
			msg = m.user.pop()
		default:
			m.scheduled = false
			m.mu.Unlock()
			return
		}
		if system {
			switch msg.(type) {
			case *actor.SuspendMailbox:
				m.suspended = true
				m.mu.Unlock()
				continue
			case *actor.ResumeMailbox:
				m.suspended = false
				m.mu.Unlock()
				continue
			}
		}
		m.mu.Unlock()
		handled++
		if system {
			m.invoker.InvokeSystemMessage(msg)
		} else {
			m.invoker.InvokeUserMessage(msg)
		}
	}
}

// ring is a FIFO queue on a circular slice that doubles when full.
type ring struct {
	buf     []any
	head, n int32 // int32: an Inbox is a field of every resource actor
}

func (r *ring) push(v any) {
	if int(r.n) == len(r.buf) {
		grown := make([]any, max(4, 2*len(r.buf)))
		k := copy(grown, r.buf[r.head:])
		copy(grown[k:], r.buf[:r.head])
		r.buf, r.head = grown, 0
	}
	r.buf[(int(r.head)+int(r.n))%len(r.buf)] = v
	r.n++
}

func (r *ring) pop() any {
	v := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % int32(len(r.buf))
	r.n--
	return v
}

// Batch posts many messages from one goroutine and schedules the
// mailboxes they woke together, boxesPerRun to a dispatcher run, instead
// of one run each: a node actor answering a batch of commands wakes one
// worker per few leases, not one per lease. Not for concurrent use.
type Batch struct{ next *boxes }

// boxesPerRun is how many woken mailboxes one dispatcher run handles:
// few enough that the next batch's leases can run on another worker
// meanwhile.
const boxesPerRun = 8

// boxes are mailboxes for one dispatcher run; recycled, so that a batch
// allocates nothing.
type boxes struct {
	m   [boxesPerRun]*Mailbox
	n   int
	run func() // b.process, made once
}

var boxesPool sync.Pool // of *boxes

func newBoxes() *boxes {
	if b, ok := boxesPool.Get().(*boxes); ok {
		return b
	}
	b := new(boxes)
	b.run = b.process
	return b
}

func (b *boxes) process() {
	for i, m := range b.m[:b.n] {
		m.Run()
		b.m[i] = nil
	}
	b.n = 0
	boxesPool.Put(b)
}

// Post posts msg to m as Offer does; m runs at the next Flush (or
// sooner, once boxesPerRun mailboxes wait) if it was idle.
func (b *Batch) Post(m *Mailbox, msg any) {
	if !m.Offer(msg) {
		return
	}
	if b.next == nil {
		b.next = newBoxes()
	}
	b.next.m[b.next.n] = m
	b.next.n++
	if b.next.n == boxesPerRun {
		b.Flush()
	}
}

// Flush schedules the mailboxes Post woke and has not scheduled yet.
func (b *Batch) Flush() {
	if next := b.next; next != nil {
		b.next = nil
		next.m[0].dispatcher.Schedule(next.run)
	}
}
