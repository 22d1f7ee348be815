package node

import (
	"slices"
	"testing"

	"github.com/redis/rueidis"
)

// A Target reads back as it was written, and Option sets what rueidis
// needs to reach it.
func TestTarget(t *testing.T) {
	for _, s := range []string{"127.0.0.1:6379", "sentinel://127.0.0.1:26379,[::1]:26380/locks"} {
		tg, err := ParseTarget(s)
		if err != nil {
			t.Fatalf("ParseTarget(%q): %v", s, err)
		}
		if tg.String() != s {
			t.Errorf("ParseTarget(%q).String() = %q", s, tg.String())
		}
		// A template naming another master set: a standalone node clears it.
		opt := tg.Option(rueidis.ClientOption{InitAddress: []string{"x:1"}, Sentinel: rueidis.SentinelOption{MasterSet: "other"}})
		switch {
		case tg.MasterSet == "" && (opt.Sentinel.MasterSet != "" || !slices.Equal(opt.InitAddress, []string{s})):
			t.Errorf("%q: option %v / %q", s, opt.InitAddress, opt.Sentinel.MasterSet)
		case tg.MasterSet != "" && (opt.Sentinel.MasterSet != "locks" || !slices.Equal(opt.InitAddress, tg.Sentinels)):
			t.Errorf("%q: option %v / %q", s, opt.InitAddress, opt.Sentinel.MasterSet)
		}
	}
}
