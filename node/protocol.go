package node

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// The batch script's protocol, written once. Every command batch.lua runs
// is a row of scriptCmds: its code, the KEYS and ARGV it takes, in order,
// and its reply. The Go encoder (scriptArgs.add) appends what the row
// names, and TestScriptAgreesWithTable checks batch.lua's header and its
// arity table against the rows: a command whose arity differed on the
// two sides would shift the arguments of every command after it in a
// batch, onto other owners' keys. The plain acquire's SET (plain.go) is a
// row too, plainAcquire, which must take what the script's acquire takes.

// code is a command of the batch script.
type code uint8

const (
	codeAcquire          code = iota // a
	codeAcquireQueueing              // w: an acquire that queues when refused
	codeAcquireFenced                // A
	codeExtend                       // e
	codeRelease                      // d: silent
	codeReleaseAnnounced             // r
	codeReleaseLeaving               // l: announced, and out of the queue
	codeHandOff                      // H: announced, queueing a successor (HandOff)
	codeCleanupKeeping               // C: a failed round's, keeping a grant or its place (Cleanup)
	codeLeaveKeeping                 // g: out of the queue, keeping a grant (Leave.KeepGrant)
	codeQueue                        // q
	codeFence                        // f
	codeCheck                        // c
	codeHeal                         // h
)

// key names a key a command takes in KEYS.
type key uint8

const (
	keyLock   key = iota // the lock key (LockKey)
	keyQueue             // its queue of waiters (queueSuffix)
	keyGrants            // its waiters' grants (grantsSuffix)
	keyFence             // its fence counter (FenceKey)
)

var keyNames = [...]string{keyLock: "lock", keyQueue: "queue", keyGrants: "grants", keyFence: "fence"}

// arg names an argument a command takes in ARGV, after its code.
type arg uint8

const (
	argValue          arg = iota // the owner's value
	argTTL                       // the lease's TTL (ms)
	argSince                     // when the caller began to wait (µs), or '': it does not queue
	argToken                     // a fencing token
	argAnnounce                  // '1': announce the release
	argLeave                     // '1': the owner leaves the queue too (HandOff.Queued)
	argSuccessorSince            // when the successor began to wait (µs)
	argSuccessor                 // the successor's value, or '': none
	argSuccessorTTL              // the successor's TTL (ms)
	argKeep                      // '1': a key the owner holds is a grant: it stays
	argUngranted                 // '1': the successor is named, never granted
)

var argNames = [...]string{
	argValue: "value", argTTL: "ttl", argSince: "since", argToken: "token", argAnnounce: "announce",
	argLeave: "leave", argSuccessorSince: "successor since", argSuccessor: "successor",
	argSuccessorTTL: "successor ttl", argKeep: "keep", argUngranted: "ungranted",
}

// scriptCmd is a row of the protocol.
type scriptCmd struct {
	code  string // in ARGV, before the command's arguments
	what  string
	keys  []key
	args  []arg
	reply string
}

// Replies of the acquires: granted, refused (the holder's key's PTTL,
// Digest and MetaOf), or the epoch marker is not the one required.
const acquireReply = "1 | {0, pttl, holder, meta} | -1"

// keyAbsent is the reply of an extend, a release and a check when no
// owner holds the key (Absent): for an extend, a key the lease may heal,
// unlike another owner's (0); for a release and a check, a key gone, not
// taken.
const keyAbsent = -2

