package node

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Schemes of a Target that is not a standalone master.
const (
	// SentinelScheme opens a Target that is a Sentinel master set.
	SentinelScheme = "sentinel://"
	// ClusterScheme opens a Target that is a Redis Cluster.
	ClusterScheme = "cluster://"
)

// Target is how an engine reaches one Redlock node: a Redis master at an
// address, whichever server a Sentinel master set names its master, or
// the masters of a Redis Cluster (see Cluster).
//
// A master set is one node, one vote: its replicas copy the master's keys
// and Sentinel promotes one of them when the master fails or an operator
// asks. A promoted replica may lack the master's last writes, so a
// failover is what a restart is (see the package doc): the epoch marker
// the replica copied names its old master's lineage, not its own, and it
// sits out a quarantine from when each engine meets it. Each probe asks
// every sentinel (sentinels.master): the master most of them name, and
// whether another server of the set may still answer as a master. That
// is the former master between the promotion and its demotion (with
// Sentinel's default periods up to some 18s when an operator asks for
// the failover and both are up): engines that have not yet moved still
// acquire there, keys the new master will never have. So the quarantine
// lasts until Quarantine after the first probe that no longer saw one:
// the last writes it took came before that probe (the safety
// checker's sentinel failover found overlaps in that gap when the
// quarantine was timed from the switch alone, with Sentinel's default
// periods too: its sentinel-default topology).
//
// Sentinel's own limit stays: a former master cut off from the sentinels
// (they flag it down) but not from some clients keeps taking their writes
// until it is demoted. Set min-replicas-to-write (and
// min-replicas-max-lag) on the master set, as Redis advises for Sentinel,
// so that such a master stops taking writes within the lag.
type Target struct {
	// Addr is a standalone master's host:port; "" for a master set.
	Addr string
	// MasterSet is the Sentinel master set's name.
	MasterSet string
	// Sentinels are the host:port of the sentinels that watch MasterSet.
	Sentinels []string
	// Cluster are the host:port of some of a Redis Cluster's nodes, from
	// which the others are learnt.
	Cluster []string
}

// ParseTarget reads one entry of engine.Config.Nodes:
//
//	host:port                                  a Redis master
//	sentinel://host:port[,host:port...]/name   the master set name, by its sentinels
//	cluster://host:port[,host:port...]         a Redis Cluster, by some of its nodes
func ParseTarget(s string) (Target, error) {
	if rest, ok := strings.CutPrefix(s, ClusterScheme); ok {
		if strings.Contains(rest, "/") {
			return Target{}, fmt.Errorf("a Redis Cluster node lists some of its nodes: %shost:port[,host:port...]", ClusterScheme)
		}
		seeds, err := hostPorts("cluster node", rest)
		return Target{Cluster: seeds}, err
	}
	rest, ok := strings.CutPrefix(s, SentinelScheme)
	if !ok {
		if strings.Contains(s, "://") {
			return Target{}, fmt.Errorf("unknown scheme: use host:port, %shost:port[,host:port...]/master-set or %shost:port[,host:port...]",
				SentinelScheme, ClusterScheme)
		}
		return Target{Addr: s}, checkHostPort(s)
	}
	addrs, name, ok := strings.Cut(rest, "/")
	if !ok || name == "" {
		return Target{}, fmt.Errorf("a Sentinel node names its master set after its sentinels: %shost:port[,host:port...]/master-set", SentinelScheme)
	}
	if strings.ContainsAny(name, "/ \t\r\n") {
		return Target{}, fmt.Errorf("master set name %q: no slashes or spaces", name)
	}
	sentinels, err := hostPorts("sentinel", addrs)
	return Target{MasterSet: name, Sentinels: sentinels}, err
}

// hostPorts reads a comma-separated list of distinct host:port.
func hostPorts(what, list string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(list, ",") {
		if err := checkHostPort(a); err != nil {
			return nil, fmt.Errorf("%s %q: %w", what, a, err)
		}
		if slices.Contains(out, a) {
			return nil, fmt.Errorf("%s %q is listed twice", what, a)
		}
		out = append(out, a)
	}
	return out, nil
}

// String is t as ParseTarget reads it.
func (t Target) String() string {
	switch {
	case len(t.Cluster) > 0:
		return ClusterScheme + strings.Join(t.Cluster, ",")
	case t.MasterSet == "":
		return t.Addr
	}
	return SentinelScheme + strings.Join(t.Sentinels, ",") + "/" + t.MasterSet
}

// Option sets opt to reach t through rueidis' own client, which follows a
// master set's failovers itself: for what does not vote (watchers, scans,
// tools). A Conn made from it asks the sentinels at each probe instead.
// For a cluster, it is rueidis' cluster client, which routes each command
// to its key's shard; the votes go through Cluster instead.
func (t Target) Option(opt rueidis.ClientOption) rueidis.ClientOption {
	switch {
	case len(t.Cluster) > 0:
		opt.InitAddress = append([]string(nil), t.Cluster...)
		opt.Sentinel.MasterSet = ""
		return opt
	case t.MasterSet == "":
		opt.InitAddress = []string{t.Addr}
		opt.Sentinel.MasterSet = ""
		return opt
	}
	opt.InitAddress = append([]string(nil), t.Sentinels...)
	opt.Sentinel.MasterSet = t.MasterSet
	if opt.Sentinel.TopologyRefreshInterval == 0 { // rueidis' advice: a missed +switch-master is caught
		opt.Sentinel.TopologyRefreshInterval = 5 * time.Second
	}
	return opt
}

func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "" {
		return errors.New("missing host")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("port must be 1-65535, got %q", port)
	}
	return nil
}
