package node

import (
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// The queue of waiters and the announcements, step by step on a real
// node: who a release names next and to stand by, that the one named
// leaves the queue, that a release queues the holder's successor, and
// that a waiter that leaves while the key is free names the next in its
// stead (and says nothing while the key is held).
func TestQueueAnnouncements(t *testing.T) {
	h := newHarness(t, time.Second)
	heard := make(chan string, 16)
	w := NewWatcher(rueidis.ClientOption{InitAddress: []string{h.server.Addr()}}, time.Second, WatchHooks{
		Released: func(_, msg string) { heard <- msg },
		Watched: func(_ string, ok bool) {
			if !ok {
				t.Error("the watcher could not subscribe")
			}
			heard <- "watched"
		},
		Lost: func() {},
	})
	defer w.Close()
	w.Watch("k" + ReleasedSuffix)
	if got := <-heard; got != "watched" {
		t.Fatalf("heard %q before the subscription", got)
	}
	ttl := 10 * time.Second
	round := uint64(0)
	do := func(cmd Command, want Outcome) {
		t.Helper()
		if v := h.ask(cmd); v.Outcome != want {
			t.Fatalf("%T of %q: %v, want %v", cmd, cmd.request().Value, v.Outcome, want)
		}
	}
	req := func(value string) Request { round++; return h.req("k", value, round) }
	acquire := func(value, since string, want Outcome) {
		t.Helper()
		do(&Acquire{Request: req(value), TTL: ttl, Since: since}, want)
	}
	expect := func(want string) {
		t.Helper()
		select {
		case got := <-heard:
			if got != want {
				t.Fatalf("announced %q, want %q", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("nothing announced, want %q", want)
		}
	}
	d := Digest
	acquire("holder", "", Granted)
	acquire("a", "100", Taken)
	acquire("b", "200", Taken)
	acquire("c", "300", Taken)

	do(&Release{Request: req("holder"), TTL: ttl, Announce: true, Leave: true}, Granted)
	expect(d("holder") + " " + d("a") + " " + d("b"))

	// a, named, leaves instead of acquiring: b goes, c stands by.
	do(&Release{Request: req("a"), TTL: ttl, Announce: true, Leave: true}, Taken)
	expect(" " + d("b") + " " + d("c"))

	// A holder whose successor in its engine (since 50) came before c.
	acquire("holder2", "", Granted)
	do(&Release{Request: req("c"), TTL: ttl, Announce: true, Leave: true}, Taken) // the key is held: silent
	acquire("c", "300", Taken)
	do(&Release{Request: req("holder2"), TTL: ttl, Announce: true, Leave: true, Successor: d("s"), SuccessorSince: "50"}, Granted)
	expect(d("holder2") + " " + d("s") + " " + d("c"))

	// s acquires, releases: c is named, and nobody after it.
	acquire("s", "50", Granted)
	do(&Release{Request: req("s"), TTL: ttl, Announce: true, Leave: true}, Granted)
	expect(d("s") + " " + d("c") + " ")

	members, err := h.server.Do(t.Context(), "ZRANGE", "k:queue", "0", "-1")
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := members.([]any); !ok || len(got) != 1 || got[0] != "~" {
		t.Fatalf("queue %v at the end, want only its end mark", members)
	}
}
