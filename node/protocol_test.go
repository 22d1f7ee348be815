package node

import (
	flagpkg "flag"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flagpkg.Bool("update", false, "rewrite batch.lua's generated protocol table")

// writePrelude writes prelude into batch.lua, between its markers.
func writePrelude(t *testing.T) {
	t.Helper()
	src, err := os.ReadFile("batch.lua")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	i, j := strings.Index(s, preludeBegin), strings.Index(s, preludeEnd)
	if i < 0 || j < i {
		t.Fatal("batch.lua has no protocol table's markers")
	}
	s = s[:i] + prelude() + s[j+len(preludeEnd)+1:]
	if err := os.WriteFile("batch.lua", []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	batchLua = s
}

// batch.lua states the protocol as scriptCmds does: its header lines, and
// the arity its dispatcher moves by. An arity that differed would shift
// every later command's keys and arguments, so neither side may change
// alone.
func TestScriptAgreesWithTable(t *testing.T) {
	var want []string
	for i := range scriptCmds {
		want = append(want, scriptCmds[i].header()...)
	}
	// The header's rows: a code line, then its KEYS and ARGV lines.
	var got []string
	row := regexp.MustCompile(`^--   \S  |^--        (KEYS|ARGV) `)
	for _, line := range strings.Split(batchLua, "\n") {
		if row.MatchString(line) {
			got = append(got, line)
		}
	}
	for i := range max(len(got), len(want)) {
		g, w := "(none)", "(none)"
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("batch.lua's header, row line %d:\n%s\nscriptCmds':\n%s", i+1, g, w)
		}
	}

	// The generated part, constants and arity, is prelude's; batch.lua
	// reads every key and argument through its names.
	if *update {
		writePrelude(t)
	}
	if !strings.Contains(batchLua, prelude()) {
		t.Errorf("batch.lua's protocol table is not prelude's (go test ./node -run TestScriptAgreesWithTable -update):\n%s", prelude())
	}
	defined := map[string]bool{}
	for _, o := range offsets() {
		defined[o.name] = true
	}
	body := batchLua[strings.Index(batchLua, preludeEnd):]
	for _, m := range regexp.MustCompile(`\b[KA]_\w+`).FindAllString(body, -1) {
		if !defined[m] {
			t.Errorf("batch.lua reads %s, which the protocol table does not define", m)
		}
	}
	if m := regexp.MustCompile(`(ARGV|KEYS)\[[^]]*\b\d`).FindAllString(body, -1); len(m) > 0 {
		t.Errorf("batch.lua reads by position, not by name: %q", m)
	}

	// Commands start after the preamble: KEYS[2] and ARGV[1+scriptPreamble].
	if m := regexp.MustCompile(`(?m)^local k, a, n = (\d+), (\d+), #ARGV$`).FindStringSubmatch(batchLua); m == nil ||
		m[1] != "2" || m[2] != strconv.Itoa(1+scriptPreamble) {
		t.Errorf("batch.lua starts reading commands at KEYS, ARGV %v; the Go encoder after 1 key and %d arguments", m, scriptPreamble)
	}

	m := regexp.MustCompile(`(?m)^local releasedSuffix, grantedSuffix = '([^']*)', '([^']*)'$`).FindStringSubmatch(batchLua)
	if m == nil {
		t.Fatal("batch.lua has no 'local releasedSuffix, grantedSuffix = ...'")
	}
	if m[1] != ReleasedSuffix || m[2] != GrantedSuffix {
		t.Errorf("batch.lua's suffixes are %q, %q; Go's %q, %q", m[1], m[2], ReleasedSuffix, GrantedSuffix)
	}
	m = regexp.MustCompile(`(?m)^local metaSep = '([^']*)'$`).FindStringSubmatch(batchLua)
	if m == nil || m[1] != MetaSep {
		t.Errorf("batch.lua's metaSep is %q, Go's MetaSep %q", m, MetaSep)
	}
}

// MetaOf takes what follows the first separator: a meta may hold it too.
func TestMetaOf(t *testing.T) {
	for _, tt := range []struct{ value, meta string }{
		{"abc", ""}, {"abc|", ""}, {"abc|web-3 pid 7", "web-3 pid 7"}, {"abc|a|b", "a|b"}, {"", ""},
	} {
		if got := MetaOf(tt.value); got != tt.meta {
			t.Errorf("MetaOf(%q) = %q, want %q", tt.value, got, tt.meta)
		}
	}
}

// Every key batch.lua touches is one of a command's KEYS (or the epoch
// key): it names no key of its own making.
func TestScriptMakesNoKeys(t *testing.T) {
	for _, suffix := range []string{queueSuffix, grantsSuffix, fenceSuffix} {
		if strings.Contains(batchLua, "'"+suffix+"'") {
			t.Errorf("batch.lua makes a key with %q", suffix)
		}
	}
}

// Each named release command takes the script path it always took, and
// sends what the protocol table names, in its order.
func TestCommandsEncode(t *testing.T) {
	r := Request{Key: "{r}", Value: "v"}
	ttl := 3 * time.Second
	for _, tt := range []struct {
		cmd        Command
		keys, args []string
	}{
		{&Release{Request: r, TTL: ttl}, []string{"{r}", "{r}:queue", "{r}:queue:grants"}, []string{"r", "v"}},
		{&Release{Request: r, TTL: ttl, Queued: true}, []string{"{r}", "{r}:queue", "{r}:queue:grants"}, []string{"l", "v"}},
		{&HandOff{Request: r, TTL: ttl, Queued: true}, []string{"{r}", "{r}:queue", "{r}:queue:grants"}, []string{"l", "v"}},
		{&HandOff{Request: r, TTL: ttl, Successor: "n", SuccessorSince: "7", Ungranted: true},
			[]string{"{r}", "{r}:queue", "{r}:queue:grants"}, []string{"H", "v", "", "7", "n", "3000", "1"}},
		{&Cleanup{Request: r, TTL: ttl}, []string{"{r}"}, []string{"d", "v"}},
		{&Cleanup{Request: r, TTL: ttl, Announce: true}, []string{"{r}", "{r}:queue", "{r}:queue:grants"}, []string{"r", "v"}},
		{&Cleanup{Request: r, TTL: ttl, Keep: 1}, []string{"{r}", "{r}:queue", "{r}:queue:grants"},
			[]string{"C", "v", "3000", "", "", "1"}},
		{&Cleanup{Request: r, TTL: ttl, Since: "5", Keep: 2}, []string{"{r}", "{r}:queue", "{r}:queue:grants"},
			[]string{"C", "v", "3000", "5", "", ""}},
		{&Leave{Request: r, TTL: ttl}, []string{"{r}", "{r}:queue", "{r}:queue:grants"}, []string{"l", "v"}},
		{&Leave{Request: r, TTL: ttl, KeepGrant: true}, []string{"{r}", "{r}:queue", "{r}:queue:grants"},
			[]string{"g", "v"}},
		{&Acquire{Request: r, TTL: ttl}, []string{"{r}"}, []string{"a", "v", "3000"}},
		{&Acquire{Request: r, TTL: ttl, Since: "5"}, []string{"{r}", "{r}:queue", "{r}:queue:grants"}, []string{"w", "v", "3000", "5"}},
		{&Acquire{Request: r, TTL: ttl, FenceKey: "{r}:fence"}, []string{"{r}", "{r}:queue", "{r}:queue:grants", "{r}:fence"},
			[]string{"A", "v", "3000", ""}},
		{&Queue{Request: r, TTL: ttl, Since: "5"}, []string{"{r}", "{r}:queue", "{r}:queue:grants"}, []string{"q", "v", "3000", "5"}},
		{&Fence{Request: r, FenceKey: "{r}:fence", Token: 9}, []string{"{r}", "{r}:fence"}, []string{"f", "v", "9"}},
		{&Extend{Request: r, TTL: ttl}, []string{"{r}"}, []string{"e", "v", "3000"}},
		{&Check{Request: r}, []string{"{r}"}, []string{"c", "v"}},
		{&Heal{Request: r, TTL: 1234 * time.Millisecond}, []string{"{r}"}, []string{"h", "v", "1234"}},
	} {
		a := &nodeActor{cfg: Config{Index: 0}, stopping: true} // stopping: enqueue only queues
		a.command(tt.cmd)
		var s scriptArgs
		s.add(&a.queue[0], &millis{})
		if !slices.Equal(s.keys, tt.keys) || !slices.Equal(s.args, tt.args) {
			t.Errorf("%T %+v sends KEYS %q ARGV %q, want %q %q", tt.cmd, tt.cmd, s.keys, s.args, tt.keys, tt.args)
		}
	}
}

// ParseAnnouncement reads what the script publishes (the scenes in
// queue_test.go read real ones), and keeps a short message's fields "".
func TestParseAnnouncement(t *testing.T) {
	for _, tt := range []struct {
		msg  string
		want Announcement
	}{
		{"h n s", Announcement{Holder: "h", Next: "n", Standby: "s"}},
		{"h n s g", Announcement{Holder: "h", Next: "n", Standby: "s", Granted: true}},
		{"h n  g", Announcement{Holder: "h", Next: "n", Granted: true}},
		{" n s", Announcement{Next: "n", Standby: "s"}},
		{"h  ", Announcement{Holder: "h"}},
		{"h", Announcement{Holder: "h"}},
	} {
		if got := ParseAnnouncement(tt.msg); got != tt.want {
			t.Errorf("ParseAnnouncement(%q) = %+v, want %+v", tt.msg, got, tt.want)
		}
	}
}

// The key names are the ones deployed nodes hold: a change would orphan
// every lock, queue and marker there.
func TestKeyNames(t *testing.T) {
	queue, grants := queueKeys(&Request{Key: "p:{r}"})
	for _, tt := range []struct{ got, want string }{
		{LockKey("p:", "r"), "p:{r}"},
		{FenceKey("p:{r}"), "p:{r}:fence"},
		{EpochKey("p:"), "p:lineage"},
		{queue, "p:{r}:queue"},
		{grants, "p:{r}:queue:grants"},
		{"p:{r}" + ReleasedSuffix, "p:{r}:released"},
	} {
		if tt.got != tt.want {
			t.Errorf("key %q, want %q", tt.got, tt.want)
		}
	}
	// add makes a row's grants key with its queue key, just before it.
	for _, c := range scriptCmds {
		for i, k := range c.keys {
			if k == keyGrants && (i == 0 || c.keys[i-1] != keyQueue) {
				t.Errorf("code %s: grants not right after queue in its KEYS", c.code)
			}
		}
	}
}

// LockKeys makes the lock key and its grants key in one string, and the
// keys a command carries are the same whether its request brings them or
// the sender makes them.
func TestLockKeys(t *testing.T) {
	lock, grants := LockKeys("p:", "r")
	if lock != LockKey("p:", "r") || grants != lock+queueSuffix+grantsSuffix {
		t.Fatalf("LockKeys = %q, %q", lock, grants)
	}
	q1, g1 := queueKeys(&Request{Key: lock, Grants: grants})
	q2, g2 := queueKeys(&Request{Key: lock})
	if q1 != q2 || g1 != g2 || q1 != lock+queueSuffix {
		t.Fatalf("queue keys %q %q from the request, %q %q made", q1, g1, q2, g2)
	}
	if q, _ := queueKeys(&Request{Key: "other", Grants: grants}); q != "other"+queueSuffix {
		t.Fatalf("a request whose Grants is not its key's: queue %q", q)
	}
}
