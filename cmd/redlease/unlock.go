package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/redis/rueidis"

	"github.com/redlease/redlease/engine"
	"github.com/redlease/redlease/node"
)

// What unlock did on a node.
const (
	unlockDeleted = "deleted"     // the key held the value seen, and is gone
	unlockNoKey   = "no key"      // the node held no lock key for the resource
	unlockGone    = "gone"        // the key expired or was released between reading and deleting
	unlockKept    = "kept"        // another owner's key since: not touched
	unlockFailed  = "unreachable" // the node did not answer (Error says why)
)

type unlockJSON struct {
	Resource string           `json:"resource"`
	Reason   string           `json:"reason"`
	Nodes    []unlockNodeJSON `json:"nodes"`
}

type unlockNodeJSON struct {
	Node      string `json:"node"`
	Digest    string `json:"value_sha1,omitempty"` // of the value found (node.Digest), "" for none
	Meta      string `json:"meta,omitempty"`       // who holds it, as its lease says (engine.WithMeta)
	TTLMillis int64  `json:"ttl_ms,omitempty"`     // of the key found
	Result    string `json:"result,omitempty"`
	Error     string `json:"error,omitempty"`

	value   string
	client  rueidis.Client
	cluster bool // the node is a Redis Cluster
}

// runUnlock forces RESOURCE's lock free: it shows which nodes hold its
// lock key (the value's digest, its meta: who holds it, the TTL left), asks, and deletes the key
// on each node where it still holds the value seen there, announcing it
// as the holder's own release would (node.Unlock): the callers already
// waiting for the resource wake at once, in their order, and run their
// rounds. Another owner's key, set since, is kept, and so are the grants
// and the fence counter (tokens must still grow). A holder still running believes it holds the lease until its
// next extension finds the key gone: this is for holders dead or stuck.
func runUnlock(ctx context.Context, o *options, cfg engine.Config, args []string, s ios) int {
	if len(args) != 1 {
		fmt.Fprintln(s.err, "redlease unlock: RESOURCE is required: the name the lease was acquired for")
		return exitUsage
	}
	if strings.TrimSpace(o.reason) == "" {
		fmt.Fprintln(s.err, "redlease unlock: -reason is required: say why the lock is forced (it is printed with the outcome)")
		return exitUsage
	}
	out := unlockJSON{Resource: args[0], Reason: o.reason, Nodes: make([]unlockNodeJSON, len(cfg.Nodes))}
	prefix := cmp.Or(cfg.KeyPrefix, engine.DefaultKeyPrefix) // an engine's default too
	key := node.LockKey(prefix, out.Resource)
	perNode(out.Nodes, func(n *unlockNodeJSON, i int) { n.read(ctx, o, cfg, cfg.Nodes[i], key) })
	defer perNode(out.Nodes, func(n *unlockNodeJSON, _ int) {
		if n.client != nil {
			n.client.Close()
		}
	})

	held, quorum := holders(out.Nodes)
	fmt.Fprintf(s.err, "redlease unlock: %s: lock key on %d of %d nodes, %s; reason: %q\n",
		printable(out.Resource), held, len(out.Nodes), quorum, o.reason)
	printUnlock(s.err, out.Nodes, "STATE")
	if held == 0 {
		fmt.Fprintln(s.err, "redlease unlock: no node that answered holds its lock key: nothing to delete")
	} else if !o.yes && !confirmUnlock(s, out.Resource) {
		return exitFail
	}
	perNode(out.Nodes, func(n *unlockNodeJSON, _ int) {
		if n.value != "" {
			n.delete(ctx, o, prefix, key)
		}
	})
	if o.json {
		printJSON(s.out, out)
	} else {
		printUnlock(s.out, out.Nodes, "RESULT")
		fmt.Fprintf(s.out, "%s: lock key deleted on %d of %d nodes; reason: %q\n", printable(out.Resource),
			countResult(out.Nodes, unlockDeleted), len(out.Nodes), o.reason)
	}
	if countResult(out.Nodes, unlockFailed) > 0 {
		return exitFail
	}
	return exitOK
}

// perNode runs f on every node at once.
func perNode(nodes []unlockNodeJSON, f func(n *unlockNodeJSON, i int)) {
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() { f(&nodes[i], i) })
	}
	wg.Wait()
}

