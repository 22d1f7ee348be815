package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// Result is one measured run, as written to -json. Latencies are in µs;
// the per-cycle costs divide by completed acquire+release cycles. For a
// held run a cycle is an extension (see heldHelp for every field).
type Result struct {
	Client   string `json:"client"`   // one of clientNames
	Workload string `json:"workload"` // uncontended, contended, degraded or held
	Nodes    int    `json:"nodes"`    // Redis masters the client is configured with
	// DeadNodes is how many of them were dead during the run (degraded:
	// 1); omitted when none.
	DeadNodes int `json:"dead_nodes,omitempty"`
	Workers   int `json:"workers"` // concurrent goroutines
	// AddedRTTUS is the round-trip time added between the clients and
	// each node (-rtt), in µs; MeasuredRTTUS, what the proxies added as
	// measured (PING p50 through one minus direct), omitted when none.
	AddedRTTUS    float64 `json:"added_rtt_us"`
	MeasuredRTTUS float64 `json:"added_rtt_measured_us,omitempty"`
	// Instances is how many client instances (engines) the workers
	// spread over; omitted when one.
	Instances int `json:"instances,omitempty"`
	// HoldUS is how long each holder of a contended run kept the lock
	// (-hold), in µs; omitted when none.
	HoldUS    float64 `json:"hold_us,omitempty"`
	Resources int     `json:"resources"`  // distinct lock names
	DurationS float64 `json:"duration_s"` // measured wall time

	Cycles     int     `json:"cycles"` // completed acquire+release cycles
	CyclesPerS float64 `json:"cycles_per_s"`
	// TriesPerS (trylock only): single-round acquires per second, refused
	// or not.
	TriesPerS *float64 `json:"tries_per_s,omitempty"`

	AcquireP50  float64 `json:"acquire_p50_us"` // successful acquires, retries included
	AcquireP99  float64 `json:"acquire_p99_us"`
	AcquireP999 float64 `json:"acquire_p999_us"`
	ReleaseP50  float64 `json:"release_p50_us"`
	ReleaseP99  float64 `json:"release_p99_us"`

	// Errors counts failed acquires (uncontended: any failure; contended:
	// all retries exhausted) and failed releases; held: see heldHelp.
	Errors     int    `json:"errors"`
	FirstError string `json:"first_error,omitempty"`

	ClientCPU float64 `json:"client_cpu_us_per_cycle"` // getrusage, whole process
	ServerCPU float64 `json:"server_cpu_us_per_cycle"` // INFO cpu, all live nodes
	// ShardCPU, on a Redis Cluster (-cluster), is ServerCPU by master.
	ShardCPU []float64 `json:"shard_cpu_us_per_cycle,omitempty"`
	// Commands is the commands the client sent the nodes per cycle, as
	// they went on the wire (a script is one), retries, cleanups and
	// health probes included; for redlease, the commands its batch
	// scripts carried (its node actors' count; probes not included).
	Commands float64 `json:"commands_per_cycle"`
	// NodeCommands is the commands the live nodes ran per cycle (INFO
	// stats): Commands, the calls inside scripts, and one INFO per node.
	NodeCommands float64 `json:"node_commands_per_cycle"`
	// WriteSyscalls is from /proc/self/io; -1 where that is unreadable.
	WriteSyscalls float64 `json:"write_syscalls_per_cycle"`
	// ProxyCPU is the delay proxies' CPU per cycle (their own process,
	// not in ClientCPU); omitted without added RTT.
	ProxyCPU *float64 `json:"proxy_cpu_us_per_cycle,omitempty"`

	// HandoffP50 and HandoffP99 (contended only): from a holder's call to
	// Release to the acquire of the next holder, another worker,
	// returning. Handoffs counts those changes of holder.
	HandoffP50 *float64 `json:"handoff_p50_us,omitempty"`
	HandoffP99 *float64 `json:"handoff_p99_us,omitempty"`
	Handoffs   *int     `json:"handoffs,omitempty"`
	// RoundP50 (contended only): the client's single-round acquire of a
	// resource nobody else wants, probed every 20ms during the run: an
	// uncontended round at the same load (see probeWorker).
	RoundP50 *float64 `json:"round_p50_us,omitempty"`
	// Fairness (contended only): the fewest acquisitions of a worker over
	// the mean; 1 is perfectly fair, 0 is a worker starved.
	Fairness *float64 `json:"fairness,omitempty"`

	// Held runs only (see heldHelp). The lost-lag fields need the loss
	// phase, which runs only on nodes the bench started itself.
	Leases         *int     `json:"leases,omitempty"`
	HeapPerLease   *float64 `json:"heap_bytes_per_lease,omitempty"`
	HeapWithEvents *float64 `json:"heap_bytes_per_lease_with_events,omitempty"`
	ExtensionsPerS *float64 `json:"extensions_per_s,omitempty"`
	ExtendLateP50  *float64 `json:"extend_late_p50_us,omitempty"`
	ExtendLateP99  *float64 `json:"extend_late_p99_us,omitempty"`
	ExtendLateMax  *float64 `json:"extend_late_max_us,omitempty"`
	ExtendFailed   *int     `json:"extend_failed,omitempty"`
	EventsDropped  *uint64  `json:"events_dropped,omitempty"`
	LostLagP50     *float64 `json:"lost_lag_p50_us,omitempty"`
	LostLagP99     *float64 `json:"lost_lag_p99_us,omitempty"`
	LostLagP999    *float64 `json:"lost_lag_p999_us,omitempty"`
	LostLagMax     *float64 `json:"lost_lag_max_us,omitempty"`
	// LostBeforeUntil is the fraction of lost leases whose end was seen
	// before their Until (a negative lag): the engine's promise is Done
	// no later than Until.
	LostBeforeUntil *float64 `json:"lost_before_until,omitempty"`
}

