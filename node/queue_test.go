package node

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redlease/redlease/internal/testwait"
)

// scene is a node actor over a real node and a watcher on it, for tests
// that step through the queue of waiters of key "k".
type scene struct {
	t     *testing.T
	h     *harness
	w     *Watcher
	heard chan string // announcements, and "watched" for a subscription
	round uint64
}

func newScene(t *testing.T, h *harness) *scene {
	s := &scene{t: t, h: h, heard: make(chan string, 16)}
	s.w = NewWatcher(rueidis.ClientOption{InitAddress: []string{h.server.Addr()}}, time.Second, WatchHooks{
		Released: func(_, msg string) { s.heard <- msg },
		Watched: func(_ string, ok bool) {
			if !ok {
				t.Error("the watcher could not subscribe")
			}
			s.heard <- "watched"
		},
		Lost: func() {},
	})
	t.Cleanup(s.w.Close)
	s.listen("k" + ReleasedSuffix)
	return s
}

// listen subscribes the watcher to channel too.
func (s *scene) listen(channel string) {
	s.t.Helper()
	s.w.Watch(channel)
	if got := <-s.heard; got != "watched" {
		s.t.Fatalf("heard %q before the subscription", got)
	}
}

func (s *scene) req(value string) Request { s.round++; return s.h.req("k", value, s.round) }

// do sends cmd and checks its outcome.
func (s *scene) do(cmd Command, want Outcome) {
	s.t.Helper()
	if v := s.h.ask(cmd); v.Outcome != want {
		s.t.Fatalf("%T of %q: %v, want %v", cmd, cmd.request().Value, v.Outcome, want)
	}
}

func (s *scene) acquire(value, since string, ttl time.Duration, want Outcome) {
	s.t.Helper()
	s.do(&Acquire{Request: s.req(value), TTL: ttl, Since: since}, want)
}

// expect checks the next announcement, as published and as
// ParseAnnouncement reads it.
func (s *scene) expect(want Announcement) {
	s.t.Helper()
	select {
	case got := <-s.heard:
		if got != want.String() {
			s.t.Fatalf("announced %q, want %q", got, want.String())
		}
		if a := ParseAnnouncement(got); a != want {
			s.t.Fatalf("%q reads as %+v, want %+v", got, a, want)
		}
	case <-time.After(5 * time.Second):
		s.t.Fatalf("nothing announced, want %q", want)
	}
}

// The queue of waiters and the announcements, step by step on a real
// node: who a release names next and to stand by, that the one named
// leaves the queue, that a release queues the holder's successor, and
// that a waiter that leaves while the key is free names the next in its
// stead (and says nothing while the key is held).
func TestQueueAnnouncements(t *testing.T) {
	s := newScene(t, newHarness(t, time.Second))
	h, do, req, expect := s.h, s.do, s.req, s.expect
	ttl := 10 * time.Second
	acquire := func(value, since string, want Outcome) {
		t.Helper()
		s.acquire(value, since, ttl, want)
	}
	d := Digest
	acquire("holder", "", Granted)
	acquire("a", "100", Taken)
	acquire("b", "200", Taken)
	acquire("c", "300", Taken)

	do(&Release{Request: req("holder"), TTL: ttl, Queued: true}, Granted)
	expect(Announcement{Holder: d("holder"), Next: d("a"), Standby: d("b")})

	// a, named, leaves instead of acquiring: b goes, c stands by.
	do(&Leave{Request: req("a"), TTL: ttl}, Absent)
	expect(Announcement{Next: d("b"), Standby: d("c")})

	// A holder whose successor in its engine (since 50) came before c.
	acquire("holder2", "", Granted)
	do(&Leave{Request: req("c"), TTL: ttl}, Taken) // the key is held: silent
	acquire("c", "300", Taken)
	do(&HandOff{Request: req("holder2"), TTL: ttl, Queued: true, Successor: "s", SuccessorSince: "50"}, Granted)
	expect(Announcement{Holder: d("holder2"), Next: d("s"), Standby: d("c")})

	// s acquires, releases: c is named, and nobody after it.
	acquire("s", "50", Granted)
	do(&Release{Request: req("s"), TTL: ttl, Queued: true}, Granted)
	expect(Announcement{Holder: d("s"), Next: d("c")})

	members, err := h.server.Do(t.Context(), "ZRANGE", "k:queue", "0", "-1")
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := members.([]any); !ok || len(got) != 1 || got[0] != "~" {
		t.Fatalf("queue %v at the end, want only its end mark", members)
	}
}

