package main

import (
	"bufio"
	"bytes"
	_ "embed"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// markdownHead is the fixed explanation at the top of every -markdown
// page: what the workloads are, how to read the tables, the peers. It is
// written for docs/PERFORMANCE.md (its links are relative to docs/).
//
//go:embed performance_head.md
var markdownHead string

// machine is where and how a suite ran, for the -markdown page.
type machine struct {
	Command    string    // the command line, as it would be typed at the repository root
	Date       time.Time // when the suite started
	Took       time.Duration
	CPU        string // model name from /proc/cpuinfo; "" when unreadable
	NumCPU     int
	GOMAXPROCS int
	Memory     string // MemTotal from /proc/meminfo; "" when unreadable
	GoVersion  string
	OS         string // GOOS/GOARCH
	Redis      string // redis_version of the first node; "" when unknown
	// JSON and Plot are the files -json and -plot wrote in the same
	// suite, relative to the page's directory; "" when none.
	JSON, Plot string
}

// thisMachine reads what it can of the machine the suite runs on.
func thisMachine(args []string, start time.Time) machine {
	return machine{
		Command:    commandLine(args),
		Date:       start,
		CPU:        procField("/proc/cpuinfo", "model name"),
		NumCPU:     runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		Memory:     memTotal(),
		GoVersion:  runtime.Version(),
		OS:         runtime.GOOS + "/" + runtime.GOARCH,
	}
}

// commandLine is the bench's command line as typed at the repository
// root: go run ./bench, then args, quoted for a POSIX shell where needed.
func commandLine(args []string) string {
	parts := []string{"go", "run", "./bench"}
	for _, a := range args {
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,/:+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// procField is the value of the first "key : value" line of a /proc
// file whose key is key; "" when there is none.
func procField(path, key string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// memTotal is MemTotal from /proc/meminfo in GiB; "" when unreadable.
func memTotal() string {
	v := procField("/proc/meminfo", "MemTotal") // "24576000 kB"
	var kb float64
	if _, err := fmt.Sscanf(v, "%f kB", &kb); err != nil || kb <= 0 {
		return ""
	}
	return fmt.Sprintf("%.0f GiB", kb/(1<<20))
}

// relTo is path relative to the directory of page, for a link from page;
// "" when path is "".
func relTo(page, path string) string {
	if path == "" {
		return ""
	}
	dir, err := filepath.Abs(filepath.Dir(page))
	if err != nil {
		return filepath.ToSlash(path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return filepath.ToSlash(path)
	}
	rel, err := filepath.Rel(dir, abs)
	if err != nil {
		return filepath.ToSlash(abs)
	}
	return filepath.ToSlash(rel)
}

// printResults writes what the suite prints on stdout once it is done:
// the failover workload's table (when it ran), the tables of the runs,
// the ratios against the peers, the degraded ratios and the cluster's
// masters. Both stdout and -markdown are written by it.
func printResults(w io.Writer, fo *failoverResult, results []Result) {
	if fo != nil {
		fo.print(w)
		if len(results) > 0 {
			fmt.Fprintln(w)
		}
	}
	if len(results) == 0 {
		return
	}
	printTable(w, results)
	printRatios(w, results)
	printDegradedRatios(w, results)
	printShards(w, results)
}

// writeMarkdown writes the -markdown page: the fixed head, the command
// line, date and machine of this suite, then the same tables it printed
// on stdout, in a fenced block. runErr, when the suite ended early, is
// said above the tables.
func writeMarkdown(path string, m machine, fo *failoverResult, results []Result, runErr error) error {
	var b bytes.Buffer
	markdown(&b, m, fo, results, runErr)
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func markdown(w io.Writer, m machine, fo *failoverResult, results []Result, runErr error) {
	fmt.Fprint(w, strings.TrimRight(markdownHead, "\n")+"\n\n")
	fmt.Fprintln(w, "## The run")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Written by this command, at the repository root:")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "```sh\n%s\n```\n\n", m.Command)
	date := m.Date.UTC().Format("2006-01-02 15:04 UTC")
	if m.Took > 0 {
		date += fmt.Sprintf(" (the suite took %v)", m.Took.Round(time.Second))
	}
	fmt.Fprintf(w, "- Date: %s\n", date)
	cpu := m.CPU
	if cpu == "" {
		cpu = "CPU model unknown"
	}
	fmt.Fprintf(w, "- Machine: %s, %d CPU%s, GOMAXPROCS=%d", cpu, m.NumCPU, plural(m.NumCPU), m.GOMAXPROCS)
	if m.Memory != "" {
		fmt.Fprintf(w, ", %s of memory", m.Memory)
	}
	fmt.Fprintf(w, ", %s\n", m.OS)
	fmt.Fprintf(w, "- Go: %s\n", m.GoVersion)
	if m.Redis != "" {
		fmt.Fprintf(w, "- Redis: %s\n", m.Redis)
	}
	fmt.Fprintf(w, "- Runs: %d\n", len(results))
	if m.JSON != "" {
		fmt.Fprintf(w, "- Every field of every run: [%s](%s) (`-json`)\n", m.JSON, m.JSON)
	}
	if runErr != nil {
		fmt.Fprintf(w, "\n**The suite ended early** (%v): the tables hold the runs done before.\n", runErr)
	}
	if m.Plot != "" {
		fmt.Fprintf(w, "\n![cycles/s and acquire p99 against workers, per client](%s)\n", m.Plot)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "```text")
	var t bytes.Buffer
	printResults(&t, fo, results)
	w.Write(bytes.TrimLeft(t.Bytes(), "\n"))
	fmt.Fprintln(w, "```")
}