// summarize turns a run's samples and counters into its Result.
func summarize(r run, nodes int, stats []workerStats, probed []time.Duration, elapsed time.Duration, before, after snapshot, progressWrites int64) Result {
	acq := merge(stats, func(s *workerStats) []time.Duration { return s.acquire })
	rel := merge(stats, func(s *workerStats) []time.Duration { return s.release })
	res := Result{
		Client: r.client, Workload: r.workload, Nodes: nodes, Workers: r.workers, Resources: r.resources,
		AddedRTTUS: micros(r.rtt),
		DurationS:  elapsed.Seconds(), Cycles: len(acq), CyclesPerS: float64(len(acq)) / elapsed.Seconds(),
		AcquireP50: quantile(acq, 0.50), AcquireP99: quantile(acq, 0.99), AcquireP999: quantile(acq, 0.999),
		ReleaseP50: quantile(rel, 0.50), ReleaseP99: quantile(rel, 0.99),
	}
	if r.instances > 1 {
		res.Instances = r.instances
	}
	res.HoldUS = float64(r.hold) / float64(time.Microsecond)
	for i := range stats {
		if res.Errors == 0 && stats[i].firstErr != nil {
			res.FirstError = stats[i].firstErr.Error()
		}
		res.Errors += stats[i].errors
	}
	res.costs(before, after, progressWrites)
	if r.workload == trylock {
		tries := 0
		for i := range stats {
			tries += stats[i].tries
		}
		perS := float64(tries) / elapsed.Seconds()
		res.TriesPerS = &perS
	}
	if r.workload == contended {
		h := merge(stats, func(s *workerStats) []time.Duration { return s.handoff })
		p50, p99 := quantile(h, 0.50), quantile(h, 0.99)
		n := len(h)
		res.HandoffP50, res.HandoffP99, res.Handoffs = &p50, &p99, &n
		if len(probed) > 0 {
			slices.Sort(probed)
			round := quantile(probed, 0.50)
			res.RoundP50 = &round
		}
		f := fairness(stats)
		res.Fairness = &f
	}
	return res
}

