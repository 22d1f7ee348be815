package main

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redlease/redlease/engine"
)

type markJSON struct {
	Marked  []string      `json:"marked"`
	Trusted []string      `json:"already_trusted"` // nothing to do
	Refused []refusedJSON `json:"refused"`
}

type refusedJSON struct {
	Node string `json:"node"`
	Why  string `json:"why"`
}

// runMarkNew marks the nodes that are reachable masters, not yet trusted,
// when no node holds a lock key. A node that holds one may have come back
// from a snapshot with keys of leases still held; and while any node holds
// one, leases may be live, and a node without keys may have lost theirs
// (a restart without persistence): exactly what the quarantine guards
// against. Such nodes wait out their quarantine, or an operator empties
// the deployment first.
func runMarkNew(ctx context.Context, o *options, _ []string, s ios) int {
	cfg, err := o.config()
	if err != nil {
		fmt.Fprintf(s.err, "redlease mark-new: %v\n", err)
		return exitUsage
	}
	nodes, err := engine.InspectNodes(ctx, cfg)
	if err != nil {
		fmt.Fprintf(s.err, "redlease mark-new: %v\n", err)
		return exitUsage
	}
	locks, lockErr := engine.InspectLocks(ctx, cfg, "*")
	keys, total := make(map[string]int), 0 // lock keys per node, in all
	for _, l := range locks {
		for _, k := range l.Keys {
			keys[k.Node]++
			total++
		}
	}
	out := markJSON{Marked: []string{}, Trusted: []string{}, Refused: []refusedJSON{}}
	var todo []string
	for _, n := range nodes {
		why := ""
		switch {
		case n.Err != nil:
			why = "unreachable: " + n.Err.Error()
		case n.Replica:
			why = "a read-only replica"
		case n.Trusted:
			out.Trusted = append(out.Trusted, n.Addr)
			continue
		case lockErr != nil:
			why = "the lock keys of every node could not be listed (leave out nodes that are down): " + lockErr.Error()
		case keys[n.Addr] > 0:
			why = fmt.Sprintf("holds %d lock keys: its data may be live locks", keys[n.Addr])
		case total > 0:
			why = fmt.Sprintf("other nodes hold %d lock keys: leases may be live, and this node may have lost their keys", total)
		}
		if why != "" && !n.QuarantineUntil.IsZero() {
			why += fmt.Sprintf(" (engines use it from %s, when its quarantine ends)", n.QuarantineUntil.Format(time.RFC3339))
		}
		if why != "" {
			out.Refused = append(out.Refused, refusedJSON{Node: n.Addr, Why: why})
			continue
		}
		todo = append(todo, n.Addr)
	}
	for _, r := range out.Refused {
		fmt.Fprintf(s.err, "redlease mark-new: not marking %s: %s\n", r.Node, r.Why)
	}
	if len(todo) > 0 && !o.yes && !confirm(s, todo) {
		fmt.Fprintln(s.err, "redlease mark-new: not confirmed; nothing marked")
		return exitFail
	}
	if len(todo) > 0 {
		for _, addr := range todo {
			mark := cfg
			mark.Nodes = []string{addr}
			if err := engine.MarkNew(ctx, mark); err != nil {
				out.Refused = append(out.Refused, refusedJSON{Node: addr, Why: err.Error()})
				continue
			}
			out.Marked = append(out.Marked, addr)
		}
	}
	if o.json {
		printJSON(s.out, out)
	} else {
		for _, addr := range out.Marked {
			fmt.Fprintf(s.out, "%s: marked new; engines use it at once\n", addr)
		}
		for _, addr := range out.Trusted {
			fmt.Fprintf(s.out, "%s: already trusted; left as it is\n", addr)
		}
		for _, r := range out.Refused {
			fmt.Fprintf(s.out, "%s: NOT marked: %s\n", r.Node, r.Why)
		}
	}
	if len(out.Refused) > 0 {
		return exitFail
	}
	return exitOK
}

// confirm asks the operator to type yes.
func confirm(s ios, todo []string) bool {
	fmt.Fprintf(s.err, "Mark %s as new? Engines will use them at once instead of sitting out a restart quarantine.\n"+
		"Only do this if none of them may have lost lock keys of leases still held. Type yes to go on: ", strings.Join(todo, ", "))
	line, _ := bufio.NewReader(s.in).ReadString('\n')
	return strings.TrimSpace(line) == "yes"
}