// A release that names a waiter next grants it the key while the
// waiter's engine listens on its channel: the announcement ends with
// GrantedSuffix, the key holds the waiter's value with the waiter's TTL,
// and announcements carry digests only. A waiter whose engine does not
// listen (its process died), a fenced one (it needs its round for the
// counter) and any after the epoch marker changed are only named.
func TestGrants(t *testing.T) {
	s := newScene(t, newHarnessCfg(t, Config{Timeout: time.Second, Quarantine: 10 * time.Second, Channel: "engine-a", First: &Info{}}))
	h, do, req, acquire, expect, listen := s.h, s.do, s.req, s.acquire, s.expect, s.listen
	release := func(value string, want Outcome) {
		t.Helper()
		do(&Release{Request: req(value), TTL: 10 * time.Second, Queued: true}, want)
	}
	holds := func(want string, ttl time.Duration) {
		t.Helper()
		got, err := h.server.Do(t.Context(), "GET", "k")
		if err != nil {
			t.Fatal(err)
		}
		if want == "" && got != nil || want != "" && got != want {
			t.Fatalf("the key holds %v, want %q", got, want)
		}
		if want == "" {
			return
		}
		pttl, err := h.server.Do(t.Context(), "PTTL", "k")
		if ms, ok := pttl.(int64); err != nil || !ok || ms > ttl.Milliseconds() || ms < ttl.Milliseconds()-1000 {
			t.Fatalf("the key's PTTL is %v (%v), want about %v", pttl, err, ttl)
		}
	}
	d := Digest

	// Nobody listens on the engine's channel: w1 is only named.
	acquire("holder", "", 10*time.Second, Granted)
	acquire("w1", "100", 7*time.Second, Taken)
	release("holder", Granted)
	expect(Announcement{Holder: d("holder"), Next: d("w1")})
	holds("", 0)

	// Listening, w1 is granted the key with its TTL; then w2 after it.
	listen("engine-a")
	acquire("holder", "", 10*time.Second, Granted)
	acquire("w1", "100", 7*time.Second, Taken)
	acquire("w2", "200", 5*time.Second, Taken)
	release("holder", Granted)
	expect(Announcement{Holder: d("holder"), Next: d("w1"), Standby: d("w2"), Granted: true})
	holds("w1", 7*time.Second)
	acquire("w1", "100", 7*time.Second, Granted) // its round finds it its own
	release("w1", Granted)
	expect(Announcement{Holder: d("w1"), Next: d("w2"), Granted: true})
	holds("w2", 5*time.Second)
	// A cleanup that keeps grants (w2's round was refused here, say)
	// leaves the key to w2.
	do(&Cleanup{Request: req("w2"), TTL: 5 * time.Second, Since: "200", Keep: 1}, Taken)
	holds("w2", 5*time.Second)

	// A node whose ACL denies PUBSUB NUMSUB cannot tell whether w5's
	// engine listens: w5 is only named, and the release stands.
	acl := func(rule string) {
		t.Helper()
		if _, err := h.server.Do(t.Context(), "ACL", "SETUSER", "default", rule); err != nil {
			t.Fatal(err)
		}
	}
	acl("-pubsub|numsub")
	acquire("w5", "250", 10*time.Second, Taken)
	release("w2", Granted)
	expect(Announcement{Holder: d("w2"), Next: d("w5")})
	holds("", 0)
	acl("+pubsub|numsub")
	acquire("w2", "", 5*time.Second, Granted)

	// A fenced waiter is only named.
	do(&Acquire{Request: req("w3"), TTL: 10 * time.Second, FenceKey: "k:fence", Since: "300"}, Taken)
	release("w2", Granted)
	expect(Announcement{Holder: d("w2"), Next: d("w3")})
	holds("", 0)

	// Nor is a waiter once the epoch marker is another process's.
	acquire("holder", "", 10*time.Second, Granted)
	acquire("w4", "400", 10*time.Second, Taken)
	if _, err := h.server.Do(t.Context(), "SET", epochKey, "another"); err != nil {
		t.Fatal(err)
	}
	release("holder", Granted)
	expect(Announcement{Holder: d("holder"), Next: d("w4")})
	holds("", 0)

	// The grants leave nothing behind but the queue's end mark's
	// companions: no value of a waiter granted, named or gone.
	left, err := h.server.Do(t.Context(), "HGETALL", "k:queue:grants")
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := left.([]any); ok && len(got) > 0 {
		t.Fatalf("grants left behind: %v", got)
	}
}

