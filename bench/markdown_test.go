package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestMarkdown checks the -markdown page of a suite: the fixed head, the
// command line, the date and machine, the links to what -json and -plot
// wrote, and, in one fenced block, exactly what the suite printed on
// stdout (the same printers).
func TestMarkdown(t *testing.T) {
	fair, h50, h99, round, handoffs := 0.98, 140.0, 400.0, 180.0, 1000
	results := []Result{
		{Client: "redlease", Workload: uncontended, Nodes: 1, Workers: 128, CyclesPerS: 100_000, AcquireP50: 400, ClientCPU: 6, ServerCPU: 3.5},
		{Client: "raw-tuned", Workload: uncontended, Nodes: 1, Workers: 128, CyclesPerS: 125_000, AcquireP50: 300, ClientCPU: 4, ServerCPU: 2.7},
		{Client: "redlease", Workload: contended, Nodes: 5, Workers: 16, Instances: 3, CyclesPerS: 6000,
			Fairness: &fair, HandoffP50: &h50, HandoffP99: &h99, RoundP50: &round, Handoffs: &handoffs},
	}
	m := machine{
		Command: commandLine([]string{"-workload", "uncontended,contended", "-markdown", "docs/PERFORMANCE.md", "-rtt", "0,1ms", "-kinds", "a b"}),
		Date:    time.Date(2026, 11, 28, 9, 30, 0, 0, time.UTC), Took: 95 * time.Second,
		CPU: "AMD EPYC 7B13", NumCPU: 2, GOMAXPROCS: 2, Memory: "24 GiB", GoVersion: "go1.26.8", OS: "linux/amd64",
		Redis: "7.0.15", JSON: "bench.json", Plot: "bench.svg",
	}
	var page bytes.Buffer
	markdown(&page, m, nil, results, nil)
	got := page.String()

	var stdout bytes.Buffer
	printResults(&stdout, nil, results)
	for _, want := range []string{
		"# Performance\n",
		"## The run\n",
		"```sh\ngo run ./bench -workload uncontended,contended -markdown docs/PERFORMANCE.md -rtt 0,1ms -kinds 'a b'\n```\n",
		"- Date: 2026-11-28 09:30 UTC (the suite took 1m35s)\n",
		"- Machine: AMD EPYC 7B13, 2 CPUs, GOMAXPROCS=2, 24 GiB of memory, linux/amd64\n",
		"- Go: go1.26.8\n",
		"- Redis: 7.0.15\n",
		"- Runs: 3\n",
		"[bench.json](bench.json)",
		"![cycles/s and acquire p99 against workers, per client](bench.svg)",
		"```text\n" + stdout.String() + "```\n",
		"0.80× raw-tuned", // the ratios are there: 100k / 125k
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the page lacks %q; got:\n%s", want, got)
		}
	}
	if strings.Contains(got, "ended early") {
		t.Errorf("a suite that ran to its end is said to have ended early:\n%s", got)
	}

	page.Reset()
	markdown(&page, machine{Command: "go run ./bench"}, nil, results[:1], errors.New("interrupted"))
	if got := page.String(); !strings.Contains(got, "**The suite ended early** (interrupted)") || !strings.Contains(got, "CPU model unknown") {
		t.Errorf("a suite ended early, on a machine unread: got\n%s", got)
	}
	if strings.Contains(page.String(), "bench.json") {
		t.Errorf("links to -json's file when the suite wrote none:\n%s", page.String())
	}
}

func TestRelTo(t *testing.T) {
	for _, c := range []struct{ page, path, want string }{
		{"docs/PERFORMANCE.md", "docs/bench.json", "bench.json"},
		{"docs/PERFORMANCE.md", "bench/out.svg", "../bench/out.svg"},
		{"/tmp/x.md", "/tmp/y/z.json", "y/z.json"},
		{"docs/PERFORMANCE.md", "", ""},
	} {
		if got := relTo(c.page, c.path); got != c.want {
			t.Errorf("relTo(%q, %q) = %q, want %q", c.page, c.path, got, c.want)
		}
	}
}
