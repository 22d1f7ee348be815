package node

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"strconv"

	"github.com/redis/rueidis"
)

var (
	//go:embed acquire.lua
	acquireLua string
	//go:embed extend.lua
	extendLua string
	//go:embed release.lua
	releaseLua string
)

// script is a Lua script sent by SHA, and in full when the node lost its
// script cache (after a restart).
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
}

// build returns the EVALSHA command for e, or with full the EVAL command.
func (e *entry) build(c rueidis.Client, full bool) rueidis.Completed {
	s := &scripts[e.op]
	if full {
		b := c.B().Eval().Script(s.body).Numkeys(1).Key(e.req.Key).Arg(e.req.Value)
		if e.op != opRelease {
			b = b.Arg(strconv.FormatInt(e.ttl.Milliseconds(), 10))
		}
		return b.Build()
	}
	b := c.B().Evalsha().Sha1(s.sha).Numkeys(1).Key(e.req.Key).Arg(e.req.Value)
	if e.op != opRelease {
		b = b.Arg(strconv.FormatInt(e.ttl.Milliseconds(), 10))
	}
	return b.Build()
}
