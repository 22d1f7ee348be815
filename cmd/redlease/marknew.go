package main

import (
	"bufio"
	"context"
	"errors"
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
// when engine.CheckNew finds no lock key on any node of -nodes (see
// engine.MarkNew for why). Nodes it refuses wait out their quarantine, or
// an operator empties the deployment first.
func runMarkNew(ctx context.Context, o *options, cfg engine.Config, _ []string, s ios) int {
	nodes, err := engine.InspectNodes(ctx, cfg)
	if err != nil {
		fmt.Fprintf(s.err, "redlease mark-new: %v\n", err)
		return exitUsage
	}
	out := markJSON{Marked: []string{}, Trusted: []string{}, Refused: []refusedJSON{}}
	refuse := func(n engine.NodeReport, why string) {
		if !n.QuarantineUntil.IsZero() {
			why += fmt.Sprintf(" (engines use it from %s, when its quarantine ends)", n.QuarantineUntil.Format(time.RFC3339))
		}
		out.Refused = append(out.Refused, refusedJSON{Node: n.Addr, Why: why})
	}
	var todo []engine.NodeReport
	for _, n := range nodes {
		switch {
		case errors.Is(n.Err, engine.ErrClusterMaster):
			refuse(n, n.Err.Error())
		case n.Err != nil:
			refuse(n, "unreachable: "+n.Err.Error())
		case n.Replica:
			refuse(n, "a read-only replica")
		case n.Evicts != "":
			refuse(n, "maxmemory-policy "+n.Evicts+" evicts lock keys when its memory fills; engines refuse it: set noeviction")
		case n.Trusted:
			out.Trusted = append(out.Trusted, n.Addr)
		default:
			todo = append(todo, n)
		}
	}
	if len(todo) > 0 {
		if err := engine.CheckNew(ctx, cfg); err != nil { // every node of -nodes, not only todo's
			for _, n := range todo {
				refuse(n, err.Error())
			}
			todo = nil
		}
	}
	for _, r := range out.Refused {
		fmt.Fprintf(s.err, "redlease mark-new: not marking %s: %s\n", r.Node, r.Why)
	}
	if len(todo) > 0 && !o.yes && !confirm(s, todo) {
		fmt.Fprintln(s.err, "redlease mark-new: not confirmed; nothing marked")
		return exitFail
	}
	for _, n := range todo {
		mark := cfg
		mark.Nodes = []string{n.Addr}
		if err := engine.MarkNew(ctx, mark); err != nil {
			refuse(n, err.Error())
			continue
		}
		out.Marked = append(out.Marked, n.Addr)
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
func confirm(s ios, todo []engine.NodeReport) bool {
	var addrs []string
	for _, n := range todo {
		addrs = append(addrs, n.Addr)
	}
	fmt.Fprintf(s.err, "Mark %s as new? Engines will use them at once instead of sitting out a restart quarantine.\n"+
		"Only do this if none of them may have lost lock keys of leases still held. Type yes to go on: ", strings.Join(addrs, ", "))
	return answeredYes(s)
}

// answeredYes reads the operator's answer to a question: true for yes.
func answeredYes(s ios) bool {
	line, _ := bufio.NewReader(s.in).ReadString('\n')
	return strings.TrimSpace(line) == "yes"
}
