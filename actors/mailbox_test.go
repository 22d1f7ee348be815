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

// Offer leaves an idle mailbox for its caller to Run, and a busy one to
// the run that is due; Batch schedules the mailboxes it woke boxesPerRun
// to a run, each message still in order.
func TestOfferAndBatch(t *testing.T) {
	d := &manual{runs: make(chan func(), 8), throughput: 300}
	rec := &recorder{}
	m := newMailbox()
	m.RegisterHandlers(rec, d)
	if !m.Offer("a") {
		t.Fatal("Offer on an idle mailbox: want the caller to run it")
	}
	if m.Offer("b") {
		t.Fatal("Offer on a mailbox due to run: want false")
	}
	d.none(t)
	m.Run()
	if got, want := rec.snapshot(), []string{"user a", "user b"}; !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}

	// Run handles at most runLimit messages, and schedules the rest.
	rec.got = nil
	if !m.Offer(0) {
		t.Fatal("Offer on an idle mailbox: want the caller to run it")
	}
	for i := 1; i < runLimit+3; i++ {
		m.Offer(i)
	}
	m.Run()
	if got := len(rec.snapshot()); got != runLimit {
		t.Fatalf("Run handled %d messages, want %d", got, runLimit)
	}
	d.next(t)
	d.none(t)
	if got := len(rec.snapshot()); got != runLimit+3 {
		t.Fatalf("%d messages handled in all, want %d", got, runLimit+3)
	}

	const n = boxesPerRun + 3
	recs := make([]*recorder, n)
	boxes := make([]*Mailbox, n)
	for i := range n {
		recs[i], boxes[i] = &recorder{}, newMailbox()
		boxes[i].RegisterHandlers(recs[i], d)
	}
	var b Batch
	for i := range n {
		b.Post(boxes[i], "x")
		b.Post(boxes[i], "y") // the mailbox is woken already: no second place
	}
	d.next(t) // the first boxesPerRun, scheduled as soon as they were that many
	d.none(t)
	b.Flush()
	d.next(t) // the other 3
	d.none(t)
	b.Flush()
	d.none(t)
	for i, r := range recs {
		if got, want := r.snapshot(), []string{"user x", "user y"}; !slices.Equal(got, want) {
			t.Fatalf("mailbox %d: got %q, want %q", i, got, want)
		}
	}
}