// fairness is the fewest acquisitions of a worker over the mean.
func fairness(stats []workerStats) float64 {
	if len(stats) == 0 {
		return 0
	}
	least, total := len(stats[0].acquire), 0
	for i := range stats {
		least = min(least, len(stats[i].acquire))
		total += len(stats[i].acquire)
	}
	if total == 0 {
		return 0
	}
	return float64(least) / (float64(total) / float64(len(stats)))
}

// costs sets the per-cycle CPU and write syscalls from the counters.
func (res *Result) costs(before, after snapshot, progressWrites int64) {
	perCycle := func(v float64) float64 {
		if res.Cycles == 0 {
			return 0
		}
		return v / float64(res.Cycles)
	}
	res.ClientCPU = perCycle(float64(after.client-before.client) / float64(time.Microsecond))
	res.ServerCPU = perCycle(float64(after.server-before.server) / float64(time.Microsecond))
	if clusterMasters > 0 {
		for i := range after.servers {
			res.ShardCPU = append(res.ShardCPU, perCycle(float64(after.servers[i]-before.servers[i])/float64(time.Microsecond)))
		}
	}
	res.Commands = perCycle(float64(after.sent - before.sent))
	res.NodeCommands = perCycle(float64(after.commands - before.commands))
	res.WriteSyscalls = -1
	if before.writes >= 0 && after.writes >= 0 {
		// The progress line's own writes to stderr are not the client's.
		res.WriteSyscalls = perCycle(float64(after.writes - before.writes - progressWrites))
	}
	if before.proxy >= 0 && after.proxy >= 0 {
		px := perCycle(float64(after.proxy-before.proxy) / float64(time.Microsecond))
		res.ProxyCPU = &px
	}
}

// summarizeHeld turns a held run's measurements into its Result: a cycle
// is an extension whose round started during the hold.
func summarizeHeld(r run, nodes int, h *heldOut, before, after snapshot, progressWrites int64) Result {
	res := Result{
		Client: r.client, Workload: r.workload, Nodes: nodes, Workers: r.workers, Resources: r.resources,
		AddedRTTUS: micros(r.rtt),
		DurationS:  h.window.Seconds(), Cycles: len(h.late), CyclesPerS: float64(len(h.late)) / h.window.Seconds(),
		AcquireP50: quantile(h.acquire, 0.50), AcquireP99: quantile(h.acquire, 0.99), AcquireP999: quantile(h.acquire, 0.999),
		ReleaseP50: quantile(h.release, 0.50), ReleaseP99: quantile(h.release, 0.99),
		Errors: h.errors,
	}
	if h.firstErr != nil {
		res.FirstError = h.firstErr.Error()
	}
	res.costs(before, after, progressWrites)
	leases, heap, heapEv, perS := h.leases, h.heapPerLease, h.heapWithEvents, res.CyclesPerS
	p50, p99, pmax := quantile(h.late, 0.50), quantile(h.late, 0.99), quantile(h.late, 1)
	failed, dropped := h.extendFailed, h.dropped
	res.Leases, res.HeapPerLease, res.HeapWithEvents, res.ExtensionsPerS = &leases, &heap, &heapEv, &perS
	res.ExtendLateP50, res.ExtendLateP99, res.ExtendLateMax = &p50, &p99, &pmax
	res.ExtendFailed, res.EventsDropped = &failed, &dropped
	if h.lags != nil {
		l50, l99, l999, lmax := quantile(h.lags, 0.50), quantile(h.lags, 0.99), quantile(h.lags, 0.999), quantile(h.lags, 1)
		early := float64(beforeZero(h.lags)) / float64(max(len(h.lags), 1))
		res.LostLagP50, res.LostLagP99, res.LostLagP999, res.LostLagMax = &l50, &l99, &l999, &lmax
		res.LostBeforeUntil = &early
	}
	return res
}

// printTable writes the results as aligned tables: the comparison runs,
// then the held runs.
func printTable(w io.Writer, results []Result) {
	var cmp, held []Result
	for _, r := range results {
		if r.Workload == heldWorkload {
			held = append(held, r)
		} else {
			cmp = append(cmp, r)
		}
	}
	if len(cmp) > 0 {
		printCompareTable(w, cmp)
	}
	if len(held) > 0 {
		if len(cmp) > 0 {
			fmt.Fprintln(w)
		}
		printHeldTable(w, held)
	}
}