// scriptCmds is the protocol, by code. Only the commands that may touch
// the queue of waiters carry its keys: the others are the commonest.
var scriptCmds = [...]scriptCmd{
	codeAcquire: {"a", "acquire", []key{keyLock}, []arg{argValue, argTTL}, acquireReply},
	codeAcquireQueueing: {"w", "acquire, queueing", []key{keyLock, keyQueue, keyGrants},
		[]arg{argValue, argTTL, argSince}, acquireReply},
	codeAcquireFenced: {"A", "fenced acquire", []key{keyLock, keyQueue, keyGrants, keyFence},
		[]arg{argValue, argTTL, argSince}, "{1, counter} | {0, pttl, holder, meta} | -1"},
	codeExtend:           {"e", "extend", []key{keyLock}, []arg{argValue, argTTL}, "1 | 0 | -2"},
	codeRelease:          {"d", "release", []key{keyLock}, []arg{argValue}, "1 | 0 | -2"},
	codeReleaseAnnounced: {"r", "release, announced", []key{keyLock, keyQueue, keyGrants}, []arg{argValue}, "1 | 0 | -2"},
	codeReleaseLeaving: {"l", "release, announced, leaving the queue", []key{keyLock, keyQueue, keyGrants},
		[]arg{argValue}, "1 | 0 | -2"},
	codeHandOff: {"H", "hand-off: release, announced, queueing a successor", []key{keyLock, keyQueue, keyGrants},
		[]arg{argValue, argLeave, argSuccessorSince, argSuccessor, argSuccessorTTL, argUngranted}, "1 | 0 | -2"},
	codeCleanupKeeping: {"C", "cleanup keeping a grant or its place", []key{keyLock, keyQueue, keyGrants},
		[]arg{argValue, argTTL, argSince, argAnnounce, argKeep}, "1 | 0 | -2"},
	codeLeaveKeeping: {"g", "leave, keeping a grant", []key{keyLock, keyQueue, keyGrants}, []arg{argValue}, "0"},
	codeQueue:        {"q", "queue", []key{keyLock, keyQueue, keyGrants}, []arg{argValue, argTTL, argSince}, "1"},
	codeFence:        {"f", "fence", []key{keyLock, keyFence}, []arg{argValue, argToken}, "1 | 0"},
	codeCheck:        {"c", "check", []key{keyLock}, []arg{argValue}, "{1, pttl} | {0, pttl, holder, meta} | -2 | -1"},
	codeHeal:         {"h", "heal", []key{keyLock}, []arg{argValue, argTTL}, "1 | 0 | -1"},
}

// plainAcquire is the plain block's row (plain.go): an acquire that goes
// as SET <lock> <value> NX PX <ttl> in a MULTI/EXEC block opened by the
// epoch's reads, in place of the script's codeAcquire, whose keys and
// arguments it takes (TestPlainRowIsTheAcquires): an acquire carries the
// same whichever way it goes. Its reply is OK (granted) or nil: the key
// was there, and the script's check (codeCheck) answers whose.
var plainAcquire = scriptCmd{"SET", "plain acquire, in MULTI/EXEC after the epoch's reads",
	[]key{keyLock}, []arg{argValue, argTTL}, "OK | nil"}

// plainSet is e's command in a plain block, each of plainAcquire's key
// and arguments where SET takes it.
func (e *entry) plainSet(c rueidis.Client, ttl *millis) rueidis.Completed {
	r := &plainAcquire
	return c.B().Arbitrary(r.code).Keys(e.req.Key).Args(e.arg(r.args[0], ttl), "NX", "PX", e.arg(r.args[1], ttl)).Build()
}

// luaName is name as batch.lua reads it: "successor since" is
// successorSince.
func luaName(name string) string {
	words := strings.Fields(name)
	for i := 1; i < len(words); i++ {
		words[i] = strings.ToUpper(words[i][:1]) + words[i][1:]
	}
	return strings.Join(words, "")
}

// preambleArgs name the ARGV a batch script call carries before its
// commands (scriptPreamble of them), as batch.lua reads them.
var preambleArgs = [...]string{"epoch required", "channel", "sharded"}

// Where batch.lua's generated part begins and ends.
const (
	preludeBegin = "-- BEGIN the protocol table, generated from scriptCmds (protocol.go) by"
	preludeEnd   = "-- END the protocol table"
)

