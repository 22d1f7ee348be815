// Package redisproc starts real redis-server processes on loopback for tests
// and benchmarks: independent nodes (Cluster), Sentinel master sets
// (SentinelSet: a master, its replicas and the sentinels that watch them
// and fail it over for real), or a Redis Cluster (RedisCluster: masters
// with replicas, the hash slots spread over the masters). It breaks them
// on demand: kill, pause (SIGSTOP), resume (SIGCONT), stall (CLIENT
// PAUSE), restart on the same port with an empty dataset or from a
// snapshot, run a node's wall clock ahead of the host's, fail a master set
// or a Redis Cluster's master over, if asked to a replica that lacks the
// master's latest writes, and move a Redis Cluster's slot, or leave it
// half moved.
//
// Every process listens only on 127.0.0.1, accepts DEBUG from local
// connections (--enable-debug-command local; sentinels have no DEBUG), and
// writes its output to a log file in its own temporary directory. Nothing
// is persisted on its own (no save points, no AOF): a snapshot exists only
// once Save wrote one, and only RestartFromSnapshot loads it; Restart
// always starts empty. The servers and sentinels of a master set also
// keep a config file there, which they rewrite and which survives their
// restarts (see SentinelSet), and so do the servers of a Redis Cluster
// with their cluster state, nodes.conf (see RedisCluster).
// Close kills every process and removes the directories; on Linux the
// processes are also killed by the kernel if the parent process dies
// first.
//
// Clock jumps (RestartClockAhead, SetClockAhead; Linux only) preload a
// small library of this package, built from clockshim/clockshim.c with the
// system C compiler on first use, that adds an offset to the process's
// gettimeofday and time: the calls redis-server 7.0 reads the wall clock
// with, for key expiry and TIME. libfaketime cannot do it: version 0.9.10
// deadlocks redis-server builds linked with jemalloc (Debian's), whose
// first clock_gettime re-enters libfaketime's initialisation.
//
// # Set-up
//
// When redis-server (or, for the clock shim, the C compiler cc) is not on
// PATH, redisproc installs it from Debian's packages if it can: running as
// root, with apt-get on PATH, and NoInstallEnv unset. It prints one line
// to stderr, runs apt-get update and apt-get install -y (with
// DEBIAN_FRONTEND=noninteractive) and stops the system redis-server the
// package may start. Parallel test processes install once: under a file
// lock in os.TempDir(), and whoever gets the lock looks again first.
// Otherwise it fails with the command to run.
package redisproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/redlease/redlease/internal/redisinfo"
)

const (
	// readyTimeout bounds how long a new process may take to answer PING.
	readyTimeout = 10 * time.Second
	// bindAttempts is how often a start is tried when the port is busy.
	bindAttempts = 20
	// logTail is how many bytes of the log a start error quotes.
	logTail = 2048
)

var errClosed = errors.New("redisproc: node is closed")

// errBusy marks a start that failed because the port was taken.
var errBusy = errors.New("address already in use")

// Cluster is a set of independent redis-server processes (not a Redis
// Cluster, which RedisCluster is: the nodes know nothing of each other).
type Cluster struct {
	// Nodes are the processes, in start order.
	Nodes []*Node
}

// StartNodes starts n redis-server processes on free loopback ports and
// waits until each answers PING. On any error it stops what it started.
// A missing redis-server is installed first when possible (see Set-up in
// the package documentation).
func StartNodes(n int) (*Cluster, error) { return startNodes(n, true) }

// StartBenchNodes is StartNodes with DEBUG off, as Redis 7 ships it: the
// engines then skip a check that only a node able to DEBUG RELOAD needs
// (see package node), as they do in production.
func StartBenchNodes(n int) (*Cluster, error) { return startNodes(n, false) }

func startNodes(n int, debug bool) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("redisproc: need at least one node, got %d", n)
	}
	bin, err := system.find(redisServerTool)
	if err != nil {
		return nil, err
	}
	c := &Cluster{}
	for range n {
		node, err := newNode(bin, debug)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, node)
	}
	return c, nil
}

// TB is the part of testing.TB that Start uses. The package does not
// import testing, so that the safety command does not link it.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// Start is StartNodes for tests: it fails the test on error (it never
// skips) and registers Close with t.Cleanup.
func Start(t TB, n int) *Cluster {
	t.Helper()
	c, err := StartNodes(n)
	return started(t, c, err)
}

