package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlease/redlease/engine"
	"github.com/redlease/redlease/internal/hashslot"
	"github.com/redlease/redlease/internal/leakcheck"
	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/node"
)

func TestMain(m *testing.M) { leakcheck.Main(m, "redlease/", "rueidis", "protoactor") }

// cli runs the command line args in-process with stdin and env, and
// returns its exit status and output.
func cli(t *testing.T, stdin string, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, strings.NewReader(stdin), &out, &errOut, func(k string) string { return env[k] })
	t.Logf("redlease %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
	return code, out.String(), errOut.String()
}

// cliJSON runs args with -json and decodes the output into v.
func cliJSON(t *testing.T, v any, args ...string) int {
	t.Helper()
	code, out, _ := cli(t, "", nil, append(args, "-json")...)
	reflect.ValueOf(v).Elem().SetZero() // nothing left of an earlier reading
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("redlease %s -json: %v in %q", strings.Join(args, " "), err, out)
	}
	return code
}

func join(addrs ...string) string { return strings.Join(addrs, ",") }

func wantCode(t *testing.T, what string, got, want int) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: exit %d, want %d", what, got, want)
	}
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, exitUsage},
		{[]string{"-h"}, exitOK},
		{[]string{"nodes", "-h"}, exitOK},
		{[]string{"frobnicate"}, exitUsage},
		{[]string{"nodes"}, exitUsage},                                      // no -nodes
		{[]string{"nodes", "-nodes", "127.0.0.1:1", "extra"}, exitUsage},    // nodes takes no argument
		{[]string{"locks", "-nodes", "127.0.0.1:1", "a*", "b*"}, exitUsage}, // one pattern at most
		{[]string{"nodes", "-nodes", "127.0.0.1"}, exitUsage},               // no port: the engine's config error
		{[]string{"nodes", "-nodes", "127.0.0.1:1", "-quarantine", "0"}, exitUsage},
		{[]string{"mark-new", "-nodes", "127.0.0.1:1", "-ca-file", "/nonexistent"}, exitUsage},
	} {
		code, _, stderr := cli(t, "", nil, tc.args...)
		if code != tc.want {
			t.Errorf("redlease %q: exit %d, want %d", tc.args, code, tc.want)
		}
		if tc.want == exitUsage && stderr == "" {
			t.Errorf("redlease %q: exit %d with nothing on stderr", tc.args, code)
		}
	}
}

func TestBadCAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := cli(t, "", nil, "nodes", "-nodes", "127.0.0.1:1", "-ca-file", path)
	wantCode(t, "nodes -ca-file garbage", code, exitUsage)
	if !strings.Contains(stderr, "no PEM certificate") {
		t.Errorf("stderr %q does not say what is wrong with the CA file", stderr)
	}
}

