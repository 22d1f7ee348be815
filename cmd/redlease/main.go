// Command redlease looks at the Redis nodes of a redlease deployment,
// marks new nodes and forces locks free, for operators.
//
//	redlease nodes    -nodes a,b,c            each node: state, role, run id, uptime, trusted, quarantine, RTT
//	redlease locks    -nodes a,b,c [PATTERN]  the lock keys: holders, owner, meta, TTL per node, fence, held or debris
//	redlease mark-new -nodes a,b,c [-yes]     mark nodes as new, so that engines use them at once
//	redlease unlock   -nodes a,b,c -reason WHY [-yes] RESOURCE
//	                                          force a lock free: delete its lock key where it holds the value seen
//
// The nodes are given as engine.Config.Nodes takes them: -node once per
// entry (host:port, sentinel://host:port[,host:port...]/master-set or
// cluster://host:port[,host:port...]), or -nodes (or $REDLEASE_NODES)
// with the entries separated by spaces, where commas separate host:port
// entries too: -nodes "a:1,b:1 cluster://c:1,c:2 sentinel://s:1,s:2/m".
//
// nodes exits 1 when fewer than a quorum of the nodes can serve an acquire
// now; locks exits 1 when a node could not be scanned, or a key read (it
// lists what it read, and names what it could not); mark-new exits 1
// when it marked fewer than the nodes asked for; unlock exits 1 when a node
// could not be reached, or it was not confirmed. Usage errors exit 2.
// Run any command with -h for its flags.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/redlease/redlease/engine"
	"github.com/redlease/redlease/node"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1 // the command ran and found a problem, or failed
	exitUsage = 2
)

// A command of the CLI.
type command struct {
	name, args, summary string
	run                 func(ctx context.Context, o *options, cfg engine.Config, args []string, io ios) int
}

var commands = []command{
	{"nodes", "", "each node: state, role, run id, uptime, whether its data is trusted, the restart quarantine an engine would apply now, round trip; exits 1 when fewer than a quorum can serve", runNodes},
	{"locks", "[PATTERN]", "the lock keys of resources matching PATTERN (a Redis glob, default *), read with SCAN: which nodes hold each, owner, its meta (who holds it: engine.WithMeta), TTL per node, fence counter, and whether a quorum holds it (held) or a minority (debris of a failed attempt)", runLocks},
	{"mark-new", "", "mark the nodes as new (engine.MarkNew), so that engines use them at once instead of sitting out a restart quarantine; asks first unless -yes, and refuses while any node holds a lock key (leases may be live)", runMarkNew},
	{"unlock", "RESOURCE", "force RESOURCE's lock free, for a holder dead or stuck: shows which nodes hold its lock key (value SHA1, TTL left), asks unless -yes (and refuses when stdin is not a terminal), then deletes the key on each node where it still holds the value seen, announcing it as a release does: callers already waiting wake at once, in their order; the fence counter stays. Needs -reason, printed with the outcome", runUnlock},
}

// ios are the command's standard streams.
type ios struct {
	in       io.Reader
	out, err io.Writer
}

func run(ctx context.Context, args []string, in io.Reader, out, errOut io.Writer, getenv func(string) string) int {
	streams := ios{in: in, out: out, err: errOut}
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		usage(errOut)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		o, rest, err := parseFlags(c, args[1:], errOut, getenv)
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		if err != nil {
			fmt.Fprintf(errOut, "redlease %s: %v\n", c.name, err)
			return exitUsage
		}
		cfg, err := o.config()
		if err != nil {
			fmt.Fprintf(errOut, "redlease %s: %v\n", c.name, err)
			return exitUsage
		}
		return c.run(ctx, o, cfg, rest, streams)
	}
	fmt.Fprintf(errOut, "redlease: unknown command %q\n\n", args[0])
	usage(errOut)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "redlease: look at the Redis nodes of a redlease deployment, mark new ones, force locks free.")
	fmt.Fprintln(w, "\nUsage:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %s\n    \t%s\n", strings.TrimSpace("redlease "+c.name+" [flags] "+c.args), c.summary)
	}
	fmt.Fprintln(w, "\nRun 'redlease COMMAND -h' for the flags.")
}

// options are the flags every command takes.
type options struct {
	nodes       string   // -nodes: entries separated by spaces
	node        []string // -node, once per entry
	prefix      string
	quarantine  time.Duration
	timeout     time.Duration
	user        string
	passwordEnv string
	tls         bool
	caFile      string
	json        bool
	yes         bool   // mark-new, unlock
	reason      string // unlock

	password string // from the environment
}

