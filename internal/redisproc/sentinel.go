package redisproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redlease/redlease/internal/redisinfo"
)

// The timings of a SentinelSet's sentinels. Sentinel's defaults (30s
// down-after, 3 minutes failover timeout, INFO to replicas every 10s, hello
// messages every 2s) are for networks; on loopback they only make tests
// slow.
const (
	// sentinelDownAfter is down-after-milliseconds: how long a server may
	// fail to answer PING before a sentinel thinks it down (SDOWN), and,
	// agreed by a quorum (ODOWN), fails it over on its own.
	sentinelDownAfter = time.Second
	// sentinelFailoverTimeout is failover-timeout. Sentinel uses it as
	// several bounds: the promoted replica must report role:master within
	// it, or the failover is aborted; the other replicas must follow the
	// new master within it, or the failover ends without waiting for them
	// (they get a best-effort REPLICAOF); a replica that follows a wrong
	// master is repointed only after it; and a sentinel whose failover
	// attempt ended without a switch (lost election, abort), or that voted
	// for another sentinel, starts no automatic failover of that master
	// for twice it. It does not space out forced failovers: after a switch
	// a sentinel may fail over again at once (sentinelResetMaster zeroes
	// failover_start_time), and SENTINEL FAILOVER is refused only while a
	// failover runs (-INPROG), which Failover waits out. So the bound is
	// from below. During a failover a sentinel reads INFO from the
	// replicas once a second: a promotion takes one read (0.3s to 0.9s
	// measured here) and the other replicas' move up to two (1.07s to
	// 1.18s). At 1s every failover ended for timeout, and slow promotions
	// would abort; 1.5s passed 24 failovers back to back under the race
	// detector, with 0.3s to spare; 2s is the smallest whole second that
	// covers two INFO rounds with room for a loaded machine, and it keeps
	// the pause after a lost election of an automatic failover to 4s.
	sentinelFailoverTimeout = 2 * time.Second
	// setTimeout bounds StartSentinelSet.
	setTimeout = 30 * time.Second
	// queryTimeout bounds one question to one sentinel in Master, so that
	// a paused sentinel only goes unheard.
	queryTimeout = time.Second
	// settlePoll is how often a set's state is read while waiting.
	settlePoll = 50 * time.Millisecond
)

// SentinelPeriods are how often a SentinelSet's sentinels send INFO,
// publish hello messages and ping: SENTINEL DEBUG info-period,
// publish-period and ping-period, set again at every sentinel's start.
type SentinelPeriods struct {
	// Info is how often a sentinel sends INFO to the master and replicas
	// when nothing fails: it finds replicas and their role changes that
	// fast.
	Info time.Duration
	// Publish is how often a sentinel publishes its hello message:
	// sentinels find each other and learn a new master that fast, and a
	// sentinel turns a former master that is still a master into a
	// replica of the new one four periods after it sees it.
	Publish time.Duration
	// Ping is how often a sentinel pings every server and sentinel, and
	// reconnects a dropped link. Sentinel drops every client of a server
	// it reconfigures, its own links too: reconnecting within half of
	// down-after keeps it from thinking the new master down.
	Ping time.Duration
}

var (
	// FastSentinel are the periods StartSentinelSet uses: short, for
	// loopback, where Sentinel's own only make tests slow.
	FastSentinel = SentinelPeriods{Info: 500 * time.Millisecond, Publish: 250 * time.Millisecond, Ping: 500 * time.Millisecond}
	// DefaultSentinel are Sentinel's own: a former master that a failover
	// left writable is read every 10s and demoted 8s after, as in
	// production.
	DefaultSentinel = SentinelPeriods{Info: 10 * time.Second, Publish: 2 * time.Second, Ping: time.Second}
)