// prelude is batch.lua's generated part: the preamble's arguments by
// name; where each command finds each of its KEYS (offset from its first
// key: K_<key>) and ARGV (offset from its first argument: A_<arg>), by
// name, one constant for a name at the same place in every command that
// takes it, else one per code (K_<code>_<key>); and arity, how many KEYS
// and ARGV, its code included, a command of code c takes (nothing for an
// unknown code). Constants and a chain of comparisons, not tables: the
// body runs again at every call, and tables of codes cost each call of a
// single command (most calls on a Redis Cluster) a microsecond of the
// node's time, as much as the rest of the body.
// TestScriptAgreesWithTable checks that batch.lua holds it.
func prelude() string {
	var b strings.Builder
	b.WriteString(preludeBegin + "\n-- `go test ./node -run TestScriptAgreesWithTable -update`: do not edit.\n")
	names := make([]string, len(preambleArgs))
	values := make([]string, len(preambleArgs))
	for i, p := range preambleArgs {
		names[i], values[i] = luaName(p), fmt.Sprintf("ARGV[%d]", i+1)
	}
	fmt.Fprintf(&b, "local epochKey, %s = KEYS[1], %s\n", strings.Join(names, ", "), strings.Join(values, ", "))
	for _, o := range offsets() {
		fmt.Fprintf(&b, "local %s = %d\n", o.name, o.at)
	}
	b.WriteString("local function arity(c)\n")
	for i, c := range scriptCmds {
		word := "elseif"
		if i == 0 {
			word = "if"
		}
		fmt.Fprintf(&b, "  %s c == '%s' then return %d, %d\n", word, c.code, len(c.keys), 1+len(c.args))
	}
	b.WriteString("  end\nend\n" + preludeEnd + "\n")
	return b.String()
}

// offset is a generated constant of prelude: where a key or argument
// is, from a command's first.
type offset struct {
	name string
	at   int
}

// offsets are prelude's constants, in the order names first appear.
func offsets() []offset {
	type place struct {
		code string
		at   int
	}
	var order []string
	places := map[string][]place{}
	note := func(name, code string, at int) {
		if _, ok := places[name]; !ok {
			order = append(order, name)
		}
		places[name] = append(places[name], place{code, at})
	}
	for _, c := range scriptCmds {
		for i, k := range c.keys {
			note("K_"+luaName(keyNames[k]), c.code, i)
		}
		for i, a := range c.args {
			note("A_"+luaName(argNames[a]), c.code, i)
		}
	}
	var out []offset
	for _, name := range order {
		ps := places[name]
		if !slices.ContainsFunc(ps, func(p place) bool { return p.at != ps[0].at }) {
			out = append(out, offset{name, ps[0].at})
			continue
		}
		for _, p := range ps {
			out = append(out, offset{name[:2] + p.code + "_" + name[2:], p.at})
		}
	}
	return out
}

// header is c's lines in batch.lua's header.
func (c *scriptCmd) header() []string {
	var keys, args []string
	for _, k := range c.keys {
		keys = append(keys, keyNames[k])
	}
	for _, a := range c.args {
		args = append(args, argNames[a])
	}
	return []string{
		fmt.Sprintf("--   %s  %s -> %s", c.code, c.what, c.reply),
		"--        KEYS " + strings.Join(keys, ", "),
		"--        ARGV " + strings.Join(args, ", "),
	}
}

// Key names. A lock key's hash tag (its braces) puts the keys beside it
// in its slot: one script call may touch them all on Redis Cluster.
const (
	// queueSuffix makes a lock key's queue of waiters.
	queueSuffix = ":queue"
	// grantsSuffix makes a queue's grants (see batch.lua, Grants).
	grantsSuffix = ":grants"
	fenceSuffix  = ":fence"
	epochName    = "lineage"
)

// LockKeys is LockKey and its grants key (Request.Grants), in one
// string: an acquire allocates it once for all its commands.
func LockKeys(prefix, resource string) (lock, grants string) {
	grants = prefix + "{" + resource + "}" + queueSuffix + grantsSuffix
	return grants[:len(grants)-len(queueSuffix)-len(grantsSuffix)], grants
}

// LockKey is resource's lock key under prefix: <prefix>{<resource>}. The
// braces are the key's hash tag, which the keys beside it (FenceKey, the
// queue of waiters, the release channel) keep.
func LockKey(prefix, resource string) string { return prefix + "{" + resource + "}" }

// FenceKey is the key of lockKey's fence counter (no TTL but FenceIdle).
func FenceKey(lockKey string) string { return lockKey + fenceSuffix }

