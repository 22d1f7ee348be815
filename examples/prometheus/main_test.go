package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redlease/redlease/engine"
	"github.com/redlease/redlease/internal/leakcheck"
	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/internal/testwait"
)

func TestMain(m *testing.M) { leakcheck.Main(m, "redlease/", "rueidis", "protoactor") }

// TestMetricsEndpoint runs the example on real nodes and reads /metrics
// as Prometheus would: every redlease instrument is there, under its
// Prometheus name.
func TestMetricsEndpoint(t *testing.T) {
	c := redisproc.Start(t, 3)
	if err := engine.MarkNew(context.Background(), engine.Config{Nodes: c.Addrs()}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, c.Addrs(), "127.0.0.1:0", func(a string) { addr <- a }) }()
	var url string
	select {
	case a := <-addr:
		url = "http://" + a + "/metrics"
	case err := <-done:
		t.Fatalf("run: %v", err)
	}

	node := `node="` + c.Addrs()[0] + `"`
	want := [][]string{ // a line with all of these
		{`redlease_acquire_duration_seconds_bucket{`, `mode="acquire"`, `outcome="acquired"`, `otel_scope_name="github.com/redlease/redlease"`},
		{`redlease_acquire_attempts_bucket{`, `mode="acquire"`},
		{`redlease_lease_active{`},
		{`redlease_lease_duration_seconds_count{`, `end="released"`},
		{`redlease_extend_count_total{`, `outcome="extended"`},
		{`redlease_extend_lateness_seconds_count{`},
		{`redlease_node_rtt_seconds_bucket{`, node},
		{`redlease_node_batch_size_bucket{`, node},
		{`redlease_node_state{`, node, `state="up"} 1`},
		{`redlease_node_restarts_total{`, node},
		{`redlease_events_dropped_total{`},
	}
	var body string
	var missing []string
	defer func() {
		if t.Failed() {
			t.Logf("no line with all of %q in /metrics:\n%s", missing, body)
		}
	}()
	testwait.Eventually(t, 10*time.Second, "every instrument in /metrics", func() bool {
		body = get(t, url)
		missing = missingLine(body, want)
		return missing == nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run after its context ended: %v", err)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	return string(b)
}

// missingLine returns the first of want whose parts no line of body has
// all of, or nil.
func missingLine(body string, want [][]string) []string {
	lines := strings.Split(body, "\n")
next:
	for _, parts := range want {
		for _, line := range lines {
			if all(line, parts) {
				continue next
			}
		}
		return parts
	}
	return nil
}

func all(line string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(line, p) {
			return false
		}
	}
	return true
}