// SentinelSet is a Redis master with replicas and the sentinels that watch
// them: a master set as services run it behind Sentinel.
//
// The servers run with the package's usual flags, no delay before a full
// sync (repl-diskless-sync-delay 0), and a config file of their own that
// holds a replica's replicaof line. Sentinel rewrites that file (CONFIG
// REWRITE) whenever it changes a server's role, so a server that restarts
// comes back in the role Sentinel last gave it, as in production; a
// --replicaof argument would override the file on every start and bring
// it back as a replica of the set's first master. As everywhere in this package nothing is persisted, so a restarted
// server is empty, and a master that restarts before the sentinels fail it
// over hands its empty dataset to its replicas: the data loss Redis's
// documentation warns of for masters without persistence.
//
// Each sentinel runs as redis-server <dir>/sentinel.conf --sentinel, on its
// own port and in its own directory. Sentinels rewrite that file with what
// they learn (their id, the replicas, the other sentinels, epochs), so a
// restarted sentinel knows the set at once. Its timings are short (see
// sentinelDownAfter and the constants beside it, and FastSentinel).
type SentinelSet struct {
	// Name is the master set's name, as the sentinels monitor it.
	Name string
	// Servers are the redis-server processes: Servers[0] started as the
	// master, the others as its replicas. Failovers change the roles, not
	// the order.
	Servers []*Node
	// Sentinels are the sentinel processes.
	Sentinels []*Node
}

// StartSentinelSet starts a master, replicas replicas of it and sentinels
// sentinels that monitor it with a quorum of a majority (sentinels/2+1).
// It returns once every replica is in sync with the master
// (master_link_status:up) and every sentinel knows the master, every
// replica and every other sentinel, so that a failover can run at once.
// On any error it stops what it started.
func StartSentinelSet(replicas, sentinels int) (*SentinelSet, error) {
	return StartSentinelSetWith(replicas, sentinels, FastSentinel)
}

// StartSentinelSetWith is StartSentinelSet with the sentinels' periods.
func StartSentinelSetWith(replicas, sentinels int, periods SentinelPeriods) (*SentinelSet, error) {
	if replicas < 0 || sentinels < 1 {
		return nil, fmt.Errorf("redisproc: a sentinel set needs replicas >= 0 and sentinels >= 1, got %d and %d", replicas, sentinels)
	}
	bin, err := system.find(redisServerTool)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), setTimeout)
	defer cancel()
	s := &SentinelSet{Name: "redisproc"}
	master, err := newSetServer(bin, nil)
	if err != nil {
		return nil, err
	}
	s.Servers = append(s.Servers, master)
	for range replicas {
		r, err := newSetServer(bin, master)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.Servers = append(s.Servers, r)
	}
	// The sentinels find the replicas in the master's INFO, so they start
	// once the replicas are attached.
	if err := s.waitReplicas(ctx, master); err != nil {
		s.Close()
		return nil, err
	}
	for range sentinels {
		sn, err := newSentinel(bin, s.Name, master, sentinels/2+1, replicas, periods)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.Sentinels = append(s.Sentinels, sn)
	}
	if err := s.waitSettled(ctx, master); err != nil {
		s.Close()
		return nil, fmt.Errorf("redisproc: the sentinel set did not settle: %w", err)
	}
	return s, nil
}

// StartSentinel is StartSentinelSet for tests: it fails the test on error
// (it never skips) and registers Close with t.Cleanup.
func StartSentinel(t TB, replicas, sentinels int) *SentinelSet {
	t.Helper()
	s, err := StartSentinelSet(replicas, sentinels)
	return started(t, s, err)
}

// newSetServer starts a server of a set: a master when master is nil,
// else a replica of master. Its role is in its config file, which
// Sentinel may rewrite; full syncs start at once (repl-diskless-sync-delay
// 0: the default waits 5s for more replicas).
func newSetServer(bin string, master *Node) (*Node, error) {
	return startNode(&Node{bin: bin, debug: true}, func(n *Node) error {
		var conf string
		if master != nil {
			conf = fmt.Sprintf("replicaof 127.0.0.1 %d\n", master.port)
		}
		n.conf = filepath.Join(n.dir, "redis.conf")
		n.args = []string{"--repl-diskless-sync-delay", "0"}
		return writeConf(n.conf, conf)
	})
}

