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
// Acquires name the epoch key too, and require it when checkEpoch.
func (e *entry) build(c rueidis.Client, full bool, epochKey string, checkEpoch bool) rueidis.Completed {
	s := &scripts[e.op]
	var (
		keys = [2]string{e.req.Key, epochKey}
		args = [3]string{e.req.Value, "", "0"}
		nk   = 1 // keys and args used
		na   = 1
	)
	switch e.op {
	case opAcquire:
		nk, na = 2, 3
		args[1] = strconv.FormatInt(e.ttl.Milliseconds(), 10)
		if checkEpoch {
			args[2] = "1"
		}
	case opExtend:
		na = 2
		args[1] = strconv.FormatInt(e.ttl.Milliseconds(), 10)
	}
	if full {
		return c.B().Eval().Script(s.body).Numkeys(int64(nk)).Key(keys[:nk]...).Arg(args[:na]...).Build()
	}
	return c.B().Evalsha().Sha1(s.sha).Numkeys(int64(nk)).Key(keys[:nk]...).Arg(args[:na]...).Build()
}