// EpochKey is the key of the epoch marker under prefix (Config.EpochKey):
// the lineage of the dataset that an engine last judged safe. It cannot
// collide with a lock key, which holds braces. (Versions that marked the
// run id alone used <prefix>epoch: a key of its own keeps engines of both
// versions from overwriting each other's marker in a rolling upgrade.)
func EpochKey(prefix string) string { return prefix + epochName }

// MetaSep ends the random part of an owner value that carries a meta
// (engine.WithMeta): <random part>|<meta>. The random part is URL-safe
// base64, which never holds it.
const MetaSep = "|"

// MetaOf is the meta an owner value carries: what follows its first
// MetaSep, or "" for none.
func MetaOf(value string) string {
	if i := strings.Index(value, MetaSep); i >= 0 {
		return value[i+len(MetaSep):]
	}
	return ""
}

// ReleasedSuffix makes a lock key's release channel (see Announcement); it
// keeps the key's hash tag.
const ReleasedSuffix = ":released"

// GrantedSuffix ends a release announcement whose release granted the key
// to the next waiter it names (see Announcement).
const GrantedSuffix = " g"

// code is e's command in the script. A release that is sent again
// silently lost its successor (see settle), so it is chosen here, at
// each sending.
func (e *entry) code() code {
	switch e.op {
	case opAcquire:
		if e.asked {
			return codeCheck // see plain.go
		}
		if e.since != "" {
			return codeAcquireQueueing
		}
		return codeAcquire
	case opAcquireFenced:
		return codeAcquireFenced
	case opExtend:
		return codeExtend
	case opQueue:
		return codeQueue
	case opFence:
		return codeFence
	case opCheck:
		return codeCheck
	case opHeal:
		return codeHeal
	}
	switch {
	case e.keep && e.leave:
		return codeLeaveKeeping
	case e.cleanup && (e.keep || e.successor != ""):
		return codeCleanupKeeping
	case e.successor != "":
		return codeHandOff
	case e.announce && e.leave:
		return codeReleaseLeaving
	case e.announce:
		return codeReleaseAnnounced
	}
	// A release that leaves silently would be a release, leaving: none is
	// made (every one that leaves announces, or keeps a grant).
	return codeRelease
}

// queueKeys are r.Key's queue and grants keys: slices of r.Grants (a
// lease's commands carry it: LockKeys), or one string made here (the
// engine's own leaves, tests).
func queueKeys(r *Request) (queue, grants string) {
	grants = r.Grants
	if n := len(r.Key) + len(queueSuffix) + len(grantsSuffix); len(grants) != n || grants[:len(r.Key)] != r.Key {
		grants = r.Key + queueSuffix + grantsSuffix
	}
	return grants[:len(r.Key)+len(queueSuffix)], grants
}

// add appends e's code, keys and arguments, as its row names them.
func (s *scriptArgs) add(e *entry, ttl *millis) {
	c := &scriptCmds[e.code()]
	s.args = append(s.args, c.code)
	var queue, grants string
	for _, k := range c.keys {
		switch k {
		case keyLock:
			s.keys = append(s.keys, e.req.Key)
		case keyQueue:
			queue, grants = queueKeys(e.req) // grants follows queue in every row
			s.keys = append(s.keys, queue)
		case keyGrants:
			s.keys = append(s.keys, grants)
		case keyFence:
			s.keys = append(s.keys, e.fenceKey)
		}
	}
	for _, a := range c.args {
		s.args = append(s.args, e.arg(a, ttl))
	}
}

// arg is e's argument a.
func (e *entry) arg(a arg, ttl *millis) string {
	switch a {
	case argValue:
		return e.req.Value
	case argTTL:
		return ttl.format(e.ttl)
	case argSince, argSuccessorSince:
		return e.since
	case argToken:
		return strconv.FormatUint(e.token, 10)
	case argAnnounce:
		return flag(e.announce)
	case argLeave:
		return flag(e.leave)
	case argSuccessor:
		return e.successor
	case argSuccessorTTL:
		return ttl.format(e.successorTTL)
	case argKeep:
		return flag(e.keep)
	case argUngranted:
		return flag(e.ungranted)
	}
	panic(fmt.Sprintf("redlease: no argument %d", a))
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return ""
}