// newSentinel starts a sentinel that monitors master as name.
func newSentinel(bin, name string, master *Node, quorum, replicas int, periods SentinelPeriods) (*Node, error) {
	return startNode(&Node{bin: bin}, func(n *Node) error {
		// Port, bind address, protected mode and directory come from the
		// command line, as for every node; the sentinel writes them into
		// the file at its first start.
		conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d\n"+
			"sentinel down-after-milliseconds %[1]s %[4]d\n"+
			"sentinel failover-timeout %[1]s %[5]d\n"+
			// Every replica follows a new master at once, not one by one.
			"sentinel parallel-syncs %[1]s %[6]d\n",
			name, master.port, quorum, sentinelDownAfter.Milliseconds(), sentinelFailoverTimeout.Milliseconds(), max(replicas, 1))
		n.conf = filepath.Join(n.dir, "sentinel.conf")
		n.args = []string{"--sentinel"}
		n.started = func(addr string) error {
			_, err := command(addr, "SENTINEL", "DEBUG",
				"info-period", strconv.FormatInt(periods.Info.Milliseconds(), 10),
				"ping-period", strconv.FormatInt(periods.Ping.Milliseconds(), 10),
				"publish-period", strconv.FormatInt(periods.Publish.Milliseconds(), 10))
			return err
		}
		return writeConf(n.conf, conf)
	})
}

func writeConf(path, conf string) error {
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return fmt.Errorf("redisproc: %w", err)
	}
	return nil
}

// command sends one command to addr on a connection of its own and
// returns the first line of the reply; an error reply is an error.
func command(addr string, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("%s: %w", args[0], err)
	}
	line = strings.TrimSpace(line)
	if strings.HasPrefix(line, "-") {
		return "", fmt.Errorf("%s %s: %s", args[0], strings.Join(args[1:], " "), line[1:])
	}
	return line, nil
}

// SentinelAddrs returns the "127.0.0.1:port" address of every sentinel.
func (s *SentinelSet) SentinelAddrs() []string {
	return addrsOf(s.Sentinels)
}

// Close kills every process, sentinels first, and removes their
// directories. It is idempotent.
func (s *SentinelSet) Close() {
	for _, n := range s.Sentinels {
		n.close()
	}
	for _, n := range s.Servers {
		n.close()
	}
}

// Master returns the server that the sentinels name as the master now
// (SENTINEL GET-MASTER-ADDR-BY-NAME): the address a majority of all the
// sentinels give. Sentinels that do not answer within a second (killed,
// paused) count as not naming any; without a majority, or when the address
// is not one of Servers, it fails.
func (s *SentinelSet) Master(ctx context.Context) (*Node, error) {
	addrs, errs := s.askSentinels(ctx)
	votes := map[string]int{}
	for _, a := range addrs {
		if a != "" {
			votes[a]++
		}
	}
	for a, v := range votes {
		if v >= len(s.Sentinels)/2+1 {
			return s.server(a)
		}
	}
	return nil, fmt.Errorf("redisproc: no majority of the sentinels of %s names a master: %s", s.Name, describeAnswers(s.Sentinels, addrs, errs))
}

// askSentinels asks every sentinel at once for the master's address; a
// sentinel's answer is "" when its error is set.
func (s *SentinelSet) askSentinels(ctx context.Context) ([]string, []error) {
	addrs := make([]string, len(s.Sentinels))
	errs := make([]error, len(s.Sentinels))
	var wg sync.WaitGroup
	for i, sn := range s.Sentinels {
		wg.Add(1)
		go func() {
			defer wg.Done()
			qctx, cancel := context.WithTimeout(ctx, queryTimeout)
			defer cancel()
			addrs[i], errs[i] = s.masterAddr(qctx, sn)
		}()
	}
	wg.Wait()
	return addrs, errs
}

