package engine

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/internal/testwait"
)

// A managed Redis may deny commands to its users. What redlease cannot
// do without (INFO, to tell a node that lost its data; CLIENT ID and
// KILL, to fence an abandoned connection; its scripts and its keys), New
// refuses, saying what is missing and why. What it can do without, it
// does at a cost it logs: without SUBSCRIBE a waiter of another engine
// learns of a release when the holder's key expires; without MULTI or
// EXEC acquires go through the script; without CONFIG, DEBUG is assumed.
// Each case is a user of one node lacking those commands.
func TestACLDeniedCommands(t *testing.T) {
	c := redisproc.Start(t, 1)
	testACL(t, c.Addrs(), c.Nodes, nil)
}

// The same on a Redis Cluster, whose every master has the user: and
// without CLUSTER, the engine cannot find the cluster's masters.
func TestACLDeniedOnACluster(t *testing.T) {
	t.Parallel() // it waits on its own cluster or master set, not on the CPU
	c := redisproc.StartRedisClusterT(t, 3, 0)
	testACL(t, []string{clusterNode(c)}, c.Servers, []aclCase{{"no CLUSTER", []string{"-cluster"}, "CLUSTER SHARDS"}})
}

// aclCase is a user's rules and what New's error or the log says.
type aclCase struct {
	name  string
	rules []string
	want  string
}

// testACL runs the cases on nodes, whose servers all get the user,
// and the fatal cases more.
func testACL(t *testing.T, nodes []string, servers []*redisproc.Node, more []aclCase) {
	user := func(t *testing.T, rules ...string) Config {
		t.Helper()
		args := append([]string{"ACL", "SETUSER", "lim", "reset", "on", ">pw", "~*", "&*", "+@all"}, rules...)
		for _, s := range servers {
			if _, err := s.Do(t.Context(), args...); err != nil {
				t.Fatal(err)
			}
		}
		if err := MarkNew(t.Context(), Config{Nodes: nodes}); err != nil { // as the default user
			t.Fatal(err)
		}
		return Config{Nodes: nodes, Client: rueidis.ClientOption{Username: "lim", Password: "pw"}, TTL: time.Second}
	}

	for _, tc := range append([]aclCase{ // want: in New's error
		{"no INFO", []string{"-info"}, "redlease needs INFO"},
		{"no CLIENT KILL", []string{"-client|kill"}, "CLIENT KILL"},
		{"no CLIENT ID", []string{"-client|id"}, "CLIENT ID"},
		{"no SCRIPT LOAD", []string{"-script|load"}, "SCRIPT LOAD"},
		{"no EVALSHA", []string{"-evalsha"}, "EVALSHA"},
		{"not its keys", []string{"resetkeys", "~app:*"}, "redlease needs its keys"},
	}, more...) {
		t.Run(tc.name, func(t *testing.T) {
			cfg := user(t, tc.rules...)
			e, err := New(cfg)
			if err == nil {
				e.Close()
				t.Fatalf("New with %v: no error", tc.rules)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New with %v: %v; want it to say %q", tc.rules, err, tc.want)
			}
			t.Log(err)
		})
	}

	for _, tc := range []aclCase{ // want: logged
		{"no pub/sub", []string{"-@pubsub"}, "refuses SUBSCRIBE"},
		{"no transactions", []string{"-@transaction"}, "refuses MULTI or EXEC"},
		{"no EXEC", []string{"-exec"}, "refuses MULTI or EXEC"}, // EXECABORT: not left in a transaction
		{"no EXEC nor DISCARD", []string{"-exec", "-discard"}, "refuses MULTI or EXEC"},
		{"no CONFIG", []string{"-config"}, "refuses CONFIG GET"},
		{"no DEBUG", []string{"-debug"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := user(t, tc.rules...)
			var log syncBuffer
			cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
			holder := newEngine(t, cfg.Nodes, func(c *Config) { *c = cfg })
			waiter := newEngine(t, cfg.Nodes, func(c *Config) { *c = cfg })
			l, err := holder.Acquire(t.Context(), "r")
			if err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			events, stop := waiter.Subscribe(16)
			defer stop()
			got := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				l2, err := waiter.Acquire(ctx, "r")
				if err == nil {
					err = l2.Release(context.Background())
				}
				got <- err
			}()
			// The release must wake, or the key's expiry inform, a waiter.
			waitEvent(t, events, "the waiter refused by the holder", refused)
			if err := l.Release(t.Context()); err != nil {
				t.Fatalf("Release: %v", err)
			}
			if err := <-got; err != nil {
				t.Fatalf("the waiter of another engine: %v", err)
			}
			if tc.want != "" {
				testwait.Eventually(t, 2*time.Second, "the log says "+tc.want, func() bool { return strings.Contains(log.String(), tc.want) })
			}
		})
	}
}
