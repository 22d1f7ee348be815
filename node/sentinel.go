package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"

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
	return &sentinels{name: s.MasterSet, addrs: slices.Clone(opt.InitAddress), opt: o,
		clients: make(map[string]rueidis.Client)}
}

// master asks every sentinel at once and returns the address most of those
// that answered name (the first listed among equals): one sentinel late to
// learn of a failover does not send the probe back to the old master.
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
func (s *sentinels) master(ctx context.Context) (string, []string, error) {
	named := make([]string, len(s.addrs))
	seen := make([]map[string]seenAs, len(s.addrs))
	errs := make([]error, len(s.addrs))
	var wg sync.WaitGroup
	for i, addr := range s.addrs {
		wg.Go(func() { named[i], seen[i], errs[i] = s.ask(ctx, addr) })
	}
	wg.Wait()
	best, votes := "", 0
	for _, a := range named {
		if n := countOf(named, a); a != "" && n > votes {
			best, votes = a, n
		}
	}
	if best == "" {
		return "", nil, fmt.Errorf("no sentinel named the master of %q: %w", s.name, errors.Join(errs...))
	}
	listed, unread := map[string]int{}, map[string]int{}
	var others []string
	for _, m := range seen {
		for addr, as := range m {
			listed[addr]++
			switch {
			case as == seenMaster && !slices.Contains(others, addr):
				others = append(others, addr)
			case as == seenUnread:
				unread[addr]++
			}
		}
	}
	for addr, n := range unread {
		if n == listed[addr] && !slices.Contains(others, addr) {
			others = append(others, addr)
		}
	}
	others = slices.DeleteFunc(others, func(a string) bool { return a == best })
	slices.Sort(others)
	return best, others, nil
}

// seenAs is what a sentinel says of a replica of the set.
type seenAs int

const (
	seenReplica seenAs = iota // answers as a replica, or is down
	seenMaster                // answers as a master, and is not down
	seenUnread                // not read yet (info-refresh 0), not down
)

func countOf(xs []string, x string) int {
	n := 0
	for _, y := range xs {
		if y == x {
			n++
		}
	}
	return n
}

// ask asks the sentinel at addr for the master, and what it says of each
// replica (see master).
func (s *sentinels) ask(ctx context.Context, addr string) (string, map[string]seenAs, error) {
	c, err := s.client(addr)
	if err != nil {
		return "", nil, fmt.Errorf("sentinel %s: %w", addr, err)
	}
	res := c.DoMulti(ctx, c.B().SentinelGetMasterAddrByName().Master(s.name).Build(),
		c.B().SentinelReplicas().Master(s.name).Build())
	hp, err := res[0].AsStrSlice()
	switch {
	case rueidis.IsRedisNil(err):
		return "", nil, fmt.Errorf("sentinel %s does not watch a master set named %q", addr, s.name)
	case err != nil:
		return "", nil, fmt.Errorf("sentinel %s: %w", addr, err)
	case len(hp) != 2:
		return "", nil, fmt.Errorf("sentinel %s: unexpected reply %q", addr, hp)
	}
	replicas, err := res[1].ToArray()
	if err != nil {
		return "", nil, fmt.Errorf("sentinel %s: SENTINEL REPLICAS: %w", addr, err)
	}
	seen := make(map[string]seenAs, len(replicas))
	for _, r := range replicas {
		m, err := r.AsStrMap()
		if err != nil {
			return "", nil, fmt.Errorf("sentinel %s: SENTINEL REPLICAS: %w", addr, err)
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
	return net.JoinHostPort(hp[0], hp[1]), seen, nil
}

// client returns the client for the sentinel at addr, made on first use.
func (s *sentinels) client(addr string) (rueidis.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrStopped
	}
	if c := s.clients[addr]; c != nil {
		return c, nil
	}
	o := s.opt
	o.InitAddress = []string{addr}
	c, err := rueidis.NewClient(o)
	if err != nil {
		return nil, err
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
// down or unreachable: a former master cut off from the sentinels, which
// only min-replicas-to-write stops from taking writes (see Target).
func downFlags(flags string) bool {
	for f := range strings.SplitSeq(flags, ",") {
		switch f {
		case "s_down", "o_down", "disconnected":
			return true
		}
	}
	return false
}