// masterAddr is the master's address as sentinel sn names it.
func (s *SentinelSet) masterAddr(ctx context.Context, sn *Node) (string, error) {
	v, err := sn.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.Name)
	if err != nil {
		return "", err
	}
	hp, ok := v.([]any)
	if !ok || len(hp) != 2 {
		return "", fmt.Errorf("GET-MASTER-ADDR-BY-NAME answered %#v", v)
	}
	return net.JoinHostPort(fmt.Sprint(hp[0]), fmt.Sprint(hp[1])), nil
}

func describeAnswers(sentinels []*Node, addrs []string, errs []error) string {
	var parts []string
	for i, sn := range sentinels {
		if errs[i] != nil {
			parts = append(parts, fmt.Sprintf("%s: %v", sn.Addr(), errs[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%s: %s", sn.Addr(), addrs[i]))
		}
	}
	return strings.Join(parts, "; ")
}

// server returns the server listening on addr.
func (s *SentinelSet) server(addr string) (*Node, error) {
	for _, n := range s.Servers {
		if n.Addr() == addr {
			return n, nil
		}
	}
	return nil, fmt.Errorf("redisproc: the sentinels of %s name %s, which is none of its servers", s.Name, addr)
}

// Failover fails the master over to a replica as an operator does, with
// SENTINEL FAILOVER on a sentinel (the first one running; it is asked
// again while it answers that a failover is in progress or that no
// replica is fit yet, as right after another failover, and when its
// failover was aborted). It returns the new master once every running
// sentinel names it, it answers ROLE master, and the set has settled
// again: the old master answers ROLE slave of it (the sentinels turn it
// into a replica about a second after the switch, four hello periods; a
// master that is not running is left alone), every other running server is its replica with
// its link up, and every running sentinel knows it, its replicas and the
// other sentinels. So a Failover may follow at once. A server or sentinel
// that is paused makes it wait until ctx ends.
//
// Between the switch and the old master's demotion the old master is
// still a master and takes writes from clients that still talk to it;
// those writes are lost when it resyncs from the new master, as with real
// Sentinel.
func (s *SentinelSet) Failover(ctx context.Context) (*Node, error) {
	return s.failover(ctx, nil)
}

// failover is Failover; promoted, if not nil, runs once the new master
// answers ROLE master, before the set settles.
func (s *SentinelSet) failover(ctx context.Context, promoted func()) (*Node, error) {
	if len(s.Servers) < 2 {
		return nil, fmt.Errorf("redisproc: %s has no replica to fail over to", s.Name)
	}
	old, err := s.Master(ctx)
	if err != nil {
		return nil, err
	}
	var asked *Node
	var next *Node
	for next == nil {
		if asked, err = s.askFailover(ctx); err != nil {
			return nil, err
		}
		next, err = s.waitSwitch(ctx, old, asked)
		if err != nil {
			return nil, err
		}
	}
	if promoted != nil {
		promoted()
	}
	if err := s.waitSettled(ctx, next); err != nil {
		return nil, fmt.Errorf("redisproc: failover of %s from %s to %s did not settle: %w", s.Name, old.Addr(), next.Addr(), err)
	}
	return next, nil
}

// FailoverLosingWrites fails the master over, as Failover does, to a
// replica that lacks the writes write made on it: Redis replicates
// asynchronously and acknowledges a write before any replica has it, so a
// promoted replica may lack writes the master acknowledged. Here it lacks
// them for certain.
//
// It first waits until every replica connected to the master has every
// write the master had taken, from any client, so the writes made before
// the call are kept (it compares replication offsets: WAIT would only
// cover the writes of its own connection). Then it cuts replication off
// at the master: its default user may no longer run
// PSYNC or SYNC (ACL SETUSER), and CLIENT KILL TYPE replica drops the
// replicas' links, so the replicas keep their data and their place in
// Sentinel's view but cannot sync again; nothing else changes for clients
// or sentinels. It calls write with the master, then asks a sentinel to
// fail over. Writes of other clients that come between the catch-up and
// the cut may be kept or lost. Every write the master takes from the cut
// until the sentinels demote it (write's, and those of any other client still
// talking to it, also in the second or so between the switch and the
// demotion) is lost: the promoted replica never had them, the other
// replicas resync from it, and the old master, whose replication offset
// is now ahead of the new master's history, gets a full resync from it
// that replaces its dataset. When FailoverLosingWrites returns, no server
// has them.
//
// Once the new master is up, the old master's user gets PSYNC and SYNC
// back, and its config file is rewritten, in case a sentinel had rewritten
// it with the cut permissions (it does when it demotes the server).
//
// The limits: write should return within a few seconds, for a sentinel
// will not promote a replica whose link has been down for more than ten
// times down-after-milliseconds (10s). The master must be running and its
// connected replicas must catch up within 5s, or it fails before calling
// write (with a paused master, when ctx ends). When write fails, it fails
// too, without a failover, and gives the master its permissions back: the
// replicas then resync and get the writes after all.
func (s *SentinelSet) FailoverLosingWrites(ctx context.Context, write func(master *Node) error) (*Node, error) {
	old, err := s.Master(ctx)
	if err != nil {
		return nil, err
	}
	// The sentinels drop every client of the old master when they demote
	// it, and may save its cut permissions in its config file: rewritten.
	return failoverLosingWrites(ctx, old, s.Servers, true, write, func(restore func()) (*Node, error) {
		return s.failover(ctx, restore)
	})
}

// failoverLosingWrites is both FailoverLosingWrites: once master's
// replicas have its writes (within 10s: one that resyncs after an
// earlier fault may lag by a megabyte under load), it denies them PSYNC
// and SYNC and cuts them off, runs write, then failover, which calls
// restore once the promotion counts. restore, tried again for up to 5s
// (a demotion drops every client of the old master), gives PSYNC and
// SYNC back and, with rewrite, rewrites master's config file.
func failoverLosingWrites(ctx context.Context, master *Node, servers []*Node, rewrite bool,
	write func(master *Node) error, failover func(restore func()) (*Node, error)) (*Node, error) {
	if err := master.replicasCaughtUp(ctx, servers, 10*time.Second); err != nil {
		return nil, err
	}
	if _, err := master.Do(ctx, "ACL", "SETUSER", "default", "-psync", "-sync"); err != nil {
		return nil, err
	}
	var restored bool
	var restoreErr error
	restore := func() {
		if restored {
			return
		}
		restored = true
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		for master.running() {
			_, err := master.Do(rctx, "ACL", "SETUSER", "default", "+psync", "+sync")
			if err == nil && rewrite {
				_, err = master.Do(rctx, "CONFIG", "REWRITE")
			}
			if err == nil {
				return
			}
			if sleep(rctx, settlePoll) != nil {
				restoreErr = fmt.Errorf("redisproc: giving %s its PSYNC and SYNC back: %w", master.Addr(), err)
				return
			}
		}
	}
	defer restore()
	if _, err := master.Do(ctx, "CLIENT", "KILL", "TYPE", "replica"); err != nil {
		return nil, err
	}
	if err := write(master); err != nil {
		return nil, fmt.Errorf("redisproc: write before the failover: %w", err)
	}
	next, err := failover(restore)
	if err == nil {
		err = restoreErr
	}
	return next, err
}

// askFailover sends SENTINEL FAILOVER to the first running sentinel until
// it accepts, and returns that sentinel.
func (s *SentinelSet) askFailover(ctx context.Context) (*Node, error) {
	for {
		var sn *Node
		for _, n := range s.Sentinels {
			if n.running() {
				sn = n
				break
			}
		}
		if sn == nil {
			return nil, fmt.Errorf("redisproc: no sentinel of %s is running", s.Name)
		}
		_, err := sn.Do(ctx, "SENTINEL", "FAILOVER", s.Name)
		if err == nil {
			return sn, nil
		}
		// INPROG: the last failover has not ended on that sentinel;
		// NOGOODSLAVE: it has not yet heard from the new master's replicas.
		if ctx.Err() != nil || !(strings.Contains(err.Error(), "INPROG") || strings.Contains(err.Error(), "NOGOODSLAVE")) {
			return nil, fmt.Errorf("redisproc: SENTINEL FAILOVER %s on %s: %w", s.Name, sn.Addr(), err)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return nil, fmt.Errorf("redisproc: SENTINEL FAILOVER %s on %s: %w", s.Name, sn.Addr(), err)
		}
	}
}

// waitSwitch waits until every running sentinel names the same master
// other than old and that server answers ROLE master. It returns nil,
// nil when the failover that sentinel asked started has ended without a
// switch (aborted), to be asked again.
func (s *SentinelSet) waitSwitch(ctx context.Context, old, asked *Node) (*Node, error) {
	var last error
	for {
		next, err := s.switched(ctx, old)
		if err == nil {
			return next, nil
		}
		if ctx.Err() == nil {
			last = err // not the error of a cut-off question
		}
		if aborted, _ := s.failoverAborted(ctx, asked, old); aborted {
			return nil, nil
		}
		if err := sleep(ctx, settlePoll); err != nil {
			return nil, fmt.Errorf("redisproc: failover of %s from %s: %w; last: %v", s.Name, old.Addr(), err, last)
		}
	}
}

// switched returns the new master if every running sentinel names it, it
// is not old and it answers ROLE master.
func (s *SentinelSet) switched(ctx context.Context, old *Node) (*Node, error) {
	addrs, errs := s.askSentinels(ctx)
	addr := ""
	for i, sn := range s.Sentinels {
		if !sn.running() {
			continue
		}
		if errs[i] != nil || addr != "" && addrs[i] != addr {
			return nil, fmt.Errorf("the sentinels disagree: %s", describeAnswers(s.Sentinels, addrs, errs))
		}
		addr = addrs[i]
	}
	if addr == "" {
		return nil, errors.New("no sentinel is running")
	}
	if addr == old.Addr() {
		return nil, fmt.Errorf("the sentinels still name %s", addr)
	}
	next, err := s.server(addr)
	if err != nil {
		return nil, err
	}
	if r, err := role(ctx, next); err != nil || r.role != "master" {
		return nil, fmt.Errorf("%s, named master, answers ROLE %v, %v", addr, r, err)
	}
	return next, nil
}

// failoverAborted reports whether sentinel sn still names old and runs no
// failover of it.
func (s *SentinelSet) failoverAborted(ctx context.Context, sn, old *Node) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	m, err := s.sentinelMaster(ctx, sn)
	if err != nil {
		return false, err
	}
	return net.JoinHostPort(m["ip"], m["port"]) == old.Addr() && !strings.Contains(m["flags"], "failover_in_progress"), nil
}

// sentinelMaster is SENTINEL MASTER <name> on sentinel sn.
func (s *SentinelSet) sentinelMaster(ctx context.Context, sn *Node) (map[string]string, error) {
	v, err := sn.Do(ctx, "SENTINEL", "MASTER", s.Name)
	if err != nil {
		return nil, err
	}
	return stringMap(v)
}

// stringMap turns a map reply (RESP3) or a flat list of pairs (RESP2) into
// a map of strings.
func stringMap(v any) (map[string]string, error) {
	m := map[string]string{}
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			m[k] = fmt.Sprint(x)
		}
	case []any:
		if len(v)%2 != 0 {
			return nil, fmt.Errorf("redisproc: odd list for a map: %#v", v)
		}
		for i := 0; i < len(v); i += 2 {
			m[fmt.Sprint(v[i])] = fmt.Sprint(v[i+1])
		}
	default:
		return nil, fmt.Errorf("redisproc: not a map: %#v", v)
	}
	return m, nil
}

