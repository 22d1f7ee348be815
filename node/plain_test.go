package node

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/redis/rueidis"

	"github.com/redlease/redlease/actors"
	"github.com/redlease/redlease/internal/redisproc"
)

// The plain block's epoch check (epochHolds in Go) and the batch script's
// (epochHolds in Lua) agree on every kind of dataset: the marker of the
// running process, none, another lineage's, a new replication id, and
// losses (a flush) on a process that may run DEBUG. Each case asks both
// on the same node at the same moment: the script through a check
// (answers -1 when the marker does not hold), Go on a plain block's
// reads.
func TestPlainAgreesWithScript(t *testing.T) {
	ctx := t.Context()
	nodes := redisproc.Start(t, 2) // redisproc's servers may run DEBUG
	srv := nodes.Nodes[0]
	c := newClient(t, srv.Addr())
	conn := NewConn(rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	defer conn.Close()
	probe := func() Info {
		t.Helper()
		info, err := conn.Probe(ctx, epochKey, Info{}) // loads the script too
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	info := probe()
	if !info.Debug {
		t.Fatal("the test servers must allow DEBUG: the debug case would not run")
	}
	mark := func(i Info) {
		t.Helper()
		if err := srv.Set(ctx, epochKey, i.Lineage(), 0); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name  string
		setup func() Info // makes the dataset; returns what the engine judged safe
		want  bool
	}{
		{"the marker of the running process", func() Info { mark(info); return info }, true},
		{"no marker", func() Info {
			if _, err := srv.Do(ctx, "DEL", epochKey); err != nil {
				t.Fatal(err)
			}
			return info
		}, false},
		{"another lineage's marker", func() Info {
			other := info
			other.RunID = "0000000000000000000000000000000000000000"
			mark(other)
			return info
		}, false},
		{"a new replication id", func() Info {
			mark(info)
			if err := nodes.Nodes[1].ReplicaOf(ctx, srv); err != nil { // the primary draws a new one
				t.Fatal(err)
			}
			return info
		}, false},
		{"the new replication id, marked", func() Info { i := probe(); mark(i); return i }, true},
		{"a loss on a process that may run DEBUG", func() Info {
			i := probe()
			mark(i)
			if _, err := srv.Do(ctx, "FLUSHDB"); err != nil { // empties db 0, the marker too
				t.Fatal(err)
			}
			mark(i) // as DEBUG RELOAD would bring it back
			return i
		}, false},
		{"the losses counted, marked", func() Info { i := probe(); mark(i); return i }, true},
	}
	for _, tc := range cases {
		judged := tc.setup()
		epoch := judged.Lineage()
		if judged.Debug {
			epoch += debugSuffix
		}
		script := scriptHolds(ctx, t, c, epoch)
		plain := plainHolds(ctx, t, c, epoch)
		if script != tc.want || plain != tc.want {
			t.Errorf("%s: the script says %v, the plain block %v; want %v", tc.name, script, plain, tc.want)
		}
	}
}

// scriptHolds asks the batch script whether epoch holds: a check answers
// -1 when it does not.
func scriptHolds(ctx context.Context, t *testing.T, c rueidis.Client, epoch string) bool {
	t.Helper()
	var s scriptArgs
	var ttl millis
	e := entry{op: opCheck, req: &Request{Key: "{k}", Value: "v"}}
	arr, err := c.Do(ctx, s.build(c, []entry{e}, epochKey, epoch, "", false, &ttl)).ToArray()
	if err != nil || len(arr) != 1 {
		t.Fatalf("script: %v %v", arr, err)
	}
	n, _ := arr[0].AsInt64()
	return n != epochMissing
}

// plainHolds runs a plain block's reads (no SET) and judges them.
func plainHolds(ctx context.Context, t *testing.T, c rueidis.Client, epoch string) bool {
	t.Helper()
	var ttl millis
	cmds := appendPlain(nil, c, nil, epochKey, epoch, &ttl)
	res := c.DoMulti(ctx, cmds...)
	arr, err := res[len(res)-1].ToArray()
	if err != nil || len(arr) != plainChecks(epoch) {
		t.Fatalf("plain block: %v %v", arr, err)
	}
	marker, merr := arr[0].ToString()
	repl, _ := arr[1].ToString()
	stats := ""
	if len(arr) == 3 {
		stats, _ = arr[2].ToString()
	}
	return epochHolds(epoch, marker, merr == nil, repl, stats)
}

// A node whose ACL denies transactions (MULTI, EXEC) answers the plain
// block's MULTI with NOPERM, and runs its SETs outside a transaction: none
// counts. The acquires go again through the script, which grants the
// owner its own key (or names the holder), and every acquire after them
// goes through the script.
func TestPlainFallsBackWithoutTransactions(t *testing.T) {
	ctx := t.Context()
	c := redisproc.Start(t, 1)
	srv := c.Nodes[0]
	if _, err := srv.Do(ctx, "ACL", "SETUSER", "limited", "on", ">pw", "~*", "&*", "+@all", "-@transaction"); err != nil {
		t.Fatal(err)
	}
	conn := NewConn(rueidis.ClientOption{InitAddress: c.Addrs(), Username: "limited", Password: "pw"})
	info, err := conn.Probe(ctx, epochKey, Info{})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := conn.Mark(ctx, epochKey, info, true); !ok || err != nil {
		t.Fatalf("mark: %v %v", ok, err)
	}
	info.Epoch = info.Lineage()
	h := &harness{t: t, server: srv, system: actors.NewSystem(nil), votes: make(chan *Vote, 100)}
	h.inbox = h.system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if v, ok := ctx.Message().(*Vote); ok {
			h.votes <- v
		}
	}))
	h.node = Spawn(h.system, Config{Addr: c.Addrs()[0], EpochKey: epochKey, Conn: conn, Timeout: 5 * time.Second,
		Quarantine: time.Minute, HealthInterval: time.Hour, First: &info})
	t.Cleanup(func() {
		h.node.Stop()
		h.system.Shutdown()
	})
	if err := srv.Set(ctx, "held", "other", 0); err != nil {
		t.Fatal(err)
	}
	for i, s := range []struct {
		key  string
		want Outcome
	}{{"a", Granted}, {"held", Taken}, {"b", Granted}} {
		v := h.ask(&Acquire{Request: h.req(s.key, "me", uint64(i+1)), TTL: time.Minute})
		if v.Outcome != s.want || v.Err != nil {
			t.Fatalf("acquire %s: %+v, want %v", s.key, v, s.want)
		}
		if s.want == Taken && v.Holder != Digest("other") {
			t.Fatalf("acquire %s: holder %q, want %q", s.key, v.Holder, Digest("other"))
		}
	}
	if !h.node.actor.noPlain.Load() {
		t.Fatal("the node refused MULTI, and acquires still go plain")
	}
	if val, _, _ := srv.Get(ctx, "b"); val != "me" {
		t.Fatalf("b is %q, want me", val)
	}
}

