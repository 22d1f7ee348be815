package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// sentinels asks a master set's sentinels which server is its master. A
// Conn asks at every probe and moves to the server named, so that a new
// master is met by a probe first, as any new connection is (rueidis' own
// Sentinel client would switch in the background, under batches).
type sentinels struct {
	name  string
	addrs []string
	opt   rueidis.ClientOption // the sentinels' auth, TLS, dialer, name

	mu      sync.Mutex
	clients map[string]rueidis.Client
	closed  bool
	last    *located      // the latest answer; nil before the first
	asking  bool          // a query is under way
	first   chan struct{} // closed with the first answer
}

// located is one answer of the sentinels (master).
type located struct {
	addr  string
	split []string
	// switches is the set's failovers so far, as the sentinels count
	// them (config-epoch): it rises with each, whether or not a probe
	// saw the master it gave.
	switches int64
	err      error
}

// latest returns the latest answer of the sentinels and starts another
// query, so that a probe never waits on a sentinel that does not answer
// (it would hold up the batches behind it): a probe moves on the answer
// of the query before. Only the first waits, within ctx.
func (s *sentinels) latest(ctx context.Context) (located, error) {
	s.mu.Lock()
	last := s.last
	if !s.asking && !s.closed {
		s.asking = true
		go s.query()
	}
	s.mu.Unlock()
	if last == nil {
		select {
		case <-s.first:
		case <-ctx.Done():
			return located{}, fmt.Errorf("sentinels of %q: %w", s.name, ctx.Err())
		}
		s.mu.Lock()
		last = s.last
		s.mu.Unlock()
	}
	return *last, last.err
}

// query asks the sentinels (master), within half the dial timeout (so a
// first probe, within the dial timeout, gets its answer), and keeps the
// answer.
func (s *sentinels) query() {
	ctx, cancel := context.WithTimeout(context.Background(), s.opt.Dialer.Timeout/2)
	defer cancel()
	l := s.master(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		close(s.first)
	}
	s.last, s.asking = &l, false
}

// switchesOf asks the sentinels now, within half the dial timeout, and
// returns their count of the set's failovers (see master) if they still
// name master, else an error.
func (s *sentinels) switchesOf(ctx context.Context, master string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opt.Dialer.Timeout/2)
	defer cancel()
	l := s.master(ctx)
	switch {
	case l.err != nil:
		return 0, l.err
	case l.addr != master:
		return 0, fmt.Errorf("the sentinels of %q name %s the master now, not %s", s.name, l.addr, master)
	}
	return l.switches, nil
}

// newSentinels reads opt as Target.Option set it for a master set.
func newSentinels(opt rueidis.ClientOption) *sentinels {
	s := opt.Sentinel
	o := rueidis.ClientOption{
		Username: s.Username, Password: s.Password, ClientName: s.ClientName,
		Dialer: s.Dialer, TLSConfig: s.TLSConfig,
		DisableCache: true, ForceSingleClient: true, DisableRetry: true,
		ConnWriteTimeout: opt.ConnWriteTimeout,
	}
	if o.Dialer.Timeout == 0 {
		o.Dialer.Timeout = opt.Dialer.Timeout
	}
	if o.Dialer.Timeout == 0 {
		o.Dialer.Timeout = time.Second
	}
	return &sentinels{name: s.MasterSet, addrs: slices.Clone(opt.InitAddress), opt: o,
		clients: make(map[string]rueidis.Client), first: make(chan struct{})}
}

// master asks every sentinel at once and returns the address a majority
// of them name, or an error: one sentinel late to learn of a failover,
// or cut off with the old master, does not send the probe there. A
// sentinel that has not answered within ctx counts as naming none.
//
// It also returns the other servers of the set that may still answer as
// a master: a former master that Sentinel has not yet made a replica of
// the new one. Until then it takes the writes of engines that have not
// yet moved, which the new master will never have. Sentinel demotes it
// four hello periods (8s by default) after it reads its INFO, which it
// does every 10s by default: with both servers up, a former master may
// take writes for many seconds after the switch. A server counts when a
// sentinel saw it answer as a master (role-reported), and when no
// sentinel that lists it has read its INFO yet (info-refresh 0): right
// after a switch, a sentinel lists the former master as a replica it has
// not read, whatever it is. Not when a sentinel flags it down.
//
// And it returns the set's count of failovers: the highest config-epoch
// of the sentinels that name that master.
func (s *sentinels) master(ctx context.Context) located {
	type answer struct {
		i        int
		named    string
		seen     map[string]seenAs
		switches int64
		err      error
	}
	answers := make(chan answer, len(s.addrs)) // a late sentinel's goroutine ends on its own
	for i, addr := range s.addrs {
		go func() {
			named, seen, switches, err := s.ask(ctx, addr)
			answers <- answer{i, named, seen, switches, err}
		}()
	}
	named := make([]string, len(s.addrs))
	seen := make([]map[string]seenAs, len(s.addrs))
	switches := make([]int64, len(s.addrs))
	errs := make([]error, len(s.addrs))
	for range s.addrs {
		select {
		case a := <-answers:
			named[a.i], seen[a.i], switches[a.i], errs[a.i] = a.named, a.seen, a.switches, a.err
			continue
		case <-ctx.Done(): // a sentinel that cannot be reached in time names none
			errs = append(errs, ctx.Err())
		}
		break
	}
	votes := make(map[string]int, len(named))
	for _, a := range named {
		if a != "" {
			votes[a]++
		}
	}
	best, most := "", 0
	for a, n := range votes {
		if n > most {
			best, most = a, n
		}
	}
	if most < len(s.addrs)/2+1 { // a majority names one master, or none does
		return located{err: fmt.Errorf("fewer than a majority of the sentinels of %q (%d of %d) name one master %q: %w",
			s.name, most, len(s.addrs), best, errors.Join(errs...))}
	}
	l := located{addr: best, split: stillMasters(best, seen)}
	for i, a := range named {
		if a == best {
			l.switches = max(l.switches, switches[i])
		}
	}
	return l
}

