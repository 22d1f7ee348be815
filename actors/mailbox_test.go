package actors

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// recorder is a MessageInvoker that records what it was given.
type recorder struct {
	mu        sync.Mutex
	got       []string
	escalated []any
	panicOn   string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, s)
}

func (r *recorder) InvokeSystemMessage(m any) { r.add(fmt.Sprint("sys ", m)) }

func (r *recorder) InvokeUserMessage(m any) {
	if m == r.panicOn {
		panic("boom")
	}
	r.add(fmt.Sprint("user ", m))
}

func (r *recorder) EscalateFailure(reason, m any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.escalated = append(r.escalated, m)
}

func (r *recorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// manual is a dispatcher whose runs wait until the test calls next.
type manual struct {
	runs       chan func()
	throughput int
}

func (d *manual) Schedule(fn func()) { d.runs <- fn }
func (d *manual) Throughput() int    { return d.throughput }

func (d *manual) next(t *testing.T) {
	t.Helper()
	select {
	case run := <-d.runs:
		run()
	case <-time.After(5 * time.Second):
		t.Fatal("no run scheduled")
	}
}

func (d *manual) none(t *testing.T) {
	t.Helper()
	select {
	case <-d.runs:
		t.Fatal("a run was scheduled with nothing to do")
	default:
	}
}

func TestMailboxOrderSuspendAndPanic(t *testing.T) {
	rec := &recorder{panicOn: "u3"}
	d := &manual{runs: make(chan func(), 8), throughput: 300}
	m := NewMailbox()
	m.RegisterHandlers(rec, d)

	// Posted while a run is pending: one run takes them all, system
	// messages first, user messages in order; the queue grows past its
	// first size on the way.
	for i := range 6 {
		m.PostUserMessage(fmt.Sprint("u", i))
	}
	m.PostSystemMessage("s0")
	if n := m.UserMessageCount(); n != 6 {
		t.Fatalf("UserMessageCount = %d, want 6", n)
	}
	d.next(t) // panics on u3: escalated, and the rest still runs
	d.next(t)
	d.none(t)
	want := []string{"sys s0", "user u0", "user u1", "user u2", "user u4", "user u5"}
	if got := rec.snapshot(); !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if !slices.Equal(rec.escalated, []any{"u3"}) {
		t.Fatalf("escalated %v, want [u3]", rec.escalated)
	}

	// Suspended, user messages wait; system messages do not.
	m.PostSystemMessage(&actor.SuspendMailbox{})
	d.next(t)
	m.PostUserMessage("u6")
	d.next(t)
	m.PostSystemMessage("s1")
	d.next(t)
	m.PostSystemMessage(&actor.ResumeMailbox{})
	d.next(t)
	d.none(t)
	want = append(want, "sys s1", "user u6")
	if got := rec.snapshot(); !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestMailboxRunsPastThroughput(t *testing.T) {
	rec := &recorder{}
	d := &manual{runs: make(chan func(), 8), throughput: 2}
	m := NewMailbox()
	m.RegisterHandlers(rec, d)
	for i := range 5 {
		m.PostUserMessage(i)
	}
	d.next(t) // one run: it yields (Gosched) every 2 messages, and goes on
	d.none(t)
	if got := len(rec.snapshot()); got != 5 {
		t.Fatalf("%d messages handled, want 5", got)
	}
}