// roleReply is the part of a ROLE reply the set checks.
type roleReply struct {
	role   string // master, slave or sentinel
	master string // a replica's master, host:port
	state  string // a replica's link: connect, connecting, sync or connected
}

func (r roleReply) String() string {
	if r.role == "slave" {
		return fmt.Sprintf("slave of %s (%s)", r.master, r.state)
	}
	return r.role
}

// role asks n for ROLE.
func role(ctx context.Context, n *Node) (roleReply, error) {
	v, err := n.Do(ctx, "ROLE")
	if err != nil {
		return roleReply{}, err
	}
	parts, ok := v.([]any)
	if !ok || len(parts) == 0 {
		return roleReply{}, fmt.Errorf("redisproc: ROLE answered %#v", v)
	}
	r := roleReply{role: fmt.Sprint(parts[0])}
	if r.role == "slave" {
		if len(parts) < 4 {
			return roleReply{}, fmt.Errorf("redisproc: ROLE answered %#v", v)
		}
		r.master = net.JoinHostPort(fmt.Sprint(parts[1]), fmt.Sprint(parts[2]))
		r.state = fmt.Sprint(parts[3])
	}
	return r, nil
}

// replicasCaughtUp waits, for up to timeout, until every replica
// connected to n (INFO replication: slave0, slave1, ...), which must be
// one of servers, has processed every write n had taken when it was
// called, whoever made them: it reads n's master_repl_offset, then each
// replica's own slave_repl_offset. WAIT would not do: it counts the
// replicas that have the writes of the connection that sends it, up to
// its last one, so writes of other clients after that are not covered.
func (n *Node) replicasCaughtUp(ctx context.Context, servers []*Node, timeout time.Duration) error {
	info, err := n.section(ctx, "replication")
	if err != nil {
		return err
	}
	want, err := offsetField(info, "master_repl_offset")
	if err != nil {
		return fmt.Errorf("redisproc: %s: %w", n.Addr(), err)
	}
	var replicas []*Node
	for _, r := range redisinfo.Replicas(info) {
		i := slices.IndexFunc(servers, func(s *Node) bool { return s.Addr() == r.Addr })
		if i < 0 {
			return fmt.Errorf("redisproc: %s has a replica %s that is none of its set's servers", n.Addr(), r.Addr)
		}
		replicas = append(replicas, servers[i])
	}
	for _, r := range replicas {
		err := poll(ctx, time.Now().Add(timeout), func(ctx context.Context) error {
			got, err := r.Info(ctx, "replication", "slave_repl_offset")
			if err != nil {
				return err
			}
			if g, err := strconv.ParseInt(got, 10, 64); err != nil || g < want {
				return fmt.Errorf("offset %s of %d", got, want)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("redisproc: replica %s did not catch up with %s within %v: %w", r.Addr(), n.Addr(), timeout, err)
		}
	}
	return nil
}

// offsetField returns an offset field of INFO replication.
func offsetField(info, field string) (int64, error) {
	v, _ := redisinfo.Field(info, field)
	o, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("INFO replication %s %q", field, v)
	}
	return o, nil
}

// waitReplicas waits until every running server but master is its replica,
// linked up and caught up with the offset master had when the link was up.
func (s *SentinelSet) waitReplicas(ctx context.Context, master *Node) error {
	for _, r := range s.Servers {
		if r == master {
			continue
		}
		if err := r.waitCaughtUp(ctx, master); err != nil {
			return err
		}
	}
	return nil
}

// waitCaughtUp waits until n, a replica of primary, has its link up and
// the offset primary had then.
func (n *Node) waitCaughtUp(ctx context.Context, primary *Node) error {
	for {
		err := func() error {
			if link, err := n.Info(ctx, "replication", "master_link_status"); err != nil || link != "up" {
				return fmt.Errorf("master_link_status %q, %v", link, err)
			}
			want, err := primary.Info(ctx, "replication", "master_repl_offset")
			if err != nil {
				return err
			}
			got, err := n.Info(ctx, "replication", "slave_repl_offset")
			if err != nil {
				return err
			}
			g, err1 := strconv.ParseInt(got, 10, 64)
			w, err2 := strconv.ParseInt(want, 10, 64)
			if err := errors.Join(err1, err2); err != nil || g < w {
				return fmt.Errorf("offset %s of %s, %v", got, want, err)
			}
			return nil
		}()
		if err == nil {
			return nil
		}
		if err := sleep(ctx, settlePoll); err != nil {
			return fmt.Errorf("redisproc: %s did not catch up with %s: %w", n.Addr(), primary.Addr(), err)
		}
	}
}

// waitSettled waits until master answers ROLE master, every other running
// server is its replica with the link up, and every running sentinel names
// it, sees it up, knows every other sentinel and sees every running
// replica up, following it, with its link up.
func (s *SentinelSet) waitSettled(ctx context.Context, master *Node) error {
	var last error
	for {
		err := s.settled(ctx, master)
		if err == nil {
			return nil
		}
		if ctx.Err() == nil {
			last = err // not the error of a cut-off question
		}
		if cerr := sleep(ctx, settlePoll); cerr != nil {
			return fmt.Errorf("%w; last: %v", cerr, last)
		}
	}
}

func (s *SentinelSet) settled(ctx context.Context, master *Node) error {
	if r, err := role(ctx, master); err != nil || r.role != "master" {
		return fmt.Errorf("%s answers ROLE %v, %v; want master", master.Addr(), r, err)
	}
	for _, n := range s.Servers {
		if n == master || !n.running() {
			continue
		}
		if r, err := role(ctx, n); err != nil || r.role != "slave" || r.master != master.Addr() || r.state != "connected" {
			return fmt.Errorf("%s answers ROLE %v, %v; want slave of %s (connected)", n.Addr(), r, err, master.Addr())
		}
	}
	for _, sn := range s.Sentinels {
		if !sn.running() {
			continue
		}
		if err := s.sentinelSettled(ctx, sn, master); err != nil {
			return fmt.Errorf("sentinel %s: %w", sn.Addr(), err)
		}
	}
	return nil
}

func (s *SentinelSet) sentinelSettled(ctx context.Context, sn, master *Node) error {
	m, err := s.sentinelMaster(ctx, sn)
	if err != nil {
		return err
	}
	if addr := net.JoinHostPort(m["ip"], m["port"]); addr != master.Addr() || m["flags"] != "master" {
		return fmt.Errorf("master %s flags %q; want %s flags master", addr, m["flags"], master.Addr())
	}
	if got, want := m["num-other-sentinels"], strconv.Itoa(len(s.Sentinels)-1); got != want {
		return fmt.Errorf("knows %s other sentinels of %s", got, want)
	}
	v, err := sn.Do(ctx, "SENTINEL", "REPLICAS", s.Name)
	if err != nil {
		return err
	}
	list, ok := v.([]any)
	if !ok {
		return fmt.Errorf("SENTINEL REPLICAS answered %#v", v)
	}
	known := map[string]map[string]string{}
	for _, e := range list {
		r, err := stringMap(e)
		if err != nil {
			return err
		}
		known[net.JoinHostPort(r["ip"], r["port"])] = r
	}
	for _, n := range s.Servers {
		if n == master || !n.running() {
			continue
		}
		r, ok := known[n.Addr()]
		switch {
		case !ok:
			return fmt.Errorf("does not know replica %s", n.Addr())
		case r["flags"] != "slave" || r["master-link-status"] != "ok" || r["master-port"] != strconv.Itoa(master.port):
			return fmt.Errorf("sees replica %s with flags %q, master-link-status %q, master-port %s", n.Addr(), r["flags"], r["master-link-status"], r["master-port"])
		}
	}
	return nil
}

// sleep waits for d or until ctx ends, returning ctx's error then.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// errPollDeadline is poll's error when its deadline passed.
var errPollDeadline = errors.New("deadline passed")

// poll runs check every settlePoll until it returns nil, ctx ends or,
// if deadline is not zero, deadline passes (errPollDeadline). Its error
// then says what check said last.
func poll(ctx context.Context, deadline time.Time, check func(context.Context) error) error {
	var last error
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() == nil {
			last = err // not the error of a cut-off question
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return fmt.Errorf("%w; last: %v", errPollDeadline, last)
		}
		if cerr := sleep(ctx, settlePoll); cerr != nil {
			return fmt.Errorf("%w; last: %v", cerr, last)
		}
	}
}

// running reports whether the node's process runs (paused or not).
func (n *Node) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return !n.closed && n.cmd != nil
}