func printCompareTable(w io.Writer, results []Result) {
	const head = "%-21s %-11s %5s %5s %7s %9s %8s %8s %9s %8s %6s %9s %9s %8s %6s %7s %8s %8s %5s %5s\n"
	const rowFmt = "%-21s %-11s %5d %5s %7d %9.0f %8.0f %8.0f %9.0f %8.0f %6d %9.1f %9.1f %8.2f %6.1f %7.1f %8s %8s %5s %5s\n"
	fmt.Fprintln(w, "rtt = round-trip time added between the clients and each node (-rtt); latencies in µs; CPU in µs, writes (write syscalls, this process), cmds (commands the client sent, a script one; redlease: those its batch scripts carried) and calls (commands the nodes ran, a script's calls included) per acquire+release cycle;")
	fmt.Fprintln(w, "contended (workers spread over -instances client instances): hand = hand-off from one holder's Release to another's acquire returning;")
	fmt.Fprintln(w, "round = p50 of the client's single-round acquire of a resource of its own, probed every 20ms during the contended run; fair = fewest acquisitions of a worker / mean")
	fmt.Fprintf(w, head, "client", "workload", "nodes", "rtt", "workers", "cycles/s", "acq p50", "acq p99", "acq p99.9",
		"rel p99", "errors", "cli CPU", "srv CPU", "writes", "cmds", "calls", "hand p50", "hand p99", "round", "fair")
	for _, r := range results {
		h50, h99, round, fair := "-", "-", "-", "-"
		if r.HandoffP50 != nil && r.Handoffs != nil && *r.Handoffs > 0 {
			h50, h99 = fmt.Sprintf("%.0f", *r.HandoffP50), fmt.Sprintf("%.0f", *r.HandoffP99)
		}
		if r.RoundP50 != nil {
			round = fmt.Sprintf("%.0f", *r.RoundP50)
		}
		if r.Fairness != nil {
			fair = fmt.Sprintf("%.2f", *r.Fairness)
		}
		fmt.Fprintf(w, rowFmt, clientLabel(r.Client), r.Workload, r.Nodes, fmtRTT(r.AddedRTTUS), r.Workers, r.CyclesPerS, r.AcquireP50, r.AcquireP99, r.AcquireP999,
			r.ReleaseP99, r.Errors, r.ClientCPU, r.ServerCPU, r.WriteSyscalls, r.Commands, r.NodeCommands, h50, h99, round, fair)
	}
	if slices.ContainsFunc(results, func(r Result) bool { return singleNode[r.Client] }) {
		fmt.Fprintln(w, singleNodeNote)
	}
}

// printHeldTable writes the held runs: memory, extension pace and
// lateness, lost-signal lag, and costs per extension.
func printHeldTable(w io.Writer, results []Result) {
	const head = "%5s %-8s %8s %8s %8s %8s %8s %8s %9s %9s %10s %9s %8s %8s %8s %7s %7s %6s\n"
	fmt.Fprintf(w, "held (redlease only): %v TTL, auto-extended at TTL/3; latencies in µs; CPU in µs and writes (write syscalls, this process) per extension\n", heldTTL)
	fmt.Fprintf(w, head, "rtt", "leases", "heap B/l", "+events", "ext/s", "late p50", "late p99", "late max",
		"lost p50", "lost p99", "lost p99.9", "lost max", "<Until %", "cli CPU", "srv CPU", "writes", "dropped", "errors")
	f0 := func(p *float64) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprintf("%.0f", *p)
	}
	pct := func(p *float64) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprintf("%.2f", 100**p)
	}
	for _, r := range results {
		leases, dropped := "-", "-"
		if r.Leases != nil {
			leases = fmt.Sprint(*r.Leases)
		}
		if r.EventsDropped != nil {
			dropped = fmt.Sprint(*r.EventsDropped)
		}
		fmt.Fprintf(w, head, fmtRTT(r.AddedRTTUS), leases, f0(r.HeapPerLease), f0(r.HeapWithEvents), f0(r.ExtensionsPerS),
			f0(r.ExtendLateP50), f0(r.ExtendLateP99), f0(r.ExtendLateMax),
			f0(r.LostLagP50), f0(r.LostLagP99), f0(r.LostLagP999), f0(r.LostLagMax), pct(r.LostBeforeUntil),
			fmt.Sprintf("%.1f", r.ClientCPU), fmt.Sprintf("%.1f", r.ServerCPU), fmt.Sprintf("%.2f", r.WriteSyscalls),
			dropped, fmt.Sprint(r.Errors))
	}
}