// started is what the Start functions for tests make of a start: the
// test fails on err (it never skips), and v closes with the test.
func started[T interface{ Close() }](t TB, v T, err error) T {
	t.Helper()
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(v.Close)
	return v
}

// Addrs returns the "127.0.0.1:port" address of every node.
func (c *Cluster) Addrs() []string {
	return addrsOf(c.Nodes)
}

// addrsOf returns the "127.0.0.1:port" address of every node of nodes.
func addrsOf(nodes []*Node) []string {
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Close kills every process (paused ones too), waits for them, closes the
// clients and removes the temporary directories. It is idempotent.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		n.close()
	}
}

// Node is one redis-server process. Its port stays the same across Restart.
// All methods are safe for concurrent use.
type Node struct {
	bin   string
	port  int
	dir   string
	debug bool // DEBUG allowed from local connections
	// conf, if not empty, is the path of a config file in dir, passed
	// first on the command line: the process may rewrite it (CONFIG
	// REWRITE, or a sentinel saving its state) and every restart loads
	// the rewritten file.
	conf string
	// args are more redis-server arguments, after the package's own (so
	// they override them and conf), on every start.
	args []string
	// started, if not nil, runs after every start once the process
	// answers, with n.mu held: it may talk to the process on a connection
	// of its own, not through Do (which takes n.mu). An error fails the
	// start.
	started func(addr string) error

	mu     sync.Mutex
	cmd    *exec.Cmd     // nil while not running
	exited chan struct{} // closed when cmd.Wait returns
	client rueidis.Client
	gen    int        // bumped whenever the process is killed or replaced
	clock  *clockFile // the node's clock offset; nil: the host's clock
	closed bool
}

// newNode starts a process on a free port, picking another port if the
// chosen one is taken before redis-server binds it.
func newNode(bin string, debug bool) (*Node, error) {
	return startNode(&Node{bin: bin, debug: debug}, nil)
}

// startNode gives n a new temporary directory and starts it on a free
// port, as newNode does. prepare, if not nil, runs once the directory
// exists, before the first start: it may write a config file there and
// set n.conf, n.args and n.started.
func startNode(n *Node, prepare func(n *Node) error) (*Node, error) {
	dir, err := os.MkdirTemp("", "redisproc-")
	if err != nil {
		return nil, fmt.Errorf("redisproc: %w", err)
	}
	n.dir = dir
	if prepare != nil {
		if err := prepare(n); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	for range bindAttempts {
		if n.port, err = freePort(); err != nil {
			break
		}
		if err = n.launch(); !errors.Is(err, errBusy) {
			break
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return n, nil
}

// freePort returns a loopback TCP port that was free a moment ago, below
// the kernel's ephemeral range where there is room: a node restarts on
// its port, and a port the kernel hands out as the source of outgoing
// connections may be some client's while the node is down (a restart
// failed with "address already in use" in a clean-clone CI run).
func freePort() (int, error) {
	if lo := ephemeralLow(); lo > firstPort+1000 {
		for range 100 {
			p := firstPort + rand.IntN(lo-firstPort)
			if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
				l.Close()
				return p, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redisproc: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// firstPort is the lowest port freePort picks.
const firstPort = 10000

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default when it cannot be read).
func ephemeralLow() int {
	const linux = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return linux
	}
	if f := strings.Fields(string(b)); len(f) == 2 {
		if lo, err := strconv.Atoi(f[0]); err == nil {
			return lo
		}
	}
	return linux
}

// launch starts redis-server on n.port, logging to redis.log in n.dir
// (truncated on each start), and waits until it answers PING. The caller
// holds n.mu or has not shared n yet.
func (n *Node) launch() error {
	logPath := filepath.Join(n.dir, "redis.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("redisproc: %w", err)
	}
	var args []string
	if n.conf != "" {
		args = append(args, n.conf) // a config file must come first
	}
	args = append(args,
		"--port", strconv.Itoa(n.port),
		"--bind", "127.0.0.1",
		"--protected-mode", "no",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--logfile", "",
		"--dir", n.dir,
	)
	if n.debug {
		args = append(args, "--enable-debug-command", "local") // DEBUG RELOAD for the reload faults
	}
	cmd := exec.Command(n.bin, append(args, n.args...)...)
	cmd.Dir = n.dir
	if n.clock != nil {
		cmd.Env = append(os.Environ(), "LD_PRELOAD="+n.clock.shim, clockEnv+"="+n.clock.path)
	}
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	logFile.Close() // the child has its own copy
	if err != nil {
		return fmt.Errorf("redisproc: starting redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait() // the only Wait for this process
		close(exited)
	}()

	err = waitReady(n.Addr(), cmd.Process.Pid, exited)
	if err == nil && n.started != nil {
		err = n.started(n.Addr())
	}
	if err != nil {
		cmd.Process.Kill()
		<-exited
		tail := readTail(logPath)
		if strings.Contains(tail, "Address already in use") {
			err = errBusy
		}
		return fmt.Errorf("redisproc: redis-server on port %d did not start: %w; log tail:\n%s", n.port, err, tail)
	}
	n.cmd, n.exited = cmd, exited
	return nil
}

// waitReady polls addr until the process with the given pid answers, the
// process exits or readyTimeout passes. Checking the pid, not just PONG,
// guards against another redis-server that grabbed the port first.
func waitReady(addr string, pid int, exited <-chan struct{}) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		err := probe(addr, pid)
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("process exited")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %v: %w", readyTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// probe sends PING and INFO server over a fresh connection and checks that
// the answer is PONG from process pid.
func probe(addr string, pid int) error {
	conn, err := net.DialTimeout("tcp", addr, 250*time.Millisecond)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(250 * time.Millisecond))
	if _, err := conn.Write([]byte("PING\r\nINFO server\r\n")); err != nil {
		return err
	}
	r := bufio.NewReader(conn)
	if line, err := r.ReadString('\n'); err != nil || line != "+PONG\r\n" {
		return fmt.Errorf("PING: reply %q, %v", line, err)
	}
	header, err := r.ReadString('\n') // "$<length>\r\n"
	if err != nil {
		return fmt.Errorf("INFO: %w", err)
	}
	size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(header, "$")))
	if err != nil {
		return fmt.Errorf("INFO: bad reply header %q", header)
	}
	info := make([]byte, size)
	if _, err := io.ReadFull(r, info); err != nil {
		return fmt.Errorf("INFO: %w", err)
	}
	if !strings.Contains(string(info), "\nprocess_id:"+strconv.Itoa(pid)+"\r") {
		return fmt.Errorf("%s is served by another process than pid %d", addr, pid)
	}
	return nil
}

// readTail returns the last logTail bytes of the file at path.
func readTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if len(b) > logTail {
		b = b[len(b)-logTail:]
	}
	return string(b)
}

// Addr returns the node's "127.0.0.1:port" address.
func (n *Node) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port))
}

