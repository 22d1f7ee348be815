package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redlease/redlease/engine"
)

type locksJSON struct {
	Quorum int        `json:"quorum"`
	Locks  []lockJSON `json:"locks"`
	Errors []string   `json:"errors,omitempty"` // nodes that could not be scanned
}

type lockJSON struct {
	Resource string `json:"resource"`
	// Held: a quorum holds the lock for Owner; otherwise the keys are the
	// debris of a failed attempt, or of a lease ending.
	Held  bool   `json:"held"`
	Owner string `json:"owner,omitempty"`
	// Meta is the owner's meta (engine.WithMeta), which its value carries.
	Meta  string    `json:"meta,omitempty"`
	Fence uint64    `json:"fence"`
	Keys  []keyJSON `json:"keys"`
}

type keyJSON struct {
	Node      string `json:"node"`
	Value     string `json:"value"`
	TTLMillis int64  `json:"ttl_ms"`
	Error     string `json:"error,omitempty"` // why value and TTL could not be read
}

func runLocks(ctx context.Context, o *options, cfg engine.Config, args []string, s ios) int {
	pattern := "*"
	if len(args) == 1 {
		pattern = args[0]
	}
	reports, err := engine.InspectLocks(ctx, cfg, pattern)
	if err != nil && reports == nil {
		fmt.Fprintf(s.err, "redlease locks: %v\n", err)
		return exitUsage
	}
	out := locksJSON{Quorum: engine.Quorum(len(cfg.Nodes)), Locks: make([]lockJSON, len(reports))}
	for i, r := range reports {
		l := lockJSON{Resource: r.Resource, Held: r.Owner != "", Owner: r.Owner, Meta: engine.MetaOf(r.Owner), Fence: r.Fence}
		for _, k := range r.Keys {
			key := keyJSON{Node: k.Node, Value: k.Value, TTLMillis: k.TTL.Milliseconds()}
			if k.Err != nil {
				key.Error = k.Err.Error()
			}
			l.Keys = append(l.Keys, key)
		}
		out.Locks[i] = l
	}
	if err != nil {
		out.Errors = strings.Split(err.Error(), "\n")
	}
	if o.json {
		printJSON(s.out, out)
	} else {
		printLocks(s, cfg.Nodes, out)
	}
	if err != nil {
		return exitFail
	}
	return exitOK
}

func printLocks(s ios, nodes []string, out locksJSON) {
	w := tabwriter.NewWriter(s.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "RESOURCE\tSTATE\tOWNER\tMETA\tNODES\tTTL PER NODE\tFENCE")
	held := 0
	for _, l := range out.Locks {
		state, owner, meta := "debris", distinct(l.Keys, random), distinct(l.Keys, engine.MetaOf)
		if l.Held {
			state, owner, meta = "held", random(l.Owner), l.Meta
			held++
		}
		if meta == "" {
			meta = "-"
		}
		var which, ttls []string
		for _, k := range l.Keys {
			n := strconv.Itoa(slices.Index(nodes, k.Node) + 1)
			which = append(which, n)
			ttl := ttlText(k.TTLMillis)
			if k.Error != "" {
				ttl = "unreadable" // the error below says why
			}
			ttls = append(ttls, n+":"+ttl)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d/%d (%s)\t%s\t%d\n", printable(l.Resource), state, owner, printable(meta),
			len(l.Keys), len(nodes), strings.Join(which, ","), strings.Join(ttls, " "), l.Fence)
	}
	w.Flush()
	fmt.Fprintf(s.out, "%d resources: %d held by a quorum (%d of %d nodes), %d debris; nodes numbered as in -nodes\n",
		len(out.Locks), held, out.Quorum, len(nodes), len(out.Locks)-held)
	for _, e := range out.Errors {
		fmt.Fprintln(s.out, e)
	}
}

// distinct lists part of the owner values of a resource's keys, once
// each, leaving out "".
func distinct(keys []keyJSON, part func(value string) string) string {
	var parts []string
	for _, k := range keys {
		if p := part(k.Value); p != "" && !slices.Contains(parts, p) {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, ",")
}

// random is an owner value without its meta: the table shows the meta
// apart.
func random(value string) string {
	random, _, _ := strings.Cut(value, engine.MetaSep)
	return random
}

func ttlText(ms int64) string {
	if ms < 0 {
		return "none" // no expiry: not a key redlease wrote
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

// printable quotes a resource name that would garble the table.
func printable(s string) string {
	if strconv.CanBackquote(s) && !strings.ContainsAny(s, " \t") {
		return s
	}
	return strconv.Quote(s)
}
