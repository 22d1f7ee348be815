package node

import (
	"slices"
	"testing"

	"github.com/redis/rueidis"
)

// A Target reads back as it was written, and Option sets what rueidis
// needs to reach it.
func TestTarget(t *testing.T) {
	for _, s := range []string{"127.0.0.1:6379", "sentinel://127.0.0.1:26379,[::1]:26380/locks", "cluster://127.0.0.1:7000,127.0.0.1:7001"} {
		tg, err := ParseTarget(s)
		if err != nil {
			t.Fatalf("ParseTarget(%q): %v", s, err)
		}
		if tg.String() != s {
			t.Errorf("ParseTarget(%q).String() = %q", s, tg.String())
		}
		// A template naming another master set: a standalone node clears it.
		opt := tg.Option(rueidis.ClientOption{InitAddress: []string{"x:1"}, Sentinel: rueidis.SentinelOption{MasterSet: "other"}})
		var want []string
		switch {
		case tg.Cluster != nil:
			want = tg.Cluster
		case tg.MasterSet != "":
			want = tg.Sentinels
		default:
			want = []string{s}
		}
		if opt.Sentinel.MasterSet != tg.MasterSet || !slices.Equal(opt.InitAddress, want) {
			t.Errorf("%q: option %v / %q", s, opt.InitAddress, opt.Sentinel.MasterSet)
		}
	}
	for _, bad := range []string{"cluster://", "cluster://127.0.0.1", "cluster://127.0.0.1:1,127.0.0.1:1", "cluster://127.0.0.1:1/x", "redis://127.0.0.1:1"} {
		if _, err := ParseTarget(bad); err == nil {
			t.Errorf("ParseTarget(%q): no error", bad)
		}
	}
}
