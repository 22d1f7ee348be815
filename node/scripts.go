package node

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

var (
	//go:embed acquire.lua
	acquireLua string
	//go:embed extend.lua
	extendLua string
	//go:embed release.lua
	releaseLua string
	//go:embed acquire_fenced.lua
	acquireFencedLua string
	//go:embed fence.lua
	fenceLua string
	//go:embed epoch.lua
	epochLua string
	//go:embed queue.lua
	queueLua string
)

// script is a Lua script sent by SHA, and in full when the node's script
// cache lost it (a restart, SCRIPT FLUSH, or eviction on Redis ≥ 7.4);
// probes load every script ahead of use.
type script struct {
	body, sha string
}

func newScript(body string) script {
	sum := sha1.Sum([]byte(body))
	return script{body: body, sha: hex.EncodeToString(sum[:])}
}

var scripts = [...]script{
	opAcquire: newScript(acquireLua),
	opExtend:  newScript(extendLua),
	opRelease: newScript(releaseLua),

	opAcquireFenced: newScript(acquireFencedLua),
	opFence:         newScript(fenceLua),
	opQueue:         newScript(queueLua),
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

// build returns the EVALSHA command for e, or with full the EVAL command.
// Acquires name the epoch key too, and require the marker epoch unless it
// is "".
func (e *entry) build(c rueidis.Client, full bool, epochKey, epoch string, ttl *millis) rueidis.Completed {
	s := &scripts[e.op]
	var (
		keys   = [3]string{e.req.Key}
		args   = [6]string{e.req.Value}
		nk, na = 1, 1 // keys and args used
	)
	switch e.op {
	case opAcquire, opAcquireFenced:
		keys[1] = epochKey
		args[1] = ttl.format(e.ttl)
		args[2] = epoch
		args[3] = e.since
		nk, na = 2, 4
		if e.op == opAcquireFenced {
			keys[2] = e.fenceKey
			nk = 3
		}
	case opExtend:
		args[1] = ttl.format(e.ttl)
		na = 2
	case opRelease:
		if e.announce {
			args[1] = "1"
		}
		if e.leave {
			args[2] = "1"
		}
		na = 3
		if e.successor != "" {
			args[3], args[4], args[5] = e.since, e.successor, ttl.format(e.ttl)
			na = 6
		}
	case opQueue:
		args[1] = e.since
		args[2] = ttl.format(e.ttl)
		na = 3
	case opFence:
		keys[1] = e.fenceKey
		args[1] = strconv.FormatUint(e.token, 10)
		nk, na = 2, 2
	}
	if full {
		return c.B().Eval().Script(s.body).Numkeys(int64(nk)).Key(keys[:nk]...).Arg(args[:na]...).Build()
	}
	return c.B().Evalsha().Sha1(s.sha).Numkeys(int64(nk)).Key(keys[:nk]...).Arg(args[:na]...).Build()
}
