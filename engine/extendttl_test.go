package engine

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/internal/testwait"
	"github.com/redlease/redlease/lease"
)

// pttlsWithin waits until every node's key of resource has a PTTL in
// (lo, hi].
func pttlsWithin(t *testing.T, c *redisproc.Cluster, resource string, lo, hi time.Duration) {
	t.Helper()
	var got []time.Duration
	testwait.Eventually(t, 2*time.Second, fmt.Sprintf("every node's PTTL of %s within (%v, %v]", resource, lo, hi), func() bool {
		got = got[:0]
		for _, n := range c.Nodes {
			d, err := n.PTTL(t.Context(), DefaultKeyPrefix+"{"+resource+"}")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, d)
		}
		for _, d := range got {
			if d <= lo || d > hi {
				return false
			}
		}
		return true
	})
}

// ExtendTTL sets the new TTL on the nodes and moves Until with it, longer
// or shorter; an auto-extended lease keeps extending with it.
func TestExtendTTL(t *testing.T) {
	c := startNodes(t, 3)
	e := newEngine(t, c.Addrs(), func(cfg *Config) { cfg.TTL, cfg.MaxTTL = time.Second, 5*time.Second })
	ctx := t.Context()

	l, err := e.Acquire(ctx, "manual")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	for _, ttl := range []time.Duration{3 * time.Second, 500 * time.Millisecond} {
		before := time.Now()
		if err := l.Extend(ctx, ExtendTTL(ttl)); err != nil {
			t.Fatalf("Extend(ExtendTTL(%v)): %v", ttl, err)
		}
		after := time.Now()
		if u := l.Until(); u.Before(before.Add(ttl-lease.Drift(ttl, DefaultDriftFactor))) || u.After(after.Add(ttl-lease.Drift(ttl, DefaultDriftFactor))) {
			t.Fatalf("ExtendTTL(%v): Until %v after the call, want %v", ttl, u.Sub(before), ttl-lease.Drift(ttl, DefaultDriftFactor))
		}
		pttlsWithin(t, c, "manual", ttl/2, ttl) // the last TTL was 1s, then 3s
	}
	if err := l.Extend(ctx); err != nil { // keeps 500ms
		t.Fatal(err)
	}
	pttlsWithin(t, c, "manual", 0, 500*time.Millisecond)

	auto, err := e.Acquire(ctx, "auto", WithAutoExtend(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer auto.Release(ctx)
	events := auto.Events()
	if err := auto.Extend(ctx, ExtendTTL(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	ours := auto.Until()
	// The next automatic round, a third of the new TTL later, keeps it:
	// with the old TTL (1s) its Until would come before ours.
	for ev := range events {
		if ev.Kind == Extended && ev.Until.After(ours.Add(500*time.Millisecond)) {
			break
		}
		if ev.Kind.Terminal() {
			t.Fatalf("lease ended: %v", ev.Err)
		}
	}
	pttlsWithin(t, c, "auto", time.Second, 3*time.Second)
}

// Bad TTLs are refused before any round, and so is a TTL that would hold
// the lease past its hold; the lease is left as it was.
func TestExtendTTLRefusals(t *testing.T) {
	c := startNodes(t, 3)
	e := newEngine(t, c.Addrs(), func(cfg *Config) { cfg.TTL, cfg.MaxTTL = time.Second, 5*time.Second })
	ctx := t.Context()
	// The hold ends 2s (WithAutoExtend) plus 1s (TTL) after the acquire.
	l, err := e.Acquire(ctx, "r", WithAutoExtend(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		want string // in the error
		is   error  // matched, if set
	}{
		{"zero", 0, "ExtendTTL must be > 0, got 0s", nil},
		{"negative", -time.Second, "ExtendTTL must be > 0, got -1s", nil},
		{"below the drift allowance", time.Millisecond, "ExtendTTL must exceed the drift allowance (2.01ms), got 1ms", nil},
		{"at the node timeout", DefaultNodeTimeout, "ExtendTTL must exceed NodeTimeout (50ms), got 50ms", nil},
		{"above MaxTTL", 6 * time.Second, "ExtendTTL must not exceed MaxTTL (5s), got 6s (a larger Config.MaxTTL allows it, at a cost", nil},
		{"beyond the hold", 4 * time.Second, "4s asked", ErrBeyondMaxHold},
	} {
		until := l.Until()
		err := l.Extend(ctx, ExtendTTL(tc.ttl))
		if err == nil || !strings.Contains(err.Error(), tc.want) || tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%s: ExtendTTL(%v): %v; want an error with %q, matching %v", tc.name, tc.ttl, err, tc.want, tc.is)
		}
		if l.Err() != nil || !l.Until().Equal(until) {
			t.Fatalf("%s: after the refusal, Err %v and Until moved by %v; want the lease as it was", tc.name, l.Err(), l.Until().Sub(until))
		}
	}
	// After the maximum hold: ErrMaxHold, whatever the TTL (4s is refused
	// as beyond the hold until then).
	testwait.Eventually(t, 5*time.Second, "Extend refused with ErrMaxHold", func() bool {
		return errors.Is(l.Extend(ctx, ExtendTTL(4*time.Second)), ErrMaxHold)
	})
	if l.Err() != nil && !errors.Is(l.Err(), ErrExpired) {
		t.Fatalf("lease after ErrMaxHold: %v, want held or expired", l.Err())
	}
}