// Kill sends SIGKILL and waits for the process to exit, so the port is
// free when it returns. It works on paused processes too.
func (n *Node) Kill() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.runningLocked(); err != nil {
		return err
	}
	n.stopLocked()
	return nil
}

// stopLocked kills and reaps the process, if any, and drops the client.
// The client goes last: rueidis's Close waits for in-flight commands, which
// against a paused process takes seconds, against a dead one no time.
func (n *Node) stopLocked() {
	n.gen++
	if n.cmd != nil {
		n.cmd.Process.Kill() // SIGKILL ends stopped processes as well
		<-n.exited
		n.cmd, n.exited = nil, nil
	}
	if n.client != nil {
		n.client.Close()
		n.client = nil
	}
}

// Pause sends SIGSTOP: the process keeps its connections but stops
// answering until Resume. Pause returns once the process is stopped.
func (n *Node) Pause() error {
	return n.signal(syscall.SIGSTOP, 'T')
}

// Resume sends SIGCONT to a paused process.
func (n *Node) Resume() error {
	return n.signal(syscall.SIGCONT, 0)
}

// runningLocked fails unless a process runs (paused or not); n.mu is held.
func (n *Node) runningLocked() error {
	switch {
	case n.closed:
		return errClosed
	case n.cmd == nil:
		return fmt.Errorf("redisproc: %s is not running", n.Addr())
	}
	return nil
}

// signal sends sig and, if want is not 0, waits until /proc reports that
// state for the process (where /proc exists).
func (n *Node) signal(sig syscall.Signal, want byte) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.runningLocked(); err != nil {
		return err
	}
	if err := n.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("redisproc: %s: %w", n.Addr(), err)
	}
	if want == 0 {
		return nil
	}
	stat := fmt.Sprintf("/proc/%d/stat", n.cmd.Process.Pid)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(stat)
		if err != nil {
			return nil // no /proc: trust the signal
		}
		// The state follows the command name, which is in parentheses.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && b[i+2] == want {
			return nil
		}
	}
	return fmt.Errorf("redisproc: %s did not reach state %c after %v", n.Addr(), want, sig)
}