// A plain acquire whose SET finds another owner's key asks the script who
// holds it, and for how long, and is refused; one that finds its owner's
// own key is refused too (its TTL was not renewed).
func TestPlainRefusalNamesTheHolder(t *testing.T) {
	h := newHarness(t, 5*time.Second)
	ctx := t.Context()
	if err := h.server.Set(ctx, "k", "other|meta", time.Minute); err != nil {
		t.Fatal(err)
	}
	v := h.ask(&Acquire{Request: h.req("k", "me", 1), TTL: time.Minute})
	if v.Outcome != Taken || v.Holder != Digest("other|meta") || v.Meta != "meta" || v.TTL <= 0 || v.Until.IsZero() {
		t.Fatalf("refused plain acquire: %+v, want Taken naming the holder and its TTL", v)
	}
	if err := h.server.Set(ctx, "own", "me", time.Minute); err != nil {
		t.Fatal(err)
	}
	if v := h.ask(&Acquire{Request: h.req("own", "me", 2), TTL: time.Hour}); v.Outcome != Taken {
		t.Fatalf("plain acquire of its own key: %+v, want Taken", v)
	}
	if d, err := h.server.PTTL(ctx, "own"); err != nil || d > time.Minute {
		t.Fatalf("own key's TTL %v (%v): renewed by a refused acquire", d, err)
	}
}

// The plain acquire takes what the script's acquire takes (the row
// plainAcquire), so an acquire carries the same whichever way it goes,
// and its SET puts each where SET takes it: the key holds the value, for
// the TTL.
func TestPlainRowIsTheAcquires(t *testing.T) {
	if a := scriptCmds[codeAcquire]; !slices.Equal(plainAcquire.keys, a.keys) || !slices.Equal(plainAcquire.args, a.args) {
		t.Fatalf("plain acquire takes KEYS %v ARGV %v, the script's acquire %v %v", plainAcquire.keys, plainAcquire.args, a.keys, a.args)
	}
	ctx := t.Context()
	c := newClient(t, redisproc.Start(t, 1).Nodes[0].Addr())
	a := &nodeActor{cfg: Config{Index: 0}, stopping: true} // stopping: enqueue only queues
	a.command(&Acquire{Request: Request{Key: "{r}", Value: "v"}, TTL: 3 * time.Second})
	res := c.DoMulti(ctx, appendPlain(nil, c, a.queue[:1], epochKey, "", &millis{})...)
	if err := res[len(res)-1].Error(); err != nil {
		t.Fatal(err)
	}
	v, _ := c.Do(ctx, c.B().Get().Key("{r}").Build()).ToString()
	pttl, _ := c.Do(ctx, c.B().Pttl().Key("{r}").Build()).AsInt64()
	if v != "v" || pttl <= 2000 || pttl > 3000 {
		t.Fatalf("after a plain acquire of {r} by v for 3s, the key holds %q for %dms", v, pttl)
	}
}