// stillMasters returns, sorted, the servers other than master that the
// sentinels' views of the set's replicas (seen, one per sentinel that
// answered) say may still answer as a master: one that a sentinel saw
// answer so, or one that no sentinel listing it has read yet.
func stillMasters(master string, seen []map[string]seenAs) []string {
	type tally struct {
		listed, unread int  // sentinels that list it; of those, that have not read it
		master         bool // some sentinel saw it answer as a master
	}
	servers := map[string]*tally{}
	for _, m := range seen {
		for addr, as := range m {
			t := servers[addr]
			if t == nil {
				t = &tally{}
				servers[addr] = t
			}
			t.listed++
			t.master = t.master || as == seenMaster
			if as == seenUnread {
				t.unread++
			}
		}
	}
	var others []string
	for addr, t := range servers {
		if addr != master && (t.master || t.unread == t.listed) {
			others = append(others, addr)
		}
	}
	slices.Sort(others)
	return others
}

// seenAs is what a sentinel says of a replica of the set.
type seenAs int

const (
	seenReplica seenAs = iota // answers as a replica, or is down
	seenMaster                // answers as a master, and is not down
	seenUnread                // not read yet (info-refresh 0), not down
)

// ask asks the sentinel at addr for the master, what it says of each
// replica, and its config-epoch of the set (see master).
func (s *sentinels) ask(ctx context.Context, addr string) (string, map[string]seenAs, int64, error) {
	c, err := s.client(addr)
	if err != nil {
		return "", nil, 0, fmt.Errorf("sentinel %s: %w", addr, err)
	}
	res := c.DoMulti(ctx, c.B().SentinelGetMasterAddrByName().Master(s.name).Build(),
		c.B().SentinelReplicas().Master(s.name).Build(),
		c.B().Arbitrary("SENTINEL", "MASTER").Args(s.name).Build())
	hp, err := res[0].AsStrSlice()
	switch {
	case rueidis.IsRedisNil(err):
		return "", nil, 0, fmt.Errorf("sentinel %s does not watch a master set named %q", addr, s.name)
	case err != nil:
		return "", nil, 0, fmt.Errorf("sentinel %s: %w", addr, err)
	case len(hp) != 2:
		return "", nil, 0, fmt.Errorf("sentinel %s: unexpected reply %q", addr, hp)
	}
	master, err := res[2].AsStrMap()
	if err != nil {
		return "", nil, 0, fmt.Errorf("sentinel %s: SENTINEL MASTER: %w", addr, err)
	}
	switches, err := strconv.ParseInt(master["config-epoch"], 10, 64)
	if err != nil {
		return "", nil, 0, fmt.Errorf("sentinel %s: SENTINEL MASTER: config-epoch %q", addr, master["config-epoch"])
	}
	replicas, err := res[1].ToArray()
	if err != nil {
		return "", nil, 0, fmt.Errorf("sentinel %s: SENTINEL REPLICAS: %w", addr, err)
	}
	seen := make(map[string]seenAs, len(replicas))
	for _, r := range replicas {
		m, err := r.AsStrMap()
		if err != nil {
			return "", nil, 0, fmt.Errorf("sentinel %s: SENTINEL REPLICAS: %w", addr, err)
		}
		as := seenReplica
		switch {
		case downFlags(m["flags"]):
		case m["role-reported"] == "master":
			as = seenMaster
		case m["info-refresh"] == "0":
			as = seenUnread
		}
		seen[net.JoinHostPort(m["ip"], m["port"])] = as
	}
	return net.JoinHostPort(hp[0], hp[1]), seen, switches, nil
}

// client returns the client for the sentinel at addr, made on first use
// (not under the lock: a sentinel that does not answer delays only its
// own ask).
func (s *sentinels) client(addr string) (rueidis.Client, error) {
	s.mu.Lock()
	c, closed := s.clients[addr], s.closed
	s.mu.Unlock()
	switch {
	case closed:
		return nil, ErrStopped
	case c != nil:
		return c, nil
	}
	o := s.opt
	o.InitAddress = []string{addr}
	c, err := rueidis.NewClient(o)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.clients[addr] != nil { // closed, or made meanwhile
		c.Close()
		if s.closed {
			return nil, ErrStopped
		}
		return s.clients[addr], nil
	}
	s.clients[addr] = c
	return c, nil
}

func (s *sentinels) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, c := range s.clients {
		c.Close()
	}
	clear(s.clients)
}

// downFlags reports whether a sentinel's flags for a server say it is
// down: a former master cut off from the sentinels, which only
// min-replicas-to-write stops from taking writes (see Target). Not
// disconnected: for some 40-130ms after a switch the sentinels list the
// former master so while their new link to it is not up yet, and it may
// well still take writes (a new engine that took that for down saw no
// split, and trusted the new master at once: two holders after a quick
// failback, at a TTL under two health intervals).
func downFlags(flags string) bool {
	for f := range strings.SplitSeq(flags, ",") {
		switch f {
		case "s_down", "o_down":
			return true
		}
	}
	return false
}
