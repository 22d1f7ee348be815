package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/redlease/redlease/engine"
	"github.com/redlease/redlease/internal/redisinfo"
)

// clientCPU is this process's user+system CPU time so far (getrusage
// RUSAGE_SELF: every thread, not the redis-server children).
func clientCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	tv := func(t syscall.Timeval) time.Duration {
		return time.Duration(t.Sec)*time.Second + time.Duration(t.Usec)*time.Microsecond
	}
	return tv(ru.Utime) + tv(ru.Stime), nil
}

// writeSyscalls is the number of write syscalls this process made so far
// (syscw in /proc/self/io, summed over all threads). Each one costs CPU on
// both ends of the socket, which is why the benchmark reports them.
func writeSyscalls() (int64, error) {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, err
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("syscw:")); ok {
			return strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		}
	}
	return 0, errors.New("/proc/self/io has no syscw line")
}

// admin is a connection per node for FLUSHALL and INFO, apart from the
// clients under test and used only between measurements. A node marked
// dead (the degraded workload kills one) is left out of both until it is
// marked alive again.
type admin struct {
	addrs   []string
	clients []rueidis.Client
	dead    []bool
	// mark, for a Redis Cluster (-cluster), is its Config.Nodes entry:
	// addrs are its masters, flushed one by one and marked new together,
	// and every node count's suite runs on them all.
	mark string
}

// setDead marks node i dead (left out of FLUSHALL and INFO) or alive.
func (a *admin) setDead(i int, dead bool) { a.dead[i] = dead }

func newAdmin(addrs []string) (*admin, error) {
	a := &admin{addrs: addrs, dead: make([]bool, len(addrs))}
	for _, addr := range addrs {
		c, err := rueidis.NewClient(rueidis.ClientOption{
			InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true,
			ClientName: "redlease-bench-admin",
		})
		if err != nil {
			a.close()
			return nil, fmt.Errorf("node %s: %w", addr, err)
		}
		a.clients = append(a.clients, c)
	}
	return a, nil
}

// first is a narrowed to its first n nodes; close a, not it.
func (a *admin) first(n int) *admin {
	if a.mark != "" {
		return a
	}
	return &admin{addrs: a.addrs[:n], clients: a.clients[:n], dead: a.dead[:n]}
}

func (a *admin) close() {
	for _, c := range a.clients {
		c.Close()
	}
}

// flushAll empties every live node, so no run sees another's keys, and
// then marks them new (engine.MarkNew): no lease outlives the FLUSHALL
// between runs (each run has a fresh client), so the nodes need no restart
// quarantine, just as the README's fresh deployment marks its nodes. The
// same goes for a node the degraded workload restarted empty: its process
// is new, so redlease would otherwise keep it out of quorums for a TTL.
func (a *admin) flushAll(ctx context.Context) error {
	var live []string
	for i, c := range a.clients {
		if a.dead[i] {
			continue
		}
		if err := c.Do(ctx, c.B().Flushall().Build()).Error(); err != nil {
			return fmt.Errorf("FLUSHALL on %s: %w", a.addrs[i], err)
		}
		live = append(live, a.addrs[i])
	}
	if a.mark != "" {
		live = []string{a.mark}
	}
	return engine.MarkNew(ctx, engine.Config{Nodes: live})
}

// version is the redis_version of the first live node (INFO server); ""
// when it cannot be read.
func (a *admin) version(ctx context.Context) string {
	for i, c := range a.clients {
		if a.dead[i] {
			continue
		}
		info, err := c.Do(ctx, c.B().Info().Section("server").Build()).ToString()
		if err != nil {
			return ""
		}
		v, _ := redisinfo.Field(info, "redis_version")
		return v
	}
	return ""
}

// server reads, over the live nodes, the CPU they used (used_cpu_sys and
// used_cpu_user from INFO cpu) and the commands they ran
// (total_commands_processed from INFO stats), in one INFO per node.
func (a *admin) server(ctx context.Context, s *snapshot) error {
	var cpu float64
	s.servers = make([]time.Duration, len(a.clients))
	for i, c := range a.clients {
		if a.dead[i] {
			continue
		}
		info, err := c.Do(ctx, c.B().Info().Section("cpu", "stats").Build()).ToString()
		if err != nil {
			return fmt.Errorf("INFO on %s: %w", a.addrs[i], err)
		}
		for _, k := range [...]string{"used_cpu_sys", "used_cpu_user", "total_commands_processed"} {
			v, ok := redisinfo.Field(info, k)
			f, err := strconv.ParseFloat(v, 64)
			if !ok || err != nil {
				return fmt.Errorf("INFO on %s: %s: %q", a.addrs[i], k, v)
			}
			if k == "total_commands_processed" {
				s.commands += int64(f)
			} else {
				cpu += f
				s.servers[i] += time.Duration(f * float64(time.Second))
			}
		}
	}
	s.server = time.Duration(cpu * float64(time.Second))
	return nil
}

// snapshot is the counters read before and after a measured run.
type snapshot struct {
	client, server time.Duration
	servers        []time.Duration // server, by node
	writes         int64           // -1 when /proc/self/io is unreadable
	// commands the live nodes ran; the INFO that reads them is not
	// counted in its own reading, so a run's difference counts one INFO
	// per node, the one of the snapshot before it.
	commands int64
	sent     int64         // commands the clients sent (wire.go)
	proxy    time.Duration // the proxy process's CPU; -1 without one, or unreadable
}

// take reads the counters, the proxy process's CPU too (nil: none). The
// admin INFO calls write to sockets too, so they come after this process's
// counters on the way in and before them on the way out (see takeAfter):
// they never count toward the run.
func take(ctx context.Context, a *admin, px *proxyProc) (snapshot, error) {
	s := snapshot{proxy: px.cpu()}
	if err := a.server(ctx, &s); err != nil {
		return s, err
	}
	return s, s.own()
}

func takeAfter(ctx context.Context, a *admin, px *proxyProc) (snapshot, error) {
	s := snapshot{proxy: px.cpu()}
	if err := s.own(); err != nil {
		return s, err
	}
	return s, a.server(ctx, &s)
}

func (s *snapshot) own() error {
	var err error
	s.sent = sent.Load() + engines.commands()
	if s.client, err = clientCPU(); err != nil {
		return err
	}
	if s.writes, err = writeSyscalls(); err != nil {
		s.writes = -1
	}
	return nil
}

// merge joins the workers' samples into one sorted slice.
func merge(stats []workerStats, pick func(*workerStats) []time.Duration) []time.Duration {
	n := 0
	for i := range stats {
		n += len(pick(&stats[i]))
	}
	all := make([]time.Duration, 0, n)
	for i := range stats {
		all = append(all, pick(&stats[i])...)
	}
	slices.Sort(all)
	return all
}

// quantile is the nearest-rank q-quantile of sorted, in µs; 0 when empty.
func quantile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return float64(sorted[i]) / float64(time.Microsecond)
}