// Restart kills the process if it is running and starts a new one on the
// same port with an empty dataset (and a new run_id), retrying while the
// port is briefly busy. A snapshot written by Save is deleted first, so the
// new process never loads it. It waits until the new process answers PING.
// A node whose clock was set ahead keeps it, as a machine would; a node
// with a config file (those of a SentinelSet) starts from the file as its
// last process rewrote it; a server of a RedisCluster keeps its
// nodes.conf, and so its node id and what it knew of the cluster.
func (n *Node) Restart() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return errClosed
	}
	n.stopLocked()
	if err := os.Remove(n.snapshot()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("redisproc: %w", err)
	}
	return n.relaunchLocked()
}

// Save writes a snapshot of the node's dataset (SAVE) for
// RestartFromSnapshot; a later Save replaces it.
func (n *Node) Save(ctx context.Context) error {
	_, err := n.Do(ctx, "SAVE")
	return err
}

// RestartFromSnapshot kills the process with SIGKILL, if it is running,
// and starts a new one on the same port and directory, which loads the
// snapshot of the last Save: the new process has the keys as of that Save
// (less those that expired since, by its clock), none of the writes made
// after it, and a new run_id. This is a restart with RDB persistence whose
// last background save came before the latest writes. When Save was never
// called it fails and leaves the process alone, rather than start empty.
func (n *Node) RestartFromSnapshot() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return errClosed
	}
	if _, err := os.Stat(n.snapshot()); err != nil {
		return fmt.Errorf("redisproc: %s has no snapshot to restart from (call Save first): %w", n.Addr(), err)
	}
	n.stopLocked()
	return n.relaunchLocked()
}

// snapshot is where SAVE writes: redis-server's default file name in the
// node's directory.
func (n *Node) snapshot() string { return filepath.Join(n.dir, "dump.rdb") }

