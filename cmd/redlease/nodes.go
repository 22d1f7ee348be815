package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/redlease/redlease/engine"
)

// A node's state, as an engine meeting it now would judge it.
const (
	stateServing     = "serving"
	stateQuarantined = "quarantined"
	stateReplica     = "replica"
	stateEvicting    = "evicting"
	stateUnreachable = "unreachable"
	stateRefused     = "refused" // not a node: a master of a Redis Cluster
)

func nodeState(r engine.NodeReport, now time.Time) string {
	switch {
	case errors.Is(r.Err, engine.ErrClusterMaster):
		return stateRefused
	case r.Err != nil:
		return stateUnreachable
	case r.Replica:
		return stateReplica
	case r.Evicts != "":
		return stateEvicting
	case !r.Serves(now):
		return stateQuarantined
	}
	return stateServing
}

type nodesJSON struct {
	Quorum  int        `json:"quorum"`
	Serving int        `json:"serving"` // nodes that can serve an acquire now
	Nodes   []nodeJSON `json:"nodes"`
}

type nodeJSON struct {
	Node                  string        `json:"node"`
	Server                string        `json:"server,omitempty"` // a master set's master now
	State                 string        `json:"state"`
	Error                 string        `json:"error,omitempty"`
	Role                  string        `json:"role,omitempty"`
	RunID                 string        `json:"run_id,omitempty"`
	MaxmemoryPolicy       string        `json:"maxmemory_policy,omitempty"` // only when it may evict lock keys
	UptimeSeconds         int64         `json:"uptime_seconds"`
	Trusted               bool          `json:"trusted"`
	QuarantineUntil       *time.Time    `json:"quarantine_until,omitempty"`
	QuarantineLeftSeconds float64       `json:"quarantine_left_seconds"`
	RTTMillis             float64       `json:"rtt_ms"`
	Slots                 int           `json:"slots,omitempty"`    // a cluster's master: how many slots it serves
	Shards                []nodeJSON    `json:"shards,omitempty"`   // a Redis Cluster's masters
	Replicas              []replicaJSON `json:"replicas,omitempty"` // a master's, as it lists them
}

type replicaJSON struct {
	Addr     string `json:"addr"`
	State    string `json:"state"`     // its link: online, or a sync under way
	LagBytes int64  `json:"lag_bytes"` // of its master's stream, not acknowledged (as of its last ack: one a second)
}

func runNodes(ctx context.Context, o *options, cfg engine.Config, _ []string, s ios) int {
	reports, err := engine.InspectNodes(ctx, cfg)
	if err != nil {
		fmt.Fprintf(s.err, "redlease nodes: %v\n", err)
		return exitUsage
	}
	now := time.Now()
	quorum := engine.Quorum(len(reports))
	out := nodesJSON{Quorum: quorum, Nodes: make([]nodeJSON, len(reports))}
	for i, r := range reports {
		n := nodeOf(r, now)
		for _, sh := range r.Shards {
			n.Shards = append(n.Shards, nodeOf(sh, now))
		}
		if n.State == stateServing {
			out.Serving++
		}
		out.Nodes[i] = n
	}
	if o.json {
		printJSON(s.out, out)
	} else {
		printNodes(s, out)
	}
	if out.Serving < quorum {
		return exitFail
	}
	return exitOK
}

// nodeOf is r as the command shows it.
func nodeOf(r engine.NodeReport, now time.Time) nodeJSON {
	n := nodeJSON{Node: r.Addr, State: nodeState(r, now), RunID: r.RunID, MaxmemoryPolicy: r.Evicts,
		UptimeSeconds: int64(r.Uptime / time.Second), Trusted: r.Trusted, RTTMillis: float64(r.RTT) / float64(time.Millisecond),
		Slots: r.Slots}
	for _, rep := range r.Replicas {
		n.Replicas = append(n.Replicas, replicaJSON{Addr: rep.Addr, State: rep.State, LagBytes: rep.Lag})
	}
	if r.Server != r.Addr {
		n.Server = r.Server
	}
	switch {
	case r.Err != nil:
		n.Error = r.Err.Error()
	case r.Replica:
		n.Role = "replica"
	case r.Shards != nil:
		n.Role = "cluster"
	default:
		n.Role = "master"
	}
	if r.QuarantineUntil.After(now) {
		n.QuarantineUntil = &r.QuarantineUntil
		n.QuarantineLeftSeconds = r.QuarantineUntil.Sub(now).Seconds()
	}
	return n
}

func printNodes(s ios, out nodesJSON) {
	w := tabwriter.NewWriter(s.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tSTATE\tROLE\tRUN ID\tUPTIME\tTRUSTED\tQUARANTINE\tRTT")
	var row func(n nodeJSON, indent string)
	row = func(n nodeJSON, indent string) {
		n.Node = indent + n.Node
		switch {
		case n.Server != "":
			n.Node += " (master " + n.Server + ")"
		case n.Slots > 0:
			n.Node += fmt.Sprintf(" (%d slots)", n.Slots)
		}
		quarantine := "-"
		if n.QuarantineUntil != nil {
			quarantine = fmt.Sprintf("%.1fs left (until %s)", n.QuarantineLeftSeconds, n.QuarantineUntil.Format("15:04:05.000"))
		}
		switch {
		case n.Error != "" && n.Shards == nil:
			fmt.Fprintf(w, "%s\t%s\t-\t-\t-\t-\t-\t-\n", n.Node, n.State)
		case n.Shards != nil: // a cluster: its masters below
			fmt.Fprintf(w, "%s\t%s\t%s\t-\t-\t%s\t%s\t-\n", n.Node, n.State, n.Role, yesNo(n.Trusted), quarantine)
		default:
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%v\t%s\t%s\t%.2fms\n", n.Node, n.State, n.Role, short(n.RunID),
				time.Duration(n.UptimeSeconds)*time.Second, yesNo(n.Trusted), quarantine, n.RTTMillis)
		}
		for _, r := range n.Replicas { // below their master, its link's state as theirs
			fmt.Fprintf(w, "%s  %s\t%s\treplica\t-\t-\t-\t-\t-\n", indent, r.Addr, r.State)
		}
		for _, sh := range n.Shards {
			row(sh, indent+"  ")
		}
	}
	for _, n := range out.Nodes {
		row(n, "")
	}
	w.Flush()
	for _, n := range out.Nodes {
		switch {
		case n.Error != "":
			fmt.Fprintln(s.out, n.Error) // names the node
		case n.MaxmemoryPolicy != "":
			fmt.Fprintf(s.out, "node %s: maxmemory-policy %s evicts lock keys when its memory fills; engines refuse it: set noeviction\n", n.Node, n.MaxmemoryPolicy)
		}
	}
	verdict := "engines can acquire"
	if out.Serving < out.Quorum {
		verdict = "fewer than a quorum: engines cannot acquire now"
	}
	fmt.Fprintf(s.out, "%d nodes, quorum %d: %d can serve now; %s\n", len(out.Nodes), out.Quorum, out.Serving, verdict)
}

// short abbreviates a run id for the table; -json prints it whole.
func short(runID string) string {
	if len(runID) > 12 {
		return runID[:12]
	}
	return runID
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
