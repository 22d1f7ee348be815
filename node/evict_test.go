package node

import (
	"errors"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/testwait"
)

func TestEvicts(t *testing.T) {
	for _, c := range []struct{ memory, want string }{
		{"maxmemory:0\r\nmaxmemory_policy:allkeys-lru\r\n", ""},
		{"maxmemory:67108864\r\nmaxmemory_policy:noeviction\r\n", ""},
		{"maxmemory:67108864\r\nmaxmemory_policy:volatile-lru\r\n", "volatile-lru"},
		{"maxmemory:67108864\r\nmaxmemory_policy:allkeys-random\r\n", "allkeys-random"},
		{"used_memory:1000\r\n", ""}, // a section that does not say
	} {
		if got := evicts(c.memory); got != c.want {
			t.Errorf("evicts(%q) = %q, want %q", c.memory, got, c.want)
		}
	}
}

// A node set to evict keys when its memory fills (CONFIG SET at run time)
// refuses acquires (and heals) from its next probe on, with ErrEvicting;
// extensions and releases still go. Set back to noeviction, it grants
// again. With UnsafeEviction it grants all along.
func TestEvictingNodeRefusesAcquires(t *testing.T) {
	for _, unsafe := range []bool{false, true} {
		h := newHarnessCfg(t, Config{Timeout: time.Second, Quarantine: -1, HealthInterval: 50 * time.Millisecond, UnsafeEviction: unsafe})
		ttl := time.Minute
		if v := h.ask(&Acquire{Request: h.req("held", "me", 1), TTL: ttl}); v.Outcome != Granted {
			t.Fatalf("acquire before: %+v", v)
		}
		for _, arg := range [][]string{{"maxmemory", "64mb"}, {"maxmemory-policy", "volatile-lru"}} {
			if _, err := h.server.Do(t.Context(), "CONFIG", "SET", arg[0], arg[1]); err != nil {
				t.Fatal(err)
			}
		}
		if unsafe {
			// Two whole probes (four INFO sections each) after the change.
			infos := func() int {
				n, err := h.server.Calls(t.Context(), "info")
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			start := infos()
			testwait.Eventually(t, 10*time.Second, "two whole probes after the change", func() bool { return infos() >= start+2*4+3 })
			if v := h.ask(&Acquire{Request: h.req("other", "me", 2), TTL: ttl}); v.Outcome != Granted {
				t.Fatalf("UnsafeEviction: acquire on an evicting node: %+v", v)
			}
			continue
		}
		var v *Vote
		round := uint64(1)
		testwait.Eventually(t, 5*time.Second, "an acquire not granted by the evicting node", func() bool {
			round++
			v = h.ask(&Acquire{Request: h.req("other", "me", round), TTL: ttl, Contended: true}) // later rounds
			return v.Outcome != Granted
		})
		if v.Outcome != Failed || !errors.Is(v.Err, ErrEvicting) || !h.node.Stats().Evicting {
			t.Fatalf("acquire on an evicting node: %+v (stats %+v), want Failed with ErrEvicting", v, h.node.Stats())
		}
		if v := h.ask(&Heal{Request: h.req("healed", "me", 99), TTL: ttl}); v.Outcome != Failed || !errors.Is(v.Err, ErrEvicting) {
			t.Fatalf("heal on an evicting node: %+v, want Failed with ErrEvicting", v)
		}
		if v := h.ask(&Extend{Request: h.req("held", "me", 100), TTL: ttl}); v.Outcome != Granted {
			t.Fatalf("extend on an evicting node: %+v", v)
		}
		if v := h.ask(&Release{Request: h.req("held", "me", 101), TTL: ttl}); v.Outcome != Granted {
			t.Fatalf("release on an evicting node: %+v", v)
		}
		if _, err := h.server.Do(t.Context(), "CONFIG", "SET", "maxmemory-policy", "noeviction"); err != nil {
			t.Fatal(err)
		}
		h.askUntil("again", Granted, 5*time.Second)
		if h.node.Stats().Evicting {
			t.Fatal("Stats().Evicting after the node was set back to noeviction")
		}
	}
}
