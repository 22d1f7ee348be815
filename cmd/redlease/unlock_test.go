package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redlease/redlease/engine"
	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/internal/testwait"
	"github.com/redlease/redlease/node"
)

// TestUnlock: unlock refuses without -reason, without a RESOURCE, and
// without -yes when stdin is not a terminal (at once: it must not wait
// for an answer); asks, and shows who holds the lock; deletes the lease's
// key on every node, so that its holder finds it lost and another
// acquires; with a dead node, deletes on the others and exits 1.
func TestUnlock(t *testing.T) {
	c := redisproc.Start(t, 3)
	a := c.Addrs()
	nodes := join(a...)
	ctx := context.Background()
	e, l := holdInvoice(t, a, engine.WithMeta("worker-3 pid 41"))
	key := engine.DefaultKeyPrefix + "{invoice:42}"
	keysLeft := func(what string) {
		t.Helper()
		for i, n := range c.Nodes {
			if v, _, err := n.Get(ctx, key); err != nil || v != l.Value() {
				t.Fatalf("%s: node %d holds %q (%v), want the lease's value untouched", what, i+1, v, err)
			}
		}
	}
	for i, n := range c.Nodes { // the last grant may still be on its way
		testwait.Eventually(t, 2*time.Second, fmt.Sprintf("node %d holds the lease's key", i+1), func() bool {
			v, _, err := n.Get(ctx, key)
			return err == nil && v == l.Value()
		})
	}

	for _, tc := range []struct {
		what  string
		stdin string
		args  []string
		code  int
		say   string // on stderr
	}{
		{"no -reason", "yes\n", []string{"unlock", "-nodes", nodes, "invoice:42"}, exitUsage, "-reason is required"},
		{"blank -reason", "yes\n", []string{"unlock", "-nodes", nodes, "-reason", " ", "invoice:42"}, exitUsage, "-reason is required"},
		{"no RESOURCE", "yes\n", []string{"unlock", "-nodes", nodes, "-reason", "stuck"}, exitUsage, "RESOURCE is required"},
		{"two resources", "yes\n", []string{"unlock", "-nodes", nodes, "-reason", "stuck", "a", "b"}, exitUsage, "one RESOURCE at most"},
		{"answered no", "no\n", []string{"unlock", "-nodes", nodes, "-reason", "stuck", "invoice:42"}, exitFail, "not confirmed; nothing deleted"},
		{"no answer", "", []string{"unlock", "-nodes", nodes, "-reason", "stuck", "invoice:42"}, exitFail, "Type yes"},
	} {
		code, _, stderr := cli(t, tc.stdin, nil, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.say) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d saying %q", tc.what, code, stderr, tc.code, tc.say)
		}
		keysLeft(tc.what)
	}

	// Not a terminal (a pipe nobody writes to, as in CI): refused at once.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		done <- run(ctx, []string{"unlock", "-nodes", nodes, "-reason", "stuck", "invoice:42"}, r, &bytes.Buffer{}, &stderr, func(string) string { return "" })
	}()
	select {
	case code := <-done:
		if code != exitFail || !strings.Contains(stderr.String(), "not a terminal") || !strings.Contains(stderr.String(), "-yes") {
			t.Errorf("unlock on a pipe without -yes: exit %d, stderr %q; want exit 1, pointing to -yes", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("unlock without -yes waits for an answer on a pipe")
	}
	keysLeft("stdin a pipe, without -yes")

	// Confirmed: shows who holds it (its digest and meta), deletes every key, logs the reason.
	code, stdout, stderr2 := cli(t, "yes\n", nil, "unlock", "-nodes", nodes, "-reason", "job 7 stuck, OPS-12", "invoice:42")
	wantCode(t, "unlock answered yes", code, exitOK)
	digest := node.Digest(l.Value())
	for _, want := range []string{"lock key on 3 of 3 nodes", "a held lease", digest, `"worker-3 pid 41"`, `reason: "job 7 stuck, OPS-12"`, "Type yes"} {
		if !strings.Contains(stderr2, want) {
			t.Errorf("unlock's stderr lacks %q", want)
		}
	}
	if strings.Count(stdout, "deleted") != 3+1 || !strings.Contains(stdout, `lock key deleted on 3 of 3 nodes; reason: "job 7 stuck, OPS-12"`) {
		t.Errorf("unlock's report %q: want each node deleted, and the reason", stdout)
	}
	fences := 0
	for i, n := range c.Nodes {
		if _, ok, err := n.Get(ctx, key); ok || err != nil {
			t.Errorf("node %d still holds the key after unlock (%v)", i+1, err)
		}
		if _, ok, _ := n.Get(ctx, node.FenceKey(key)); ok {
			fences++
		}
	}
	if fences < 2 {
		t.Errorf("fence counters on %d nodes after unlock, want the quorum that stored the token: tokens must keep growing", fences)
	}
	if err := l.Extend(ctx); !errors.Is(err, engine.ErrLeaseLost) {
		t.Errorf("the forced lease's Extend: %v, want ErrLeaseLost", err)
	}
	l2, err := e.TryAcquire(ctx, "invoice:42", engine.WithFencing())
	if err != nil {
		t.Fatalf("TryAcquire after unlock: %v", err)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token %d after unlock, want above the forced lease's %d", l2.Token(), l.Token())
	}

	// Nothing to delete: says so, exits 0.
	code, _, stderr3 := cli(t, "", nil, "unlock", "-nodes", nodes, "-reason", "stuck", "other")
	if code != exitOK || !strings.Contains(stderr3, "nothing to delete") {
		t.Errorf("unlock of a free resource: exit %d, stderr %q; want 0, nothing to delete", code, stderr3)
	}

	// A dead node: deleted on the others, -yes without asking, exit 1.
	if err := c.Nodes[2].Kill(); err != nil {
		t.Fatal(err)
	}
	var got unlockJSON
	wantCode(t, "unlock -yes with a dead node", cliJSON(t, &got, "unlock", "-yes", "-nodes", nodes, "-timeout", "5s", "-reason", "stuck", "invoice:42"), exitFail)
	if got.Resource != "invoice:42" || got.Reason != "stuck" || len(got.Nodes) != 3 {
		t.Fatalf("unlock -json: %+v", got)
	}
	for i, want := range []string{unlockDeleted, unlockDeleted, unlockFailed} {
		n := got.Nodes[i]
		if n.Node != a[i] || n.Result != want || want == unlockDeleted && (n.Digest != node.Digest(l2.Value()) || n.TTLMillis <= 0) {
			t.Errorf("node %d: %+v; want %s", i+1, n, want)
		}
	}
	if got.Nodes[2].Error == "" {
		t.Errorf("the dead node's row does not say why")
	}
}

// A node's key is deleted only if it still holds the value seen there:
// another owner's key, set since, stays; one gone since is reported gone.
func TestUnlockKeepsANewOwnersKey(t *testing.T) {
	c := redisproc.Start(t, 1)
	ctx := context.Background()
	o := &options{timeout: time.Second}
	cfg, err := (&options{nodes: c.Addrs()[0]}).config()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Nodes[0].Set(ctx, "redlease:{r}", "old", time.Minute); err != nil {
		t.Fatal(err)
	}
	var n unlockNodeJSON
	n.read(ctx, o, cfg, c.Addrs()[0], "redlease:{r}")
	defer n.client.Close()
	if n.value != "old" || n.TTLMillis <= 0 {
		t.Fatalf("read: %+v", n)
	}
	if err := c.Nodes[0].Set(ctx, "redlease:{r}", "new", time.Minute); err != nil {
		t.Fatal(err)
	}
	n.delete(ctx, o, "redlease:", "redlease:{r}")
	if v, _, _ := c.Nodes[0].Get(ctx, "redlease:{r}"); n.Result != unlockKept || v != "new" || !strings.Contains(n.Error, node.Digest("new")) {
		t.Errorf("after a new owner's set: %s (%s), key %q; want kept, naming the new value, and the key as it was", n.Result, n.Error, v)
	}
	if _, err := c.Nodes[0].Do(ctx, "DEL", "redlease:{r}"); err != nil {
		t.Fatal(err)
	}
	n.delete(ctx, o, "redlease:", "redlease:{r}")
	if n.Result != unlockGone {
		t.Errorf("after the key went: %s, want gone", n.Result)
	}
}

// An operator unlocks to unblock the callers already waiting: unlock
// announces the deletion as the holder's release would, and the waiter
// blocked in Acquire (another engine's) gets the lease at once, not when
// the key would have expired (before: 42.85s after an unlock, at the old
// key's expiry). The holder's TTL is 10s; the waiter must have it well
// within that.
func TestUnlockWakesWaiters(t *testing.T) {
	c := redisproc.Start(t, 3)
	a := c.Addrs()
	_, l := holdInvoice(t, a)
	waiter, err := engine.New(engine.Config{Nodes: a})
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	got := make(chan error, 1)
	var start time.Time
	go func() {
		w, err := waiter.Acquire(t.Context(), "invoice:42")
		if err == nil {
			err = w.Release(context.Background())
		}
		got <- err
	}()
	// Waiting, and settled: it heard the release channel and looked once
	// more (a recheck), so that only an announcement or the expiry wakes
	// it now.
	testwait.Eventually(t, 5*time.Second, "the waiter waits", func() bool {
		s := waiter.Stats()
		return s.Waiters["invoice:42"] == 1 && s.Wakeups.Recheck > 0
	})
	time.Sleep(100 * time.Millisecond) // its recheck's round refused: waiting again
	start = time.Now()
	code, _, stderr := cli(t, "", nil, "unlock", "-yes", "-reason", "stuck", "-nodes", join(a...), "invoice:42")
	wantCode(t, "unlock: "+stderr, code, exitOK)
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiter: %v", err)
		}
		t.Logf("the waiter acquired %v after the unlock began", time.Since(start).Round(time.Millisecond))
	case <-time.After(time.Until(l.Until()) - time.Second):
		t.Fatalf("the waiter did not acquire within %v of the unlock: woken at the key's expiry, not by the unlock", time.Since(start).Round(time.Millisecond))
	}
}