// row is one point of the comparison: the results of every client at one
// added RTT, node count, workload and worker count.
type row struct {
	rtt      float64 // µs
	nodes    int
	workload string
	workers  int
	results  []Result
}

// rows groups results by added RTT, node count, workload and worker
// count, in the order each point first appears.
func rows(results []Result) []row {
	var out []row
	for _, r := range results {
		i := slices.IndexFunc(out, func(x row) bool {
			return x.rtt == r.AddedRTTUS && x.nodes == r.Nodes && x.workload == r.Workload && x.workers == r.Workers
		})
		if i < 0 {
			out = append(out, row{rtt: r.AddedRTTUS, nodes: r.Nodes, workload: r.Workload, workers: r.Workers})
			i = len(out) - 1
		}
		out[i].results = append(out[i].results, r)
	}
	return out
}

// split picks redlease's result out of the row's: nil when the row has
// none; the peers keep their order.
func (w row) split() (redlease *Result, peers []Result) {
	for i := range w.results {
		if w.results[i].Client == "redlease" {
			redlease = &w.results[i]
		} else {
			peers = append(peers, w.results[i])
		}
	}
	return redlease, peers
}

// strongest is the peer with the highest cycles/s (the first of equals);
// peers must not be empty.
func strongest(peers []Result) Result {
	best := peers[0]
	for _, r := range peers[1:] {
		if r.CyclesPerS > best.CyclesPerS {
			best = r
		}
	}
	return best
}

// printRatios writes, per row (node count, workload, workers), redlease's
// cycles/s over the strongest peer's (the highest cycles/s of the row,
// named) with both clients' CPU per cycle, then over each other peer's;
// at 1 worker also redlease's acquire p50 over raw's and raw-tuned's;
// contended, redlease's hand-off p50 over its own round p50.
// Above 1 is better for redlease, except for p50. With added RTT, the rows
// of each RTT come under a heading of their own.
func printRatios(w io.Writer, results []Result) {
	header := false
	withRTT := slices.ContainsFunc(results, func(r Result) bool { return r.AddedRTTUS > 0 })
	group := -1.0 // the RTT whose heading was printed last
	for _, p := range rows(results) {
		rl, peers := p.split()
		if rl == nil || len(peers) == 0 {
			continue
		}
		if !header {
			fmt.Fprintln(w, "\nredlease / peer, cycles/s (the strongest peer of the row first, with both clients' CPU in µs per cycle):")
			header = true
		}
		if withRTT && p.rtt != group {
			group = p.rtt
			fmt.Fprintln(w, " "+rttHeading(rl))
		}
		best := strongest(peers)
		line := fmt.Sprintf("  %d node%s %-11s workers=%-4d %.2f× %s (CPU %.1f vs %.1f)", p.nodes, plural(p.nodes), p.workload, p.workers,
			rl.CyclesPerS/best.CyclesPerS, clientLabel(best.Client), rl.ClientCPU, best.ClientCPU)
		var p50 []string
		for _, r := range peers {
			if r.Client != best.Client {
				line += fmt.Sprintf("  %s %s", clientLabel(r.Client), strings.TrimSpace(ratio(rl.CyclesPerS, r.CyclesPerS)))
			}
			if p.workers == 1 && (r.Client == "raw" || r.Client == "raw-tuned") {
				p50 = append(p50, fmt.Sprintf("%s's %s", r.Client, strings.TrimSpace(ratio(rl.AcquireP50, r.AcquireP50))))
			}
		}
		if len(p50) > 0 {
			line += "  [acquire p50 / " + strings.Join(p50, ", ") + "]"
		}
		if rl.HandoffP50 != nil && rl.RoundP50 != nil {
			line += "  [redlease's hand p50 / its round p50 " + strings.TrimSpace(ratio(*rl.HandoffP50, *rl.RoundP50)) + "]"
		}
		fmt.Fprintln(w, line)
	}
}

