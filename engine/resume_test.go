package engine

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/testwait"
	"github.com/redlease/redlease/lease"
)

// Every pattern of what five nodes hold for a resource: the lease's value
// (each node's key with a TTL of its own), another owner's, nothing, or a
// key that breaks the script (a hash: the node answers an error). Resume
// holds the lease exactly when a quorum holds its value, with the validity
// the nodes' keys give and no more; otherwise it fails, as lost exactly
// when no quorum can hold the value, naming the owner of a quorum. It
// writes nothing; Check says what each node holds; and the resumed lease's
// release deletes its own keys alone.
func TestResumeEveryPattern(t *testing.T) {
	t.Parallel() // it waits out TTLs on nodes of its own
	c := startNodes(t, 5)
	e := newEngine(t, c.Addrs(), slowMachine)
	ctx := t.Context()
	const (
		mine = iota
		foreign
		none
		broken
		states
	)
	const value, theirs = "R9o443RKJAvKv59XnpYIltp5QAx|web-1", "Zt1dcf0QmYqk2xJ8fN0aRg4wPbE|web-2"
	ttlOf := func(i int) time.Duration { return time.Duration(i+1) * 2 * time.Second }
	mask := make([]int, 5)
	for m := 0; m < states*states*states*states*states; m++ {
		resource := fmt.Sprintf("pattern-%d", m)
		key := lockKey(resource)
		count := [states]int{}
		var ttls []time.Duration // of the nodes holding the value, longest first
		for i, x := 0, m; i < 5; i, x = i+1, x/states {
			mask[i] = x % states
			count[mask[i]]++
		}
		for i := 4; i >= 0; i-- {
			if mask[i] == mine {
				ttls = append(ttls, ttlOf(i))
			}
		}
		before := time.Now()
		for i, s := range mask {
			var err error
			switch s {
			case mine:
				err = c.Nodes[i].Set(ctx, key, value, ttlOf(i))
			case foreign:
				err = c.Nodes[i].Set(ctx, key, theirs, time.Minute)
			case broken:
				_, err = c.Nodes[i].Do(ctx, "HSET", key, "f", "v")
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		set := time.Now()

		l, err := e.Resume(ctx, Handle{Resource: resource, Value: value, Token: uint64(m + 1)})
		if quorum := count[mine] >= 3; quorum != (err == nil) {
			t.Fatalf("%v: Resume = %v, want held: %t", mask, err, quorum)
		}
		if err == nil {
			// What the third longest key gives, from a start after before,
			// by the acquire's rule: never beyond that key's expiry.
			want := ttls[2]
			if u := l.Until(); u.After(set.Add(want-lease.Drift(want-time.Second, e.cfg.DriftFactor))) ||
				u.Before(before.Add(want-time.Second-lease.Drift(want, e.cfg.DriftFactor))) {
				t.Fatalf("%v: resumed until %v after the keys were set, want about %v less the drift", mask, u.Sub(set), want)
			}
			if l.Value() != value || l.Token() != uint64(m+1) || l.Resource() != resource || l.Err() != nil {
				t.Fatalf("%v: resumed lease %q token %d of %q, err %v", mask, l.Value(), l.Token(), l.Resource(), l.Err())
			}
			ck, err := l.Check(ctx)
			if err != nil || ck.Holding != count[mine] || !ck.Quorum || ck.Meta != "web-1" || ck.TTL > want || ck.TTL < want-time.Second ||
				len(ck.Nodes) != 5 {
				t.Fatalf("%v: Check = %+v, %v; want %d holding, a quorum of web-1's, TTL about %v", mask, ck, err, count[mine], want)
			}
			checkNodes(t, mask, ck.Nodes, mine, foreign, none, broken)
			if err := l.Release(ctx); err != nil {
				t.Fatalf("%v: Release of the resumed lease: %v", mask, err)
			}
		} else {
			var ae *AcquireError
			if !errors.Is(err, ErrNotAcquired) || !errors.As(err, &ae) || !strings.Contains(err.Error(), "not resumed") {
				t.Fatalf("%v: Resume = %v, want an *AcquireError matching ErrNotAcquired", mask, err)
			}
			if lost := count[foreign]+count[none] > 2; errors.Is(err, ErrLeaseLost) != lost {
				t.Fatalf("%v: Resume = %v: lost %t, want %t", mask, err, errors.Is(err, ErrLeaseLost), lost)
			}
			if want := map[bool]string{true: "web-2"}[count[foreign] >= 3]; ae.HeldBy != want {
				t.Fatalf("%v: HeldBy %q, want %q", mask, ae.HeldBy, want)
			}
			checkNodes(t, mask, ae.Nodes, mine, foreign, none, broken)
		}
		for i, s := range mask {
			testwait.Eventually(t, time.Second, fmt.Sprintf("%v: node %d's key as it was, or released", mask, i), func() bool {
				v, _, err := c.Nodes[i].Get(ctx, key)
				switch s {
				case mine: // held, and released (the last deletes may be on their way), or untouched
					return v == value == (l == nil)
				case foreign:
					return v == theirs
				case none:
					return v == ""
				}
				return err != nil // still the hash
			})
			if _, err := c.Nodes[i].Do(ctx, "DEL", key); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// slowMachine gives nodes time to answer on a loaded machine: these tests
// read every node's answer.
func slowMachine(cfg *Config) { cfg.NodeTimeout = 500 * time.Millisecond }

// checkNodes checks that each node's outcome says what it holds.
func checkNodes(t *testing.T, mask []int, nodes []NodeOutcome, mine, foreign, none, broken int) {
	t.Helper()
	for i, n := range nodes {
		ok := false
		switch mask[i] {
		case mine:
			ok = n.Outcome == Granted && n.TTL > 0
		case foreign:
			ok = n.Outcome == Taken && n.HeldBy == "web-2" && n.TTL > 0
		case none:
			ok = n.Outcome == Absent && n.HeldBy == "" && n.TTL == 0
		case broken:
			ok = n.Outcome == Failed && n.Err != nil
		}
		if !ok {
			t.Fatalf("%v: node %d answered %+v", mask, i, n)
		}
	}
}

// A lease taken in one engine and handed to another by its value (lock in
// one request, release in another): the other takes it up, with its
// token, keeps it alive and releases it; the first learns it is gone at
// its next extension. While it is held, its meta names it to whoever is
// refused, and its own engine will not take it up twice.
func TestResumeInAnotherEngine(t *testing.T) {
	c := startNodes(t, 3)
	a, b, other := newEngine(t, c.Addrs(), slowMachine), newEngine(t, c.Addrs(), slowMachine), newEngine(t, c.Addrs(), slowMachine)
	ctx := t.Context()
	first, err := a.Acquire(ctx, "job", WithMeta("web-1 pid 7"), WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	if MetaOf(first.Value()) != "web-1 pid 7" || !strings.HasSuffix(first.Value(), "|web-1 pid 7") {
		t.Fatalf("value %q does not carry its meta", first.Value())
	}
	if _, err := a.Resume(ctx, Handle{Resource: "job", Value: first.Value()}); !errors.Is(err, errHeldHere) || !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("Resume where the lease is held = %v, want errHeldHere", err)
	}

	l, err := b.Resume(ctx, Handle{Resource: "job", Value: first.Value(), Token: first.Token(), TTL: 3 * time.Second}, WithAutoExtend(time.Minute))
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if l.Token() != first.Token() || l.Value() != first.Value() {
		t.Fatalf("resumed token %d value %q, want %d %q", l.Token(), l.Value(), first.Token(), first.Value())
	}
	if _, err := b.TryAcquire(ctx, "job"); !errors.Is(err, errHeldHere) {
		t.Fatalf("TryAcquire beside the resumed lease = %v, want errHeldHere: it holds the line", err)
	}
	_, err = other.TryAcquire(ctx, "job")
	var ae *AcquireError
	if !errors.As(err, &ae) || ae.HeldBy != "web-1 pid 7" || !strings.Contains(err.Error(), `held by "web-1 pid 7"`) {
		t.Fatalf("TryAcquire of a held resource = %v, want it held by web-1 pid 7", err)
	}
	if strings.Contains(err.Error(), first.Value()[:10]) {
		t.Fatalf("a refusal tells the holder's secret: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := other.Acquire(short, "job"); !errors.As(err, &ae) || ae.HeldBy != "web-1 pid 7" ||
		!errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), `held by "web-1 pid 7"`) {
		t.Fatalf("a blocked Acquire = %v, want it to end with its context, held by web-1 pid 7", err)
	}
	for i, n := range ae.Nodes { // the round is decided at a quorum of refusals
		if (n.Outcome != Taken || n.HeldBy != "web-1 pid 7" || !n.QuarantinedUntil.IsZero()) && !errors.Is(n.Err, lease.ErrNotAnswered) {
			t.Fatalf("node %d: %+v, want taken by web-1 pid 7", i, n)
		}
	}
	// It extends with its own TTL (3s), at a third of it, past the
	// validity it was resumed with (the rest of the default 10s).
	testwait.Eventually(t, 5*time.Second, "an automatic extension with the resumed lease's TTL", func() bool {
		return time.Until(l.Until()) < 3*time.Second
	})
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release of the resumed lease: %v", err)
	}
	waitGone(t, c, "job")
	if err := first.Extend(ctx); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Extend by the first holder after the release = %v, want ErrLeaseLost", err)
	}
	if _, err := b.Resume(ctx, Handle{Resource: "job", Value: first.Value()}); !errors.Is(err, ErrLeaseLost) || !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("Resume of a released lease = %v, want ErrLeaseLost", err)
	}
}

// Check reads the nodes without changing anything: a held lease's keys on
// every node; after another owner took a quorum, that owner's meta; the
// answers of a lease that ended, or was never held, as for its other
// calls.
func TestCheck(t *testing.T) {
	c := startNodes(t, 5)
	e := newEngine(t, c.Addrs(), slowMachine)
	ctx := t.Context()
	l, err := e.Acquire(ctx, "checked", WithMeta("leader at 10.0.0.7:8080"), WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, time.Second, "the lease's key on every node", func() bool {
		return count(values(t, c, "checked"), l.Value()) == 5
	})
	until := l.Until()
	ck, err := l.Check(ctx)
	if err != nil || ck.Holding != 5 || !ck.Quorum || ck.Meta != "leader at 10.0.0.7:8080" || ck.TTL <= 4*time.Second || ck.TTL > 5*time.Second {
		t.Fatalf("Check of a held lease = %+v, %v", ck, err)
	}
	if !l.Until().Equal(until) {
		t.Fatal("Check moved Until")
	}
	for i, n := range c.Nodes[:3] {
		if err := n.Set(ctx, lockKey("checked"), "x|follower-"+fmt.Sprint(i), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if ck, err = l.Check(ctx); err != nil || ck.Holding != 2 || ck.Quorum || ck.Meta != "" || ck.TTL != 0 || !ck.Until.IsZero() {
		t.Fatalf("Check with 3 other owners' keys = %+v, %v", ck, err)
	}
	for _, n := range c.Nodes[:3] {
		if err := n.Set(ctx, lockKey("checked"), "x|follower", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if ck, err = l.Check(ctx); err != nil || ck.Holding != 2 || ck.Meta != "follower" || ck.Nodes[0].HeldBy != "follower" {
		t.Fatalf("Check with another owner's key on a quorum = %+v, %v", ck, err)
	}
	if l.Err() != nil {
		t.Fatalf("Check ended the lease: %v", l.Err())
	}
	_ = l.Release(ctx)
	if _, err := l.Check(ctx); !errors.Is(err, ErrReleased) {
		t.Fatalf("Check of a released lease = %v, want ErrReleased", err)
	}
	var never *Lease
	if _, err := never.Check(ctx); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("Check of a nil lease = %v, want ErrNotAcquired", err)
	}
}

// Bad metas, values and options are refused before anything is sent.
func TestMetaAndResumeInput(t *testing.T) {
	c := startNodes(t, 3)
	e := newEngine(t, c.Addrs())
	ctx := t.Context()
	for _, tc := range []struct {
		name    string
		call    func() (*Lease, error)
		wantErr string
	}{
		{"a meta too long", func() (*Lease, error) { return e.TryAcquire(ctx, "r", WithMeta(strings.Repeat("m", MaxMetaLen+1))) },
			"WithMeta is 257 bytes long, at most 256"},
		{"a meta not UTF-8", func() (*Lease, error) { return e.TryAcquire(ctx, "r", WithMeta("web\xff")) }, "WithMeta must be valid UTF-8"},
		{"a meta with a newline", func() (*Lease, error) { return e.Acquire(ctx, "r", WithMeta("web-1\nroot")) },
			"WithMeta must hold no control character, got U+000A at byte 5"},
		{"a meta at Resume", func() (*Lease, error) { return e.Resume(ctx, Handle{Resource: "r", Value: "v"}, WithMeta("m")) }, "WithMeta is for Acquire and TryAcquire"},
		{"no value", func() (*Lease, error) { return e.Resume(ctx, Handle{Resource: "r"}) }, "Resume needs the lease's value"},
		{"a value too long", func() (*Lease, error) {
			return e.Resume(ctx, Handle{Resource: "r", Value: strings.Repeat("v", maxValueLen+1)})
		},
			"no Lease.Value is longer than 284"},
		{"no resource", func() (*Lease, error) { return e.Resume(ctx, Handle{Value: "v"}) }, "resource must not be empty"},
	} {
		l, err := tc.call()
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) || l != nil {
			t.Errorf("%s: %v, want it to say %q", tc.name, err, tc.wantErr)
		}
	}
	if keys, _ := c.Nodes[0].Keys(ctx, DefaultKeyPrefix+"{*"); len(keys) != 0 {
		t.Fatalf("keys after refused calls: %q", keys)
	}
	l, err := e.TryAcquire(ctx, "r", WithMeta(strings.Repeat("é", MaxMetaLen/2)))
	if err != nil || len(l.Value()) != maxValueLen {
		t.Fatalf("the longest meta: %v, value of %d bytes", err, len(l.Value()))
	}
	_ = l.Release(ctx)
}

// The random part of an owner value never holds the separator, so the
// meta is what follows the first one, whatever it holds.
func TestValueSeparator(t *testing.T) {
	for i := range 64 { // every character of the encoding, first in its group
		if c := base64.RawURLEncoding.EncodeToString([]byte{byte(i << 2), 0, 0})[:1]; c == MetaSep {
			t.Fatalf("the random part's encoding uses the separator %q", c)
		}
	}
	for _, meta := range []string{"", "web-1", "a|b", "|"} {
		v := ownerValue(meta)
		if MetaOf(v) != meta || len(v) != 27+len(meta)+len(MetaSep)*min(len(meta), 1) {
			t.Errorf("ownerValue(%q) = %q: MetaOf %q", meta, v, MetaOf(v))
		}
	}
}

// A place a release kept for the engine's next caller carries the
// releasing lease's meta: a caller with another does not take it, whose
// value would not say who it is.
func TestKeptPlaceKeepsItsMeta(t *testing.T) {
	c := startNodes(t, 3)
	a, b := newEngine(t, c.Addrs()), newEngine(t, c.Addrs())
	a.lines.keepFor = time.Minute
	remote, value := keptPlace(t, a, b)
	if value == "" || MetaOf(value) != "" {
		t.Fatalf("kept place %q, want one without meta, as the lease released", value)
	}
	back := acquireAsync(t.Context(), a, "kept", WithRetry(noPolling), WithMeta("web-9"))
	r := await(t, remote, 5*time.Second)
	if err := r.l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	w := await(t, back, 5*time.Second)
	if w.l.value == value || MetaOf(w.l.value) != "web-9" {
		t.Fatalf("the caller with a meta holds %q, the kept place was %q", w.l.value, value)
	}
	_ = w.l.Release(t.Context())
}

// A lease handed over by Detach: the first engine lets it go without a
// release, and its Close no longer releases it; the Handle crosses to
// another engine as JSON, which takes the lease up with Resume, keys and
// token intact, and releases it. Meanwhile a caller waiting for the
// resource in the first engine does not get it.
func TestDetachHandsOver(t *testing.T) {
	c := startNodes(t, 3)
	a, b := newEngine(t, c.Addrs(), slowMachine), newEngine(t, c.Addrs(), slowMachine)
	ctx := t.Context()
	l, err := a.Acquire(ctx, "job", WithMeta("worker-a"), WithFencing(), WithTTL(3*time.Second), WithAutoExtend(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 2*time.Second, "every node holds the key", func() bool {
		return count(values(t, c, "job"), l.Value()) == 3
	})
	waited := make(chan error, 1)
	go func() {
		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		w, err := a.Acquire(short, "job")
		if err == nil {
			w.Release(ctx)
		}
		waited <- err
	}()
	testwait.Eventually(t, 2*time.Second, "a caller waits for the resource", func() bool { return acquiring(a) })

	h, err := l.Detach()
	if err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if want := (Handle{Resource: "job", Value: l.Value(), Token: l.Token(), TTL: 3 * time.Second}); h != want || h.Token == 0 {
		t.Fatalf("Detach's handle %+v, want %+v", h, want)
	}
	if !errors.Is(l.Err(), ErrDetached) || l.Context().Err() == nil {
		t.Fatalf("a detached lease's Err = %v, want ErrDetached, and its context done", l.Err())
	}
	var last Event
	for ev := range l.Events() {
		last = ev
	}
	if last.Kind != Detached || !errors.Is(last.Err, ErrDetached) {
		t.Fatalf("a detached lease's last event: %v (%v), want Detached", last.Kind, last.Err)
	}
	if err := l.Extend(ctx); !errors.Is(err, ErrDetached) {
		t.Fatalf("Extend of a detached lease = %v, want ErrDetached", err)
	}
	if err := l.Release(ctx); !errors.Is(err, ErrDetached) {
		t.Fatalf("Release of a detached lease = %v, want ErrDetached", err)
	}
	if _, err := l.Detach(); !errors.Is(err, ErrDetached) {
		t.Fatalf("Detach of a detached lease = %v, want ErrDetached", err)
	}
	if err := <-waited; !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a caller waiting in the engine that detached the lease = %v, want it not acquired by its deadline", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if vals := values(t, c, "job"); count(vals, h.Value) != 3 {
		t.Fatalf("after Detach and Close the nodes hold %q, want the lease's key on all", vals)
	}

	wire, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var got Handle
	if err := json.Unmarshal(wire, &got); err != nil || got != h {
		t.Fatalf("the handle through JSON (%s): %+v, %v", wire, got, err)
	}
	r, err := b.Resume(ctx, got, WithAutoExtend(time.Minute))
	if err != nil {
		t.Fatalf("Resume after Detach and Close: %v", err)
	}
	if r.Token() != h.Token || r.Value() != h.Value || MetaOf(r.Value()) != "worker-a" {
		t.Fatalf("resumed token %d value %q, want %d %q", r.Token(), r.Value(), h.Token, h.Value)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatalf("Release of the resumed lease: %v", err)
	}
	waitGone(t, c, "job")

	var nilLease *Lease
	if _, err := nilLease.Detach(); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("Detach of a nil lease = %v, want ErrNotAcquired", err)
	}
}