// A node that may evict lock keys refuses acquires, and grants none: a
// release there only names the next waiter.
func TestNoGrantsWhileEvicting(t *testing.T) {
	s := newScene(t, newHarnessCfg(t, Config{Timeout: time.Second, Quarantine: -1, HealthInterval: 50 * time.Millisecond,
		Channel: "engine-a"}))
	s.listen("engine-a")
	ttl := time.Minute
	s.acquire("holder", "", ttl, Granted)
	s.acquire("w", "100", ttl, Taken)
	for _, arg := range [][]string{{"maxmemory", "64mb"}, {"maxmemory-policy", "volatile-lru"}} {
		if _, err := s.h.server.Do(t.Context(), "CONFIG", "SET", arg[0], arg[1]); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Eventually(t, 5*time.Second, "the node actor knows it may evict: an acquire fails", func() bool {
		return s.h.ask(&Acquire{Request: s.req("probe"), TTL: ttl}).Outcome == Failed
	})
	s.do(&Release{Request: s.req("holder"), TTL: ttl, Queued: true}, Granted)
	s.expect(Announcement{Holder: Digest("holder"), Next: Digest("w")})
}

// A node that sits out a quarantine grants nothing either (a grant is an
// acquire): here it evicted the holder's key, and a waiter's leave finds
// the key free; it names the next waiter but must not hand it the key,
// or that waiter could take a quorum beside the holder (issue 27, 6).
func TestNoGrantsWhileQuarantined(t *testing.T) {
	s := newScene(t, newHarnessCfg(t, Config{Timeout: time.Second, Quarantine: time.Minute, HealthInterval: 50 * time.Millisecond,
		Channel: "engine-a", First: &Info{}}))
	s.listen("engine-a")
	ttl := time.Minute
	s.acquire("holder", "", ttl, Granted)
	s.acquire("w", "100", ttl, Taken)
	s.acquire("y", "200", ttl, Taken)
	ctx, srv := t.Context(), s.h.server
	for _, arg := range [][]string{{"maxmemory", "2mb"}, {"maxmemory-policy", "volatile-ttl"}} {
		if _, err := srv.Do(ctx, "CONFIG", "SET", arg[0], arg[1]); err != nil {
			t.Fatal(err)
		}
	}
	// Another tenant's cache entries, with TTLs shorter than the lock
	// key's and the queue's (volatile-ttl evicts them first), until the
	// node evicted some; then the lock key goes as if evicted too.
	entry := strings.Repeat("x", 1000)
	for i := 0; ; i++ {
		info, err := srv.Do(ctx, "INFO", "stats")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(info.(string), "evicted_keys:0\r\n") {
			break
		}
		if i == 20000 {
			t.Fatal("setup: nothing evicted after 20000 cache entries")
		}
		if _, err := srv.Do(ctx, "SET", fmt.Sprintf("cache:%d", i), entry, "EX", "30"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := srv.Do(ctx, "DEL", "k"); err != nil {
		t.Fatal(err)
	}
	for _, arg := range [][]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "0"}} {
		if _, err := srv.Do(ctx, "CONFIG", "SET", arg[0], arg[1]); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Eventually(t, 5*time.Second, "the node actor knows it may have lost lock keys: an acquire is quarantined", func() bool {
		s.round++ // on a key of its own: a grant must not take k
		v := s.h.ask(&Acquire{Request: s.h.req("probe", "probe", s.round), TTL: time.Millisecond})
		return errors.Is(v.Err, ErrQuarantined)
	})
	s.do(&Leave{Request: s.req("y"), TTL: ttl}, Absent) // k was deleted
	s.expect(Announcement{Next: Digest("w")})
	if got, err := srv.Do(ctx, "GET", "k"); err != nil || got != nil {
		t.Fatalf("the quarantined node's lock key holds %v (%v), want none", got, err)
	}
}

// A waiter with a short TTL who joins after one with a long TTL does not
// shorten the grants' life: the long waiter's entry stays for twice its
// own TTL, as its place in the queue does (issue 27, 11).
func TestGrantsOutliveTheLongestWaiter(t *testing.T) {
	s := newScene(t, newHarnessCfg(t, Config{Timeout: time.Second, Quarantine: -1, Channel: "engine-a"}))
	s.acquire("holder", "", time.Minute, Granted)
	s.acquire("long", "100", time.Minute, Taken)
	s.acquire("short", "200", time.Second, Taken)
	for _, key := range []string{"k:queue", "k:queue:grants"} {
		pttl, err := s.h.server.Do(t.Context(), "PTTL", key)
		if ms, ok := pttl.(int64); err != nil || !ok || ms < time.Minute.Milliseconds() {
			t.Fatalf("%s lives %v ms more (%v), want twice the long waiter's minute", key, pttl, err)
		}
	}
}

// A release's ungranted successor (a place kept for its engine's next
// caller) is named next but not granted the key, though its engine
// listens: the engine may die before the caller comes (issue 27, 7).
func TestKeptPlaceOnlyNamed(t *testing.T) {
	s := newScene(t, newHarnessCfg(t, Config{Timeout: time.Second, Quarantine: -1, Channel: "engine-a"}))
	s.listen("engine-a")
	ttl := 10 * time.Second
	s.acquire("holder", "", ttl, Granted)
	s.acquire("w", "100", ttl, Taken)
	s.do(&Leave{Request: s.req("w"), TTL: ttl}, Taken) // only for the queue to exist
	s.do(&HandOff{Request: s.req("holder"), TTL: ttl, Queued: true,
		Successor: "kept", SuccessorSince: "200", Ungranted: true}, Granted)
	s.expect(Announcement{Holder: Digest("holder"), Next: Digest("kept")})
	if got, err := s.h.server.Do(t.Context(), "GET", "k"); err != nil || got != nil {
		t.Fatalf("the key holds %v (%v) after naming a kept place, want none", got, err)
	}
}
