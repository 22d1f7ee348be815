package redisproc

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestRestartFromSnapshot(t *testing.T) {
	c := Start(t, 1)
	n := c.Nodes[0]
	ctx := ctxTimeout(t, 20*time.Second)

	if err := n.Set(ctx, "before", "v", 0); err != nil {
		t.Fatal(err)
	}
	if err := n.RestartFromSnapshot(); err == nil {
		t.Fatal("RestartFromSnapshot without a Save succeeded")
	}
	if _, ok, err := n.Get(ctx, "before"); !ok || err != nil { // left alone
		t.Fatalf("a failed RestartFromSnapshot touched the process (ok=%v err=%v)", ok, err)
	}
	if err := n.Set(ctx, "saved", "v", 0); err != nil {
		t.Fatal(err)
	}
	if err := n.Set(ctx, "saved-ttl", "v", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := n.Save(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.Set(ctx, "later", "v", 0); err != nil {
		t.Fatal(err)
	}
	if err := n.Set(ctx, "saved", "overwritten", 0); err != nil {
		t.Fatal(err)
	}
	id1, err := n.RunID(ctx)
	if err != nil {
		t.Fatal(err)
	}

	if err := n.RestartFromSnapshot(); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := n.Get(ctx, "saved"); err != nil || !ok || v != "v" {
		t.Fatalf("after RestartFromSnapshot: saved = %q, %v, %v; want the value as of Save", v, ok, err)
	}
	if d, err := n.PTTL(ctx, "saved-ttl"); err != nil || d < 50*time.Second {
		t.Fatalf("after RestartFromSnapshot: PTTL(saved-ttl) = %v, %v; want its TTL kept", d, err)
	}
	if _, ok, err := n.Get(ctx, "later"); ok || err != nil {
		t.Fatalf("after RestartFromSnapshot: a key written after Save survived (ok=%v err=%v)", ok, err)
	}
	id2, err := n.RunID(ctx)
	if err != nil || id2 == id1 {
		t.Fatalf("run_id after RestartFromSnapshot = %q, %v; before %q", id2, err, id1)
	}

	// The snapshot is still there, so a second snapshot restart gives the
	// same data; plain Restart deletes it and starts empty.
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := n.RestartFromSnapshot(); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := n.Get(ctx, "saved"); !ok || err != nil {
		t.Fatalf("second RestartFromSnapshot lost the saved key (ok=%v err=%v)", ok, err)
	}
	if err := n.Restart(); err != nil {
		t.Fatal(err)
	}
	if keys, err := n.Keys(ctx, "*"); err != nil || len(keys) != 0 {
		t.Fatalf("after Restart: keys %v, %v; want an empty dataset", keys, err)
	}
	if err := n.RestartFromSnapshot(); err == nil {
		t.Fatal("Restart left the snapshot behind")
	}
}

func TestStall(t *testing.T) {
	c := Start(t, 2)
	n, other := c.Nodes[0], c.Nodes[1]
	ctx := ctxTimeout(t, 20*time.Second)
	if err := n.Set(ctx, "k", "v", 0); err != nil {
		t.Fatal(err)
	}
	if v, err := n.Do(ctx, "DEBUG", "SLEEP", "0"); err != nil || v != "OK" { // the reload faults need it
		t.Fatalf("DEBUG SLEEP 0 = %v, %v: DEBUG not enabled for local connections?", v, err)
	}

	start := time.Now()
	woke, err := n.Stall(400 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, _, err = n.Get(short, "k")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get on a stalled node: err = %v, want deadline exceeded", err)
	}
	if err := other.Set(ctx, "k", "v", 0); err != nil { // only n sleeps
		t.Fatal(err)
	}
	if v, ok, err := n.Get(ctx, "k"); err != nil || !ok || v != "v" {
		t.Fatalf("Get after the stall = %q, %v, %v", v, ok, err)
	}
	if el := time.Since(start); el < 400*time.Millisecond {
		t.Fatalf("the stalled node answered after %v, before its 400ms sleep ended", el)
	}
	select {
	case err := <-woke:
		if err != nil {
			t.Fatalf("the stall: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("no word from the stall")
	}

	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Stall(time.Millisecond); err == nil {
		t.Fatal("Stall on a killed node succeeded")
	}
}

// nodeAhead reads how far n's clock runs ahead of the host's.
func nodeAhead(t *testing.T, ctx context.Context, n *Node) time.Duration {
	t.Helper()
	// The node read its clock somewhere in the round trip: take the
	// quickest of a few, from its middle (one took over 50ms on a loaded
	// machine).
	var ahead, best time.Duration
	for i := range 5 {
		before := time.Now()
		nt, err := n.Time(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rtt := time.Since(before); i == 0 || rtt < best {
			ahead, best = nt.Sub(before.Add(rtt/2)), rtt
		}
	}
	return ahead
}

func TestClockAhead(t *testing.T) {
	c := Start(t, 2)
	n, other := c.Nodes[0], c.Nodes[1]
	ctx := ctxTimeout(t, 20*time.Second)
	near := func(got, want time.Duration) bool {
		return got > want-50*time.Millisecond && got < want+50*time.Millisecond
	}

	if err := n.SetClockAhead(time.Second); err == nil {
		t.Fatal("SetClockAhead on a node on the host's clock succeeded")
	}
	if d := nodeAhead(t, ctx, n); !near(d, 0) {
		t.Fatalf("a new node's clock is %v ahead", d)
	}
	if err := n.Set(ctx, "k", "v", 0); err != nil {
		t.Fatal(err)
	}
	id1, err := n.RunID(ctx)
	if err != nil {
		t.Fatal(err)
	}

	if err := n.RestartClockAhead(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if d := nodeAhead(t, ctx, n); !near(d, 5*time.Second) {
		t.Fatalf("after RestartClockAhead(5s) TIME is %v ahead", d)
	}
	if n.ClockAhead() != 5*time.Second {
		t.Fatalf("ClockAhead = %v", n.ClockAhead())
	}
	if _, ok, err := n.Get(ctx, "k"); ok || err != nil {
		t.Fatalf("RestartClockAhead kept the data (ok=%v err=%v)", ok, err)
	}
	if id2, err := n.RunID(ctx); err != nil || id2 == id1 {
		t.Fatalf("run_id after RestartClockAhead = %q, %v", id2, err)
	}
	if d := nodeAhead(t, ctx, other); !near(d, 0) {
		t.Fatalf("the other node's clock moved: %v ahead", d)
	}

	// A jump at runtime expires the keys whose time it passes, and only
	// those; a TTL set after it runs normally.
	if err := n.Set(ctx, "short", "v", 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := n.Set(ctx, "long", "v", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := n.SetClockAhead(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if d := nodeAhead(t, ctx, n); !near(d, 10*time.Second) {
		t.Fatalf("after SetClockAhead(10s) TIME is %v ahead", d)
	}
	if _, ok, err := n.Get(ctx, "short"); ok || err != nil {
		t.Fatalf("a 3s key survived a 5s clock jump (ok=%v err=%v)", ok, err)
	}
	if d, err := n.PTTL(ctx, "long"); err != nil || d > 56*time.Second || d < 50*time.Second {
		t.Fatalf("PTTL(long) after a 5s jump = %v, %v; want about 55s", d, err)
	}
	if err := n.Set(ctx, "new", "v", time.Second); err != nil {
		t.Fatal(err)
	}
	if d, err := n.PTTL(ctx, "new"); err != nil || d < 900*time.Millisecond {
		t.Fatalf("PTTL of a key set after the jump = %v, %v", d, err)
	}

	// The node keeps its clock across restarts, as a machine would.
	if err := n.Restart(); err != nil {
		t.Fatal(err)
	}
	if d := nodeAhead(t, ctx, n); !near(d, 10*time.Second) {
		t.Fatalf("after Restart TIME is %v ahead, want 10s", d)
	}
	if err := n.Save(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.RestartFromSnapshot(); err != nil {
		t.Fatal(err)
	}
	if d := nodeAhead(t, ctx, n); !near(d, 10*time.Second) {
		t.Fatalf("after RestartFromSnapshot TIME is %v ahead, want 10s", d)
	}
	if err := n.SetClockAhead(0); err != nil {
		t.Fatal(err)
	}
	if d := nodeAhead(t, ctx, n); !near(d, 0) {
		t.Fatalf("after SetClockAhead(0) TIME is %v ahead", d)
	}
}
