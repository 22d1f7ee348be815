// Package redisinfo reads the text that Redis' INFO command answers: the
// one parser of it that the engine, the test nodes and the benchmark
// share.
package redisinfo

import (
	"net"
	"strconv"
	"strings"
)

// Field returns the value of field name ("run_id", "used_cpu_sys", ...)
// in info, and whether it is there.
func Field(info, name string) (string, bool) {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v, true
		}
	}
	return "", false
}

// Replica is a replica as its master's INFO replication lists it.
type Replica struct {
	Addr  string // host:port, as the replica announced it
	State string // "online", or a sync under way ("wait_bgsave", "send_bulk")
	// Lag is how many bytes of its master's replication stream
	// (master_repl_offset) it has not acknowledged.
	Lag int64
}

// Replicas returns the replicas that info, a master's INFO replication,
// lists (its slave0, slave1, ... lines), in its order.
func Replicas(info string) []Replica {
	var out []Replica
	v, _ := Field(info, "master_repl_offset")
	master, _ := strconv.ParseInt(v, 10, 64)
	for i := 0; ; i++ {
		line, ok := Field(info, "slave"+strconv.Itoa(i))
		if !ok {
			return out
		}
		var r Replica
		var host, port string
		for kv := range strings.SplitSeq(line, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "ip":
				host = v
			case "port":
				port = v
			case "state":
				r.State = v
			case "offset":
				acked, _ := strconv.ParseInt(v, 10, 64)
				r.Lag = max(master-acked, 0)
			}
		}
		r.Addr = net.JoinHostPort(host, port)
		out = append(out, r)
	}
}