func parseFlags(c command, args []string, errOut io.Writer, getenv func(string) string) (*options, []string, error) {
	o := &options{}
	fs := flag.NewFlagSet("redlease "+c.name, flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.StringVar(&o.nodes, "nodes", "", "the nodes, separated by spaces, each one as an entry of engine.Config.Nodes; commas separate host:port entries too: \"a:1,b:1 cluster://c:1,c:2 sentinel://s:1,s:2/m\" (default $REDLEASE_NODES, when there is no -node)")
	fs.Func("node", "one node, exactly as an entry of engine.Config.Nodes: a master's host:port, a Sentinel master set as sentinel://host:port[,host:port...]/master-set, or a Redis Cluster as cluster://host:port[,host:port...] (some of its nodes); repeat it for each node", func(s string) error {
		o.node = append(o.node, s)
		return nil
	})
	fs.StringVar(&o.prefix, "prefix", engine.DefaultKeyPrefix, "the engines' KeyPrefix")
	fs.DurationVar(&o.quarantine, "quarantine", engine.DefaultTTL, "the engines' RestartQuarantine (their MaxTTL unless set; by default TTL, 10s): how long a node that may have lost its data sits out from when an engine sees it")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Second, "bound on connecting to each node and on each command")
	fs.StringVar(&o.user, "user", "", "ACL user name (default: the default user)")
	fs.StringVar(&o.passwordEnv, "password-env", "REDLEASE_PASSWORD", "name of the environment variable that holds the password (none when it is unset)")
	fs.BoolVar(&o.tls, "tls", false, "connect with TLS, verifying the nodes' certificates against the system's roots or -ca-file")
	fs.StringVar(&o.caFile, "ca-file", "", "PEM file of the CA certificates that sign the nodes' certificates (implies -tls)")
	fs.BoolVar(&o.json, "json", false, "print JSON instead of a table")
	switch c.name {
	case "mark-new":
		fs.BoolVar(&o.yes, "yes", false, "mark without asking")
	case "unlock":
		fs.BoolVar(&o.yes, "yes", false, "delete without asking (needed when stdin is not a terminal)")
		fs.StringVar(&o.reason, "reason", "", "why the lock is forced (required; printed with the outcome)")
	}
	fs.Usage = func() {
		fmt.Fprintf(errOut, "Usage: %s\n\n%s.\n\nFlags:\n", strings.TrimSpace("redlease "+c.name+" [flags] "+c.args), c.summary)
		fs.PrintDefaults()
	}
	// Flags may come before and after the positional arguments.
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if c.args == "" && len(rest) > 0 {
		return nil, nil, fmt.Errorf("unexpected arguments %q", rest)
	}
	if len(rest) > 1 {
		return nil, nil, fmt.Errorf("one %s at most, got %q", strings.Trim(c.args, "[]"), rest)
	}
	if o.nodes == "" && len(o.node) == 0 {
		o.nodes = getenv("REDLEASE_NODES")
	}
	if strings.TrimSpace(o.nodes) == "" && len(o.node) == 0 {
		return nil, nil, errors.New("-node (once per node) or -nodes (or $REDLEASE_NODES) is required: every node of the deployment")
	}
	if o.quarantine <= 0 {
		return nil, nil, fmt.Errorf("-quarantine must be > 0, got %v", o.quarantine)
	}
	if o.timeout <= 0 {
		return nil, nil, fmt.Errorf("-timeout must be > 0, got %v", o.timeout)
	}
	if o.passwordEnv != "" {
		o.password = getenv(o.passwordEnv)
	}
	return o, rest, nil
}

// splitNodes reads -nodes: entries of Config.Nodes separated by spaces.
// A word without a scheme is split at its commas as well (host:port never
// holds one); a sentinel:// or cluster:// entry runs to the next space,
// as its own commas separate its addresses. A scheme after a comma is
// refused: "a:1,cluster://b:1,c:1" could mean c:1 is the cluster's or a
// node of its own.
func splitNodes(s string) ([]string, error) {
	var nodes []string
	for _, word := range strings.Fields(s) {
		if strings.HasPrefix(word, node.SentinelScheme) || strings.HasPrefix(word, node.ClusterScheme) {
			nodes = append(nodes, word)
			continue
		}
		if strings.Contains(word, "://") {
			return nil, fmt.Errorf("-nodes %q: a space, not a comma, goes before a sentinel:// or cluster:// node (its own commas separate its addresses); or give each node a -node", word)
		}
		nodes = append(nodes, strings.Split(word, ",")...)
	}
	return nodes, nil
}

// config is the engine configuration the flags describe: the engines'
// nodes, key prefix and quarantine, and how to reach the nodes.
func (o *options) config() (engine.Config, error) {
	cfg := engine.Config{
		KeyPrefix:      o.prefix,
		TTL:            min(engine.DefaultTTL, o.quarantine),
		MaxTTL:         o.quarantine,
		ConnectTimeout: o.timeout,
		Client: rueidis.ClientOption{
			ClientName:       "redlease-cli",
			Username:         o.user,
			Password:         o.password,
			ConnWriteTimeout: o.timeout,
		},
	}
	nodes, err := splitNodes(o.nodes)
	if err != nil {
		return cfg, err
	}
	cfg.Nodes = append(nodes, o.node...)
	if o.tls || o.caFile != "" {
		cfg.Client.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		if o.caFile != "" {
			pem, err := os.ReadFile(o.caFile)
			if err != nil {
				return cfg, fmt.Errorf("-ca-file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return cfg, fmt.Errorf("-ca-file %s: no PEM certificate in it", o.caFile)
			}
			cfg.Client.TLSConfig.RootCAs = pool
		}
	}
	return cfg, nil
}

// printJSON writes v indented, for -json.
func printJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
