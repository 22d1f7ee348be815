package node

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// batch is the one script every batch runs (see batch.lua): each command
// costs the node a few Redis calls, not a script call of its own.
//
//go:embed batch.lua
var batchLua string

var batchScript = newScript(batchLua)

//go:embed epoch.lua
var epochLua string

var epochScript = newScript(epochLua)

// maxScriptOps bounds the commands of one batch script: the node runs
// nothing else while it runs (64 take it tens of microseconds).
const maxScriptOps = 64

// script is a Lua script sent by SHA; probes load it ahead of use, and a
// batch that finds the node's script cache without it (a restart, SCRIPT
// FLUSH, or eviction on Redis ≥ 7.4) waits for a probe.
type script struct {
	body, sha string
}

func newScript(body string) script {
	sum := sha1.Sum([]byte(body))
	return script{body: body, sha: hex.EncodeToString(sum[:])}
}

// millis formats TTLs in milliseconds, remembering the last: nearly every
// command of a node carries the engine's one TTL, so this saves an
// allocation per command.
type millis struct {
	d    time.Duration
	text string
}

func (m *millis) format(d time.Duration) string {
	if d != m.d || m.text == "" {
		m.d, m.text = d, strconv.FormatInt(d.Milliseconds(), 10)
	}
	return m.text
}

// scriptPreamble is how many ARGV a batch script call carries before its
// commands: the epoch, the channel, and the sharded flag (batch.lua's
// header; TestScriptAgreesWithTable checks where batch.lua starts reading
// commands).
const scriptPreamble = len(preambleArgs)

// scriptArgs is a batch script call in the making; the sender goroutine
// keeps one and reuses it.
type scriptArgs struct {
	keys, args []string
}

// build returns the batch script's call for batch (EVALSHA: a probe loads
// the script): acquires (and grants) require the epoch marker epoch, and
// the replication id it names, unless it is ""; the waiters it queues are
// granted while the engine listens on channel (Config.Channel); sharded,
// releases are announced with SPUBLISH (a Redis Cluster's shard).
func (s *scriptArgs) build(c rueidis.Client, batch []entry, epochKey, epoch, channel string, sharded bool, ttl *millis) rueidis.Completed {
	s.fill(batch, epochKey, epoch, channel, sharded, ttl)
	return c.B().Evalsha().Sha1(batchScript.sha).Numkeys(int64(len(s.keys))).Key(s.keys...).Arg(s.args...).Build()
}

// fill sets the keys and arguments of build's call.
func (s *scriptArgs) fill(batch []entry, epochKey, epoch, channel string, sharded bool, ttl *millis) {
	if !queues(batch) {
		channel = "" // unread: spare the bytes
	}
	s.keys = append(s.keys[:0], epochKey)
	s.args = append(s.args[:0], epoch, channel, flag(sharded)) // scriptPreamble of them
	for i := range batch {
		s.add(&batch[i], ttl)
	}
}

// queues reports whether a command of batch may queue a waiter or grant
// one the key: only those read the engine's channel.
func queues(batch []entry) bool {
	for i := range batch {
		e := &batch[i]
		if e.since != "" || e.op == opQueue || e.op == opRelease && (e.announce || e.successor != "") {
			return true
		}
	}
	return false
}
