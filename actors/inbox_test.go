package actors

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/testwait"
)

// handler records the messages an Inbox hands it; Receive blocks on
// msg "block" until release is closed, and panics on "boom".
type handler struct {
	mu      sync.Mutex
	got     []string
	crashed []any
	entered chan struct{}
	release chan struct{}
}

func newHandler() *handler {
	return &handler{entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (h *handler) Receive(msg any) {
	switch msg {
	case "block":
		h.entered <- struct{}{}
		<-h.release
	case "boom":
		panic("boom")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, msg.(string))
}

func (h *handler) Crashed(reason, msg any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.crashed = append(h.crashed, msg)
}

func (h *handler) snapshot() ([]string, []any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.got), slices.Clone(h.crashed)
}

// An idle inbox handles an Ask on the caller's goroutine, before Ask
// returns; what comes while it is busy waits, in order, and is handled
// on the busy goroutine or by a dispatcher worker.
func TestInboxAskPostOrder(t *testing.T) {
	d := NewDispatcher()
	defer d.Stop()
	h := newHandler()
	var in Inbox
	in.Init(d, h)

	in.Ask("a")
	if got, _ := h.snapshot(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("after Ask on an idle inbox: %q, want [a]", got)
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		in.Ask("block")
	}()
	<-h.entered
	want := []string{"a", "block"}
	for i := range 2 * runLimit {
		msg := string(rune('b' + i))
		if i%2 == 0 {
			in.Post(msg)
		} else {
			in.Ask(msg) // busy: queued, returns at once
		}
		want = append(want, msg)
	}
	if n := in.Queued(); n != 2*runLimit {
		t.Fatalf("Queued = %d while busy, want %d", n, 2*runLimit)
	}
	close(h.release)
	<-done
	testwait.Eventually(t, 5*time.Second, "every message handled", func() bool {
		got, _ := h.snapshot()
		return len(got) == len(want)
	})
	if got, _ := h.snapshot(); !slices.Equal(got, want) {
		t.Fatalf("handled %q, want %q", got, want)
	}
	if n := in.Queued(); n != 0 {
		t.Fatalf("Queued = %d after all were handled", n)
	}
}

// A panic in Receive is reported with its message, and the inbox goes on
// with the next.
func TestInboxCrash(t *testing.T) {
	d := NewDispatcher()
	defer d.Stop()
	h := newHandler()
	var in Inbox
	in.Init(d, h)

	go in.Ask("block")
	<-h.entered
	in.Post("boom")
	in.Post("after")
	close(h.release)
	testwait.Eventually(t, 5*time.Second, "the message after the panic handled", func() bool {
		got, _ := h.snapshot()
		return slices.Contains(got, "after")
	})
	got, crashed := h.snapshot()
	if !slices.Equal(got, []string{"block", "after"}) || len(crashed) != 1 || crashed[0] != "boom" {
		t.Fatalf("handled %q, crashed on %v; want [block after], crashed on [boom]", got, crashed)
	}
	in.Ask("idle again")
	if got, _ := h.snapshot(); got[len(got)-1] != "idle again" {
		t.Fatalf("an Ask after the crash was not handled at once: %q", got)
	}
}

// An Ask on an idle inbox allocates nothing: no queue is made for a
// message that is handled at once (a held lease's resource actor keeps
// none).
func TestInboxAskAllocatesNothing(t *testing.T) {
	d := NewDispatcher()
	defer d.Stop()
	h := newHandler()
	h.got = make([]string, 0, 1000)
	var in Inbox
	in.Init(d, h)
	if n := testing.AllocsPerRun(100, func() { in.Ask("a") }); n != 0 {
		t.Fatalf("Ask allocates %v times", n)
	}
	if in.q.buf != nil {
		t.Fatalf("the inbox made a queue of %d for messages handled at once", len(in.q.buf))
	}
}