// TestNodes: fresh nodes are quarantined until marked; then serving; a
// dead node and a replica are named as such, and the exit status follows
// the quorum.
func TestNodes(t *testing.T) {
	c := redisproc.Start(t, 4)
	a := c.Addrs()
	ctx := context.Background()

	var got nodesJSON
	wantCode(t, "nodes on fresh nodes", cliJSON(t, &got, "nodes", "-nodes", join(a[:3]...)), exitFail)
	if got.Quorum != 2 || got.Serving != 0 || len(got.Nodes) != 3 {
		t.Fatalf("fresh nodes: quorum %d, serving %d, %d nodes; want 2, 0, 3", got.Quorum, got.Serving, len(got.Nodes))
	}
	for i, n := range got.Nodes {
		runID, err := c.Nodes[i].RunID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n.Node != a[i] || n.State != stateQuarantined || n.Role != "master" || n.RunID != runID || n.Trusted ||
			n.QuarantineUntil == nil || n.QuarantineLeftSeconds <= 0 || n.QuarantineLeftSeconds > 10 || n.RTTMillis <= 0 {
			t.Errorf("fresh node %d: %+v; want quarantined master %s, run id %s, untrusted, quarantine within 10s, an RTT", i, n, a[i], runID)
		}
	}

	code, _, _ := cli(t, "", nil, "mark-new", "-yes", "-nodes", join(a[:3]...))
	wantCode(t, "mark-new -yes", code, exitOK)
	wantCode(t, "nodes after mark-new", cliJSON(t, &got, "nodes", "-nodes", join(a[:3]...)), exitOK)
	for i, n := range got.Nodes {
		if n.State != stateServing || !n.Trusted || n.QuarantineUntil != nil {
			t.Errorf("marked node %d: %+v; want serving, trusted, no quarantine", i, n)
		}
	}

	// A replica of the dead node: a master's first replica would make it
	// draw a new replication id (and sit out a quarantine).
	if err := c.Nodes[2].Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Nodes[3].Do(ctx, "REPLICAOF", "127.0.0.1", strings.Split(a[2], ":")[1]); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "nodes with one dead", cliJSON(t, &got, "nodes", "-nodes", join(a[:3]...)), exitOK)
	if n := got.Nodes[2]; n.State != stateUnreachable || n.Error == "" || got.Serving != 2 {
		t.Errorf("dead node: %+v, %d serving; want unreachable with its error, 2 serving", n, got.Serving)
	}
	wantCode(t, "nodes with a replica", cliJSON(t, &got, "nodes", "-nodes", join(a[0], a[1], a[3])), exitOK)
	if n := got.Nodes[2]; n.State != stateReplica || n.Role != "replica" {
		t.Errorf("replica: %+v; want state and role replica", n)
	}
	evicting := func(policy string) {
		for _, arg := range [][]string{{"maxmemory", "64mb"}, {"maxmemory-policy", policy}} {
			if _, err := c.Nodes[1].Do(ctx, "CONFIG", "SET", arg[0], arg[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	evicting("allkeys-lru")
	code, out, _ := cli(t, "", nil, "nodes", "-nodes", join(a[0], a[1]))
	wantCode(t, "nodes with one evicting", code, exitFail)
	if !strings.Contains(out, stateEvicting) || !strings.Contains(out, "maxmemory-policy allkeys-lru") {
		t.Errorf("evicting node: table %q; want state %s and its policy", out, stateEvicting)
	}
	code, _, errOut := cli(t, "", nil, "mark-new", "-yes", "-nodes", a[1])
	if code == exitOK || !strings.Contains(errOut, "maxmemory-policy allkeys-lru") {
		t.Errorf("mark-new on an evicting node: exit %d, stderr %q; want it refused with its policy", code, errOut)
	}
	evicting("noeviction")

	// Fewer than a quorum: one serving, one dead, one replica. The table
	// says so too.
	code, out, _ = cli(t, "", nil, "nodes", "-nodes", join(a[1], a[2], a[3]))
	wantCode(t, "nodes with one serving of three", code, exitFail)
	for _, want := range []string{"NODE", stateServing, stateUnreachable, stateReplica, "1 can serve now; fewer than a quorum", "node " + a[2] + ": "} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
}

// TestLocks: a held lease shows its owner, quorum and fence counter; a
// key on one node is debris; PATTERN filters; a prefix with glob
// characters is matched literally; a dead node makes a partial listing
// that exits 1.
func TestLocks(t *testing.T) {
	c := redisproc.Start(t, 3)
	a := c.Addrs()
	ctx := context.Background()
	_, l := holdInvoice(t, a, engine.WithMeta("web-1 pid 7"))
	defer l.Release(ctx)
	if err := c.Nodes[0].Set(ctx, "redlease:{job:7}", "someone", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.Nodes[1].Set(ctx, "t[1]:{x}", "other", 5*time.Second); err != nil {
		t.Fatal(err)
	}

	var got locksJSON
	wantCode(t, "locks", cliJSON(t, &got, "locks", "-nodes", join(a...)), exitOK)
	if len(got.Locks) != 2 || got.Quorum != 2 {
		t.Fatalf("locks: %+v; want invoice:42 and job:7, quorum 2", got)
	}
	inv, job := got.Locks[0], got.Locks[1]
	if inv.Resource != "invoice:42" || !inv.Held || inv.Owner != l.Value() || inv.Meta != "web-1 pid 7" || inv.Fence != l.Token() ||
		len(inv.Keys) < 2 {
		t.Errorf("invoice:42: %+v; want held by %s on at least 2 nodes, fence %d", inv, l.Value(), l.Token())
	}
	for _, k := range inv.Keys {
		if k.Value != l.Value() || k.TTLMillis <= 0 || k.TTLMillis > engine.DefaultTTL.Milliseconds() {
			t.Errorf("invoice:42 key %+v; want value %s, TTL within %v", k, l.Value(), engine.DefaultTTL)
		}
	}
	if job.Resource != "job:7" || job.Held || job.Meta != "" || len(job.Keys) != 1 || job.Keys[0].Node != a[0] || job.Keys[0].Value != "someone" ||
		job.Keys[0].TTLMillis <= 0 || job.Keys[0].TTLMillis > 5000 {
		t.Errorf("job:7: %+v; want debris on %s only, value someone, TTL within 5s", job, a[0])
	}

	wantCode(t, "locks invoice:*", cliJSON(t, &got, "locks", "-nodes", join(a...), "invoice:*"), exitOK)
	if len(got.Locks) != 1 || got.Locks[0].Resource != "invoice:42" {
		t.Errorf("locks invoice:*: %+v; want invoice:42 alone", got.Locks)
	}
	wantCode(t, "locks -prefix t[1]:", cliJSON(t, &got, "locks", "-nodes", join(a...), "-prefix", "t[1]:"), exitOK)
	if len(got.Locks) != 1 || got.Locks[0].Resource != "x" {
		t.Errorf("locks -prefix t[1]:: %+v; want x alone", got.Locks)
	}

	if err := c.Nodes[2].Kill(); err != nil {
		t.Fatal(err)
	}
	code, out, _ := cli(t, "", nil, "locks", "-nodes", join(a...))
	wantCode(t, "locks with a dead node", code, exitFail)
	for _, want := range []string{"RESOURCE", "invoice:42", "held", "job:7", "debris", "1/3 (1)", a[2] + ": "} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	// The owner without its meta, which has a column of its own.
	random, _, _ := strings.Cut(l.Value(), "|")
	for _, want := range []string{`OWNER +META +NODES`, random + ` +"web-1 pid 7" +2/3`, `someone +- +1/3 \(1\)`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("table lacks %s", want)
		}
	}
}

// holdInvoice marks nodes new, and acquires invoice:42 on them, with a
// fencing token and opts, on an engine that the test closes.
func holdInvoice(t *testing.T, nodes []string, opts ...engine.Option) (*engine.Engine, *engine.Lease) {
	t.Helper()
	ctx := context.Background()
	if err := engine.MarkNew(ctx, engine.Config{Nodes: nodes}); err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Config{Nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	l, err := e.Acquire(ctx, "invoice:42", append(opts, engine.WithFencing())...)
	if err != nil {
		t.Fatal(err)
	}
	return e, l
}

// TestMarkNew: refused while any node holds a lock key; asks unless -yes;
// marks each node with its own run id; leaves trusted nodes; refuses a
// replica and a dead node.
func TestMarkNew(t *testing.T) {
	c := redisproc.Start(t, 4)
	a := c.Addrs()
	nodes := join(a[:3]...)
	ctx := context.Background()
	epochOf := func(i int) string {
		v, _, err := c.Nodes[i].Get(ctx, engine.DefaultKeyPrefix+"lineage")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	if err := c.Nodes[1].Set(ctx, "redlease:{r}", "someone", time.Minute); err != nil {
		t.Fatal(err)
	}
	var got markJSON
	wantCode(t, "mark-new with a lock key on node 2", cliJSON(t, &got, "mark-new", "-yes", "-nodes", nodes), exitFail)
	if len(got.Marked) != 0 || len(got.Refused) != 3 {
		t.Errorf("mark-new with a lock key: %+v; want all three refused", got)
	}
	for _, r := range got.Refused {
		if !strings.Contains(r.Why, strings.TrimPrefix(engine.ErrLiveLocks.Error(), "redlease: ")) {
			t.Errorf("mark-new with a lock key refused %s for %q, want the live locks", r.Node, r.Why)
		}
	}
	if _, err := c.Nodes[1].Do(ctx, "DEL", "redlease:{r}"); err != nil {
		t.Fatal(err)
	}

	code, _, _ := cli(t, "no\n", nil, "mark-new", "-nodes", nodes)
	wantCode(t, "mark-new answered no", code, exitFail)
	code, _, _ = cli(t, "", nil, "mark-new", "-nodes", nodes)
	wantCode(t, "mark-new without an answer", code, exitFail)
	for i := range 3 {
		if e := epochOf(i); e != "" {
			t.Fatalf("node %d has epoch marker %q before the operator said yes", i+1, e)
		}
	}

	code, _, stderr := cli(t, "yes\n", nil, "mark-new", "-nodes", nodes)
	wantCode(t, "mark-new answered yes", code, exitOK)
	if !strings.Contains(stderr, "Type yes") {
		t.Errorf("mark-new did not ask: stderr %q", stderr)
	}
	for i := range 3 {
		if runID, _ := c.Nodes[i].RunID(ctx); !strings.Contains(epochOf(i), " "+runID+" ") {
			t.Errorf("node %d: epoch marker %q, want its lineage, run id %s", i+1, epochOf(i), runID)
		}
	}

	wantCode(t, "mark-new again", cliJSON(t, &got, "mark-new", "-yes", "-nodes", nodes), exitOK)
	if len(got.Trusted) != 3 || len(got.Marked) != 0 {
		t.Errorf("mark-new again: %+v; want all three already trusted", got)
	}

	if _, err := c.Nodes[3].Do(ctx, "REPLICAOF", "127.0.0.1", strings.Split(a[2], ":")[1]); err != nil {
		t.Fatal(err)
	}
	if err := c.Nodes[2].Kill(); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "mark-new with a replica and a dead node", cliJSON(t, &got, "mark-new", "-yes", "-nodes", join(a[0], a[2], a[3])), exitFail)
	if len(got.Refused) != 2 || !strings.Contains(got.Refused[0].Why, "unreachable") || !strings.Contains(got.Refused[1].Why, "replica") {
		t.Errorf("mark-new with a replica and a dead node: %+v; want both refused", got)
	}
}

// TestAuth: -user and the password from the environment reach nodes that
// require them; a wrong password shows as unreachable, with the server's
// word.
func TestAuth(t *testing.T) {
	c := redisproc.Start(t, 3)
	ctx := context.Background()
	for _, n := range c.Nodes {
		if _, err := n.Do(ctx, "ACL", "SETUSER", "ops", "on", ">s3cret", "~*", "+@all"); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"nodes", "-nodes", join(c.Addrs()...), "-user", "ops", "-password-env", "OPS_PASSWORD", "-json"}
	for _, tc := range []struct {
		password, state string
	}{
		{"s3cret", stateQuarantined}, // fresh nodes: reached, not yet trusted
		{"wrong", stateUnreachable},
	} {
		_, out, _ := cli(t, "", map[string]string{"OPS_PASSWORD": tc.password}, args...)
		var got nodesJSON
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		for _, n := range got.Nodes {
			if n.State != tc.state {
				t.Errorf("password %q: node %s %s (%s), want %s", tc.password, n.Node, n.State, n.Error, tc.state)
			}
			if tc.state == stateUnreachable && !strings.Contains(n.Error, "WRONGPASS") {
				t.Errorf("password %q: error %q does not carry the server's WRONGPASS", tc.password, n.Error)
			}
		}
	}
}

// TestTLS: with -ca-file the commands reach a node over TLS and verify its
// certificate; with -tls alone an unknown CA is refused, and without -tls
// the TLS port does not answer.
func TestTLS(t *testing.T) {
	c := redisproc.Start(t, 1)
	dir := t.TempDir()
	caFile, certFile, keyFile := writeTestCerts(t, dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	ctx := context.Background()
	for _, kv := range [][2]string{{"tls-cert-file", certFile}, {"tls-key-file", keyFile}, {"tls-ca-cert-file", caFile},
		{"tls-auth-clients", "no"}, {"tls-port", port}} {
		if _, err := c.Nodes[0].Do(ctx, "CONFIG", "SET", kv[0], kv[1]); err != nil {
			t.Fatalf("CONFIG SET %s: %v", kv[0], err)
		}
	}
	addr := "127.0.0.1:" + port
	for _, tc := range []struct {
		flags       []string
		state, want string // want: in the error
	}{
		{[]string{"-ca-file", caFile}, stateQuarantined, ""}, // reached; fresh, so not yet trusted
		{[]string{"-tls"}, stateUnreachable, "certificate"},
		{nil, stateUnreachable, ""},
	} {
		var got nodesJSON
		cliJSON(t, &got, append([]string{"nodes", "-nodes", addr, "-timeout", "5s"}, tc.flags...)...)
		if len(got.Nodes) != 1 || got.Nodes[0].State != tc.state || !strings.Contains(got.Nodes[0].Error, tc.want) {
			t.Errorf("nodes %v: %+v; want state %s, error with %q", tc.flags, got.Nodes, tc.state, tc.want)
		}
	}
	var locks locksJSON
	wantCode(t, "locks over TLS", cliJSON(t, &locks, "locks", "-nodes", addr, "-ca-file", caFile), exitOK)
}

// writeTestCerts writes a CA and a certificate for 127.0.0.1 signed by it,
// PEM-encoded, into dir.
func writeTestCerts(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, kind string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	now := time.Now()
	caKey, key := newKey(), newKey()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redlease test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("cert.pem", "CERTIFICATE", leafDER), write("key.pem", "EC PRIVATE KEY", keyDER)
}

// -nodes separates entries of Config.Nodes with spaces, and host:port
// entries with commas too; a sentinel:// or cluster:// entry runs to the
// next space; -node gives one entry each, after those of -nodes.
func TestNodesSyntax(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string // nil: a usage error
	}{
		{[]string{"-nodes", "127.0.0.1:1,127.0.0.1:2"}, []string{"127.0.0.1:1", "127.0.0.1:2"}},
		{[]string{"-nodes", "cluster://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3 127.0.0.1:4\t127.0.0.1:5"},
			[]string{"cluster://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "127.0.0.1:4", "127.0.0.1:5"}},
		// What Config.Nodes takes as one entry is one node.
		{[]string{"-nodes", "cluster://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3,127.0.0.1:4,127.0.0.1:5"},
			[]string{"cluster://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3,127.0.0.1:4,127.0.0.1:5"}},
		{[]string{"-nodes", " 127.0.0.1:1 sentinel://127.0.0.1:2,127.0.0.1:3/m 127.0.0.1:4,sentinel-host:5 "},
			[]string{"127.0.0.1:1", "sentinel://127.0.0.1:2,127.0.0.1:3/m", "127.0.0.1:4", "sentinel-host:5"}},
		{[]string{"-node", "cluster://127.0.0.1:1,127.0.0.1:2", "-node", "127.0.0.1:4", "-nodes", "127.0.0.1:5"},
			[]string{"127.0.0.1:5", "cluster://127.0.0.1:1,127.0.0.1:2", "127.0.0.1:4"}},
		// Ambiguous: is 127.0.0.1:2 the cluster's or a node of its own?
		{[]string{"-nodes", "127.0.0.1:1,cluster://127.0.0.1:2,127.0.0.1:3"}, nil},
		{[]string{"-nodes", "127.0.0.1:1,sentinel://127.0.0.1:2/m"}, nil},
		{[]string{"-nodes", "  "}, nil},
	} {
		o, _, err := parseFlags(commands[0], tc.args, io.Discard, func(string) string { return "" })
		var cfg engine.Config
		if err == nil {
			cfg, err = o.config()
		}
		switch {
		case tc.want == nil && err == nil:
			t.Errorf("%q: nodes %q; want a usage error", tc.args, cfg.Nodes)
		case tc.want != nil && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.want != nil && !slices.Equal(cfg.Nodes, tc.want):
			t.Errorf("%q: nodes %q, want %q", tc.args, cfg.Nodes, tc.want)
		}
	}
	// $REDLEASE_NODES is -nodes' default when neither flag is given.
	env := func(string) string { return "127.0.0.1:1 127.0.0.1:2" }
	for args, want := range map[string][]string{"": {"127.0.0.1:1", "127.0.0.1:2"}, "127.0.0.1:9": {"127.0.0.1:9"}} {
		var flags []string
		if args != "" {
			flags = []string{"-node", args}
		}
		o, _, err := parseFlags(commands[0], flags, io.Discard, env)
		if err != nil {
			t.Fatal(err)
		}
		if cfg, _ := o.config(); !slices.Equal(cfg.Nodes, want) {
			t.Errorf("$REDLEASE_NODES with %q: nodes %q, want %q", flags, cfg.Nodes, want)
		}
	}
}

// A master of a Redis Cluster given as a node of its own (host:port) is
// refused, as New refuses it: nodes calls it refused, mark-new marks
// nothing, and both name the cluster:// form. Named as cluster://, and
// in the same command, the cluster is marked.
func TestClusterMasterAsNode(t *testing.T) {
	c := redisproc.StartRedisClusterT(t, 3, 0)
	masters := c.Addrs()
	_, err := engine.New(engine.Config{Nodes: masters[:1]})
	if !errors.Is(err, engine.ErrClusterMaster) {
		t.Fatalf("New with a cluster master as a node: %v; want ErrClusterMaster", err)
	}
	// Each master: the epoch marker's slot is served by one of them, so
	// that one's probe succeeds; the others' fail with MOVED.
	var got nodesJSON
	wantCode(t, "nodes", cliJSON(t, &got, "nodes", "-nodes", strings.Join(masters, " ")), exitFail)
	for _, n := range got.Nodes {
		if n.State != stateRefused || !strings.Contains(n.Error, "cluster://"+n.Node) {
			t.Errorf("cluster master as a node: %+v; want refused, naming cluster://%s", n, n.Node)
		}
	}
	var marked markJSON
	wantCode(t, "mark-new", cliJSON(t, &marked, "mark-new", "-yes", "-node", "cluster://"+masters[0], "-node", masters[1]), exitFail)
	if len(marked.Marked) != 1 || marked.Marked[0] != "cluster://"+masters[0] ||
		len(marked.Refused) != 1 || marked.Refused[0].Node != masters[1] || !strings.Contains(marked.Refused[0].Why, "a master of a Redis Cluster") {
		t.Errorf("mark-new: %+v; want the cluster marked, its master as a node refused as one", marked)
	}
	code, _, stderr := cli(t, "", nil, "mark-new", "-h")
	if code != exitOK || !strings.Contains(stderr, "cluster://host:port") || !strings.Contains(stderr, "sentinel://host:port") {
		t.Errorf("mark-new -h (%d): %q; want the cluster:// and sentinel:// forms", code, stderr)
	}
}

// A Sentinel master set is one node: nodes names the master its sentinels
// name now, mark-new marks it, locks finds a lease's key there, unlock
// deletes it, and after a failover nodes names the new master.
func TestSentinelNode(t *testing.T) {
	s := redisproc.StartSentinel(t, 1, 3)
	spec := node.Target{MasterSet: s.Name, Sentinels: s.SentinelAddrs()}.String()
	master, err := s.Master(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var got nodesJSON
	wantCode(t, "nodes", cliJSON(t, &got, "nodes", "-nodes", spec), exitFail) // fresh: quarantined
	if n := got.Nodes[0]; n.Node != spec || n.Server != master.Addr() || n.Role != "master" ||
		len(n.Replicas) != 1 || n.Replicas[0].Addr == master.Addr() {
		t.Fatalf("master set: %+v; want node %s, server %s, master, with its one replica", n, spec, master.Addr())
	}
	code, _, _ := cli(t, "", nil, "mark-new", "-yes", "-nodes", spec)
	wantCode(t, "mark-new", code, exitOK)

	lockAndUnlock(t, spec, master)

	next, err := s.Failover(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	cliJSON(t, &got, "nodes", "-nodes", spec)
	if n := got.Nodes[0]; n.Server != next.Addr() {
		t.Fatalf("after the failover: %+v; want server %s", n, next.Addr())
	}
}

// A Redis Cluster is one node: nodes shows its masters below it, mark-new
// marks them all, locks and unlock find a lease's key on its slot's
// master.
func TestClusterNode(t *testing.T) {
	c := redisproc.StartRedisClusterT(t, 3, 1)
	spec := node.Target{Cluster: c.Addrs()[:1]}.String()
	var got nodesJSON
	wantCode(t, "nodes", cliJSON(t, &got, "nodes", "-nodes", spec), exitFail) // fresh: quarantined
	if n := got.Nodes[0]; n.Node != spec || n.Role != "cluster" || len(n.Shards) != 3 || n.State != stateQuarantined {
		t.Fatalf("cluster: %+v; want a quarantined cluster of 3 masters", n)
	}
	code, _, _ := cli(t, "", nil, "mark-new", "-yes", "-nodes", spec)
	wantCode(t, "mark-new", code, exitOK)
	wantCode(t, "nodes after mark-new", cliJSON(t, &got, "nodes", "-nodes", spec), exitOK)
	slots := 0
	for _, s := range got.Nodes[0].Shards {
		if s.State != stateServing || s.Role != "master" || s.RunID == "" || len(s.Replicas) != 1 {
			t.Errorf("shard %+v: want a serving master with its replica", s)
		}
		slots += s.Slots
	}
	if slots != 16384 {
		t.Errorf("the shards serve %d slots, want 16384", slots)
	}
	code, out, _ := cli(t, "", nil, "nodes", "-nodes", spec)
	if code != exitOK || strings.Count(out, " slots)") != 3 || strings.Count(out, " replica ") != 3 {
		t.Errorf("nodes table (%d):\n%s\nwant a row per master and one per replica", code, out)
	}
	t.Logf("nodes:\n%s", out)

	master, err := c.MasterOf(t.Context(), hashslot.Of("redlease:{job}"))
	if err != nil {
		t.Fatal(err)
	}
	lockAndUnlock(t, spec, master)
}

// lockAndUnlock has an engine on the node spec take "job": locks must
// find it held by the lease, and unlock must delete its key from master,
// the server that holds it.
func lockAndUnlock(t *testing.T, spec string, master *redisproc.Node) {
	t.Helper()
	e, err := engine.New(engine.Config{Nodes: []string{spec}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	l, err := e.Acquire(t.Context(), "job")
	if err != nil {
		t.Fatal(err)
	}
	var locks locksJSON
	wantCode(t, "locks", cliJSON(t, &locks, "locks", "-nodes", spec), exitOK)
	if len(locks.Locks) != 1 || locks.Locks[0].Resource != "job" || locks.Locks[0].Owner != l.Value() {
		t.Fatalf("locks: %+v; want job held by the lease", locks)
	}
	code, _, _ := cli(t, "", nil, "unlock", "-yes", "-reason", "test", "-nodes", spec, "job")
	wantCode(t, "unlock", code, exitOK)
	if _, ok, err := master.Get(t.Context(), "redlease:{job}"); err != nil || ok {
		t.Fatalf("after unlock the master still has the key (%v)", err)
	}
}

// A lock key left on a cluster master that does not serve its slot (a
// migration aborted after its keys moved) cannot be read: locks still
// lists what it can (a lease held), names the key it cannot, and exits 1;
// mark-new refuses for the lock keys, naming that one too.
func TestStrayClusterKey(t *testing.T) {
	c := redisproc.StartRedisClusterT(t, 3, 0)
	spec := node.Target{Cluster: c.Addrs()[:1]}.String()
	ctx := t.Context()
	_, l := holdInvoice(t, []string{spec})
	defer l.Release(ctx)

	key := "redlease:{stray}"
	slot := hashslot.Of(key)
	owner, err := c.MasterOf(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.Set(ctx, key, "gone", time.Minute); err != nil {
		t.Fatal(err)
	}
	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	to := masters[0]
	if to == owner {
		to = masters[1]
	}
	m, err := c.StartSlotMigration(ctx, slot, to, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []*redisproc.Node{m.From, m.To} { // aborted: the key stays on To
		if _, err := n.Do(ctx, "CLUSTER", "SETSLOT", strconv.Itoa(slot), "STABLE"); err != nil {
			t.Fatal(err)
		}
	}

	var got locksJSON
	wantCode(t, "locks", cliJSON(t, &got, "locks", "-nodes", spec), exitFail)
	if len(got.Locks) != 2 || got.Locks[0].Resource != "invoice:42" || got.Locks[0].Owner != l.Value() ||
		got.Locks[1].Resource != "stray" || got.Locks[1].Held || len(got.Locks[1].Keys) != 1 || got.Locks[1].Keys[0].Error == "" {
		t.Errorf("locks: %+v; want invoice:42 held by the lease, and stray's key unreadable", got.Locks)
	}
	if len(got.Errors) != 1 || !strings.Contains(got.Errors[0], to.Addr()) || !strings.Contains(got.Errors[0], key) ||
		!strings.Contains(got.Errors[0], strconv.Itoa(slot)) {
		t.Errorf("locks errors: %q; want one naming master %s, key %s and slot %d", got.Errors, to.Addr(), key, slot)
	}
	code, out, _ := cli(t, "", nil, "locks", "-nodes", spec)
	if code != exitFail || !strings.Contains(out, "2 resources: 1 held") || !strings.Contains(out, "unreadable") {
		t.Errorf("locks table (%d):\n%s\nwant both resources, stray's TTL unreadable", code, out)
	}

	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var marked markJSON
	wantCode(t, "mark-new", cliJSON(t, &marked, "mark-new", "-yes", "-nodes", spec), exitOK) // trusted: nothing to do
	err = engine.CheckNew(ctx, engine.Config{Nodes: []string{spec}})
	if !errors.Is(err, engine.ErrLiveLocks) || !strings.Contains(err.Error(), key) {
		t.Errorf("CheckNew: %v; want ErrLiveLocks, naming %s", err, key)
	}
}