// relaunchLocked starts the process again on n.port, retrying while the
// port is briefly busy. The caller holds n.mu and stopped the old process.
func (n *Node) relaunchLocked() error {
	var err error
	for range bindAttempts {
		if err = n.launch(); !errors.Is(err, errBusy) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// close kills the process, closes the client and removes the directory.
func (n *Node) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	n.stopLocked()
	n.closed = true
	if n.clock != nil {
		n.clock.close()
	}
	os.RemoveAll(n.dir)
}

// redis returns the node's client, creating it if needed. NewClient
// connects at once, so it runs without holding n.mu.
func (n *Node) redis() (rueidis.Client, error) {
	for {
		n.mu.Lock()
		if n.closed {
			n.mu.Unlock()
			return nil, errClosed
		}
		if c := n.client; c != nil {
			n.mu.Unlock()
			return c, nil
		}
		gen := n.gen
		n.mu.Unlock()

		// ForceSingleClient: a node of a Redis Cluster must be talked to
		// itself, with MOVED and ASK as answers; rueidis would otherwise
		// see the cluster and route each command to its slot's master.
		// PipelineMultiplex -1: one connection, in order. rueidis would
		// otherwise send keyed commands down one of up to 4 connections
		// at random (2 with GOMAXPROCS 2), the others down the first, and
		// a WAIT after a write (WAIT covers the writes of its own
		// connection) would often return at once, before any replica had
		// the write.
		c, err := rueidis.NewClient(rueidis.ClientOption{
			InitAddress: []string{n.Addr()}, DisableCache: true,
			ForceSingleClient: true, PipelineMultiplex: -1,
		})
		if err != nil {
			return nil, fmt.Errorf("redisproc: connecting to %s: %w", n.Addr(), err)
		}
		n.mu.Lock()
		if n.closed || n.gen != gen || n.client != nil {
			// Killed, restarted or raced by another caller: try again.
			n.mu.Unlock()
			c.Close()
			continue
		}
		n.client = c
		n.mu.Unlock()
		return c, nil
	}
}

// Do runs one command and returns its reply as plain Go values: string,
// int64, float64, bool, []any, map[string]any, or nil for a nil reply.
func (n *Node) Do(ctx context.Context, args ...string) (any, error) {
	if len(args) == 0 {
		return nil, errors.New("redisproc: Do needs a command")
	}
	c, err := n.redis()
	if err != nil {
		return nil, err
	}
	v, err := c.Do(ctx, c.B().Arbitrary(args[0]).Args(args[1:]...).Build()).ToAny()
	if rueidis.IsRedisNil(err) {
		return nil, nil
	}
	return v, err
}

// Get returns the value of key; ok is false when the key does not exist.
func (n *Node) Get(ctx context.Context, key string) (value string, ok bool, err error) {
	c, err := n.redis()
	if err != nil {
		return "", false, err
	}
	value, err = c.Do(ctx, c.B().Get().Key(key).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", false, nil
	}
	return value, err == nil, err
}

// Set sets key to value. A ttl of 0 means no expiry; a positive ttl is
// rounded up to whole milliseconds.
func (n *Node) Set(ctx context.Context, key, value string, ttl time.Duration) error {
	c, err := n.redis()
	if err != nil {
		return err
	}
	set := c.B().Set().Key(key).Value(value)
	if ttl > 0 {
		ms := (ttl + time.Millisecond - 1) / time.Millisecond
		return c.Do(ctx, set.PxMilliseconds(int64(ms)).Build()).Error()
	}
	return c.Do(ctx, set.Build()).Error()
}

// PTTL returns the remaining time to live of key. As in Redis, it returns
// -1ms for a key without expiry and -2ms for a missing key.
func (n *Node) PTTL(ctx context.Context, key string) (time.Duration, error) {
	c, err := n.redis()
	if err != nil {
		return 0, err
	}
	ms, err := c.Do(ctx, c.B().Pttl().Key(key).Build()).AsInt64()
	return time.Duration(ms) * time.Millisecond, err
}

// Keys returns the keys matching pattern (KEYS; fine for test datasets).
func (n *Node) Keys(ctx context.Context, pattern string) ([]string, error) {
	c, err := n.redis()
	if err != nil {
		return nil, err
	}
	return c.Do(ctx, c.B().Keys().Pattern(pattern).Build()).AsStrSlice()
}

// RunID returns the run_id from INFO server; it changes on every restart.
func (n *Node) RunID(ctx context.Context) (string, error) { return n.ServerInfo(ctx, "run_id") }

// ServerInfo returns one field of INFO server, such as run_id or
// uptime_in_seconds.
func (n *Node) ServerInfo(ctx context.Context, field string) (string, error) {
	return n.Info(ctx, "server", field)
}

// Info returns one field of an INFO section, such as used_memory of
// memory or evicted_keys of stats.
func (n *Node) Info(ctx context.Context, section, field string) (string, error) {
	info, err := n.section(ctx, section)
	if err != nil {
		return "", err
	}
	if v, ok := redisinfo.Field(info, field); ok {
		return v, nil
	}
	return "", fmt.Errorf("redisproc: INFO %s of %s has no %s", section, n.Addr(), field)
}

// Calls is how many times the process ran command (lower case, as INFO
// commandstats names it): 0 before the first, which commandstats omits.
func (n *Node) Calls(ctx context.Context, command string) (int, error) {
	info, err := n.section(ctx, "commandstats")
	if err != nil {
		return 0, err
	}
	stat, ok := redisinfo.Field(info, "cmdstat_"+command)
	if !ok {
		return 0, nil
	}
	calls, _, _ := strings.Cut(strings.TrimPrefix(stat, "calls="), ",")
	return strconv.Atoi(calls)
}

func (n *Node) section(ctx context.Context, name string) (string, error) {
	c, err := n.redis()
	if err != nil {
		return "", err
	}
	return c.Do(ctx, c.B().Info().Section(name).Build()).ToString()
}

// ReplicaOf makes n a replica of primary and waits, up to 10s, until n
// has synced and caught up with everything primary had written when the
// sync was up. (A primary's first replica makes it draw a new
// replication id.)
func (n *Node) ReplicaOf(ctx context.Context, primary *Node) error {
	if _, err := primary.Do(ctx, "CONFIG", "SET", "repl-diskless-sync-delay", "0"); err != nil {
		return err
	}
	_, port, _ := strings.Cut(primary.Addr(), ":")
	if _, err := n.Do(ctx, "REPLICAOF", "127.0.0.1", port); err != nil {
		return err
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("redisproc: %s did not catch up with %s in 10s", n.Addr(), primary.Addr())
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if link, _ := n.Info(ctx, "replication", "master_link_status"); link != "up" {
			continue
		}
		want, err := primary.Info(ctx, "replication", "master_repl_offset")
		if err != nil {
			return err
		}
		got, _ := n.Info(ctx, "replication", "slave_repl_offset")
		if g, err1 := strconv.ParseInt(got, 10, 64); err1 == nil {
			if w, err2 := strconv.ParseInt(want, 10, 64); err2 == nil && g >= w {
				return nil
			}
		}
	}
}