// read connects to addr and reads key's value and TTL there; the client
// stays open for the delete.
func (n *unlockNodeJSON) read(ctx context.Context, o *options, cfg engine.Config, addr, key string) {
	n.Node = addr
	t, err := node.ParseTarget(addr)
	if err != nil {
		n.fail(err)
		return
	}
	n.cluster = t.Cluster != nil
	opt := t.Option(cfg.Client)
	opt.DisableCache, opt.Dialer.Timeout = true, o.timeout
	c, err := rueidis.NewClient(opt)
	if err != nil {
		n.fail(err)
		return
	}
	n.client = c
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	res := c.DoMulti(ctx, c.B().Get().Key(key).Build(), c.B().Pttl().Key(key).Build())
	value, err := res[0].ToString()
	if rueidis.IsRedisNil(err) {
		n.Result = unlockNoKey
		return
	}
	if err == nil {
		n.TTLMillis, err = res[1].AsInt64()
	}
	if err != nil {
		n.fail(err)
		return
	}
	n.value, n.Digest, n.Meta = value, node.Digest(value), engine.MetaOf(value)
}

// delete deletes key on the node if it still holds the value read, and
// announces it (node.Unlock).
func (n *unlockNodeJSON) delete(ctx context.Context, o *options, prefix, key string) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	deleted, err := node.Unlock(ctx, n.client, prefix, key, n.value, n.cluster)
	switch {
	case err != nil:
		n.fail(err)
	case deleted:
		n.Result = unlockDeleted
	default:
		// What holds it now, for the operator: read after the delete was
		// refused, not with it.
		held, err := n.client.Do(ctx, n.client.B().Get().Key(key).Build()).ToString()
		switch {
		case rueidis.IsRedisNil(err):
			n.Result = unlockGone
		case err != nil:
			n.fail(err)
		default:
			n.Result, n.Error = unlockKept, "another owner's key since: value sha1 "+node.Digest(held)
		}
	}
}

func (n *unlockNodeJSON) fail(err error) { n.Result, n.Error = unlockFailed, err.Error() }

// holders counts the nodes that hold the lock key, and says whether a
// quorum of them holds one value (a held lease) or not (debris).
func holders(nodes []unlockNodeJSON) (held int, quorum string) {
	byValue := map[string]int{}
	for _, n := range nodes {
		if n.value != "" {
			byValue[n.value]++
			held++
		}
	}
	q := engine.Quorum(len(nodes))
	for _, c := range byValue {
		if c >= q {
			return held, fmt.Sprintf("a quorum (%d) for one owner: a held lease", q)
		}
	}
	return held, fmt.Sprintf("no quorum (%d) for one owner", q)
}

// printUnlock writes a row per node: the value found, its TTL, and what
// column says (STATE before the delete, RESULT after).
func printUnlock(w io.Writer, nodes []unlockNodeJSON, column string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tVALUE SHA1\tMETA\tTTL\t"+column)
	for _, n := range nodes {
		digest, meta, ttl, what := "-", "-", "-", n.Result
		if n.value != "" {
			digest, ttl = n.Digest, ttlText(n.TTLMillis)
		}
		if n.Meta != "" {
			meta = strconv.Quote(n.Meta)
		}
		if what == "" {
			what = "holds it"
		}
		if n.Error != "" {
			what += ": " + n.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.Node, digest, meta, ttl, what)
	}
	tw.Flush()
}

func countResult(nodes []unlockNodeJSON, result string) int {
	n := 0
	for _, k := range nodes {
		if k.Result == result {
			n++
		}
	}
	return n
}

// confirmUnlock asks the operator, when there is one to ask: never when
// stdin is not a terminal (CI, a pipe), where it refuses at once rather
// than wait for an answer nobody will type.
func confirmUnlock(s ios, resource string) bool {
	if !interactive(s.in) {
		fmt.Fprintln(s.err, "redlease unlock: stdin is not a terminal, so nobody can confirm: nothing deleted; pass -yes to unlock without asking")
		return false
	}
	fmt.Fprintf(s.err, "Delete the lock key of %s on every node above that holds it?\n"+
		"A holder still running believes it holds the lease until its next extension finds the key gone, up to a TTL from now: "+
		"force only a lock whose holder is dead or stuck. Type yes to go on: ", printable(resource))
	if !answeredYes(s) {
		fmt.Fprintln(s.err, "redlease unlock: not confirmed; nothing deleted")
		return false
	}
	return true
}

// interactive reports whether in is a terminal an operator answers on,
// or a reader that is not a file (the caller's own answers, as in the
// tests). A pipe or a regular file is not asked.
func interactive(in io.Reader) bool {
	f, ok := in.(*os.File)
	if !ok {
		return true
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}