// rttHeading names a result's added RTT, with what was measured.
func rttHeading(r *Result) string {
	if r.AddedRTTUS == 0 {
		return "no added RTT:"
	}
	measured := time.Duration(r.MeasuredRTTUS * float64(time.Microsecond)).Round(time.Microsecond)
	return fmt.Sprintf("added RTT %s (measured %v):", fmtRTT(r.AddedRTTUS), measured)
}

// fmtRTT shows an added RTT in µs: 0, 200µs, 1ms.
func fmtRTT(us float64) string {
	if us == 0 {
		return "0"
	}
	return fmtMicros(us)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// printDegradedRatios writes, per worker count, redlease's acquire p50
// and p99 with one node dead over the same without (uncontended at the
// same workers); near 1 means a dead minority costs nothing.
func printDegradedRatios(w io.Writer, results []Result) {
	type point struct {
		rtt            float64
		nodes, workers int
	}
	healthy := map[point]Result{}
	for _, r := range results {
		if r.Client == "redlease" && r.Workload == uncontended {
			healthy[point{r.AddedRTTUS, r.Nodes, r.Workers}] = r
		}
	}
	header := false
	for _, r := range results {
		if r.Client != "redlease" || r.Workload != degraded {
			continue
		}
		h, ok := healthy[point{r.AddedRTTUS, r.Nodes, r.Workers}]
		if !ok {
			continue
		}
		if !header {
			fmt.Fprintf(w, "\nredlease, %d of %d nodes dead / all up (degraded / uncontended):\n", r.DeadNodes, r.Nodes)
			header = true
		}
		at := ""
		if r.AddedRTTUS > 0 {
			at = "rtt=" + fmtRTT(r.AddedRTTUS) + " "
		}
		fmt.Fprintf(w, "  %sworkers=%-4d acquire p50 %s (%s vs %s)   acquire p99 %s (%s vs %s)   cycles/s %s\n", at, r.Workers,
			ratio(r.AcquireP50, h.AcquireP50), fmtMicros(r.AcquireP50), fmtMicros(h.AcquireP50),
			ratio(r.AcquireP99, h.AcquireP99), fmtMicros(r.AcquireP99), fmtMicros(h.AcquireP99),
			ratio(r.CyclesPerS, h.CyclesPerS))
	}
}

func ratio(a, b float64) string {
	if b == 0 {
		return "   n/a"
	}
	return fmt.Sprintf("%5.2f×", a/b)
}

// writeJSON writes the results as a JSON array.
func writeJSON(path string, results []Result) error {
	b, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// beforeZero counts the negative durations in sorted.
func beforeZero(sorted []time.Duration) int {
	n, _ := slices.BinarySearch(sorted, 0)
	return n
}

// printShards gives, for the runs on a Redis Cluster (-cluster), each
// master's CPU per cycle, and how far the masters spread from their mean.
func printShards(w io.Writer, results []Result) {
	for _, r := range results {
		if len(r.ShardCPU) == 0 {
			continue
		}
		mean := r.ServerCPU / float64(len(r.ShardCPU))
		spread := 0.0
		parts := make([]string, len(r.ShardCPU))
		for i, c := range r.ShardCPU {
			parts[i] = fmt.Sprintf("%.1f", c)
			if mean > 0 {
				spread = max(spread, math.Abs(c-mean)/mean)
			}
		}
		fmt.Fprintf(w, "cluster %s %s workers=%d: server CPU per master %s µs/cycle, within %.0f%% of their mean\n",
			r.Client, r.Workload, r.Workers, strings.Join(parts, " / "), 100*spread)
	}
}
