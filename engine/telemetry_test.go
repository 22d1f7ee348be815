package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redlease/redlease/internal/redisproc"
	"github.com/redlease/redlease/internal/testwait"
)

// readings is one collection of the engine's metrics, by name.
type readings map[string]metricdata.Aggregation

func read(t *testing.T, r *sdkmetric.ManualReader) readings {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := readings{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != instrumentationName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, instrumentationName)
		}
		for _, m := range sm.Metrics {
			got[m.Name] = m.Data
		}
	}
	return got
}

// has reports whether a data point's attributes include every one of want.
func has(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// count sums the counts of a histogram's points that carry attrs.
func (r readings) count(name string, attrs ...attribute.KeyValue) uint64 {
	var n uint64
	switch d := r[name].(type) {
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			if has(p.Attributes, attrs) {
				n += p.Count
			}
		}
	case metricdata.Histogram[int64]:
		for _, p := range d.DataPoints {
			if has(p.Attributes, attrs) {
				n += p.Count
			}
		}
	}
	return n
}

// value sums the values of a sum's or gauge's points that carry attrs;
// ok is false when there is none.
func (r readings) value(name string, attrs ...attribute.KeyValue) (v int64, ok bool) {
	var points []metricdata.DataPoint[int64]
	switch d := r[name].(type) {
	case metricdata.Sum[int64]:
		points = d.DataPoints
	case metricdata.Gauge[int64]:
		points = d.DataPoints
	}
	for _, p := range points {
		if has(p.Attributes, attrs) {
			v, ok = v+p.Value, true
		}
	}
	return v, ok
}

// TestTelemetry runs a scripted scenario on real nodes with the
// OpenTelemetry SDK and checks that the readings and spans match it:
// acquire, contend, cancel, extend by hand and automatically, lose a lease
// by pausing a majority, release, and close the engine over a held lease.
func TestTelemetry(t *testing.T) {
	c := startNodes(t, 3)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer mp.Shutdown(context.Background())
	defer tp.Shutdown(context.Background())
	e, err := New(Config{Nodes: c.Addrs(), MeterProvider: mp, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, parent := tp.Tracer("test").Start(context.Background(), "parent")

	held, err := e.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	// Held by another engine: a TryAcquire of a resource held here would
	// be refused without a round.
	other := newEngine(t, c.Addrs())
	elsewhere, err := other.Acquire(ctx, "a-elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.TryAcquire(ctx, "a-elsewhere"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held resource: %v, want ErrNotAcquired", err)
	}
	if err := elsewhere.Release(ctx); err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := e.Acquire(canceled, "x"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with a canceled context: %v", err)
	}
	if err := held.Extend(ctx); err != nil {
		t.Fatal(err)
	}
	auto, err := e.Acquire(ctx, "b", WithTTL(300*time.Millisecond), WithAutoExtend(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for ev := range auto.Events() {
		if ev.Kind == Extended {
			break
		}
	}
	r := read(t, reader)
	if v, _ := r.value("redlease.lease.active"); v != 2 {
		t.Errorf("lease.active %d with two leases held", v)
	}
	for i, addr := range c.Addrs() {
		node := attribute.String("node", addr)
		if up, ok := r.value("redlease.node.state", node, attribute.String("state", "up")); !ok || up != 1 {
			t.Errorf("node %d state up: %d (%v), want 1", i, up, ok)
		}
		if n, ok := r.value("redlease.node.restarts", node); !ok || n != 0 {
			t.Errorf("node %d restarts: %d (%v), want 0", i, n, ok)
		}
		if r.count("redlease.node.rtt", node) == 0 || r.count("redlease.node.batch.size", node) == 0 {
			t.Errorf("node %d: no round trip recorded", i)
		}
	}

	// Pause a majority: the auto-extended lease fails to extend and is
	// lost at its deadline; the paused nodes are marked down.
	for _, n := range c.Nodes[1:] {
		if err := n.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	<-auto.Done()
	if !errors.Is(auto.Err(), ErrLeaseLost) {
		t.Errorf("auto-extended lease under a paused majority ended with %v, want ErrLeaseLost", auto.Err())
	}
	paused := attribute.String("node", c.Addrs()[1])
	testwait.Eventually(t, 5*time.Second, "a paused node reads down", func() bool {
		down, ok := read(t, reader).value("redlease.node.state", paused, attribute.String("state", "down"))
		return ok && down == 0
	})
	for _, n := range c.Nodes[1:] {
		if err := n.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Eventually(t, 5*time.Second, "the paused nodes up again", func() bool {
		up, ok := read(t, reader).value("redlease.node.state", paused, attribute.String("state", "up"))
		return ok && up == 1
	})

	// A node restarted without its data is quarantined, and counted.
	if err := c.Nodes[2].Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := attribute.String("node", c.Addrs()[2])
	testwait.Eventually(t, 5*time.Second, "the restarted node reads quarantined, one restart", func() bool {
		r := read(t, reader)
		q, ok := r.value("redlease.node.state", restarted, attribute.String("state", "quarantined"))
		n, _ := r.value("redlease.node.restarts", restarted)
		return ok && q == 0 && n == 1
	})

	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Acquire(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	parent.End()

	r = read(t, reader)
	acq, try := attribute.String("mode", "acquire"), attribute.String("mode", "try")
	for _, tc := range []struct {
		name  string
		attrs []attribute.KeyValue
		want  uint64
	}{
		{"redlease.acquire.duration", []attribute.KeyValue{acq, attribute.String("outcome", "acquired")}, 3},
		{"redlease.acquire.duration", []attribute.KeyValue{try, attribute.String("outcome", "not_acquired")}, 1},
		{"redlease.acquire.duration", []attribute.KeyValue{acq, attribute.String("outcome", "canceled")}, 1},
		{"redlease.acquire.attempts", []attribute.KeyValue{acq, attribute.String("outcome", "acquired")}, 3},
		{"redlease.acquire.attempts", []attribute.KeyValue{try}, 1},
		{"redlease.lease.duration", []attribute.KeyValue{attribute.String("end", "released")}, 1},
		{"redlease.lease.duration", []attribute.KeyValue{attribute.String("end", "lost")}, 1},
		{"redlease.lease.duration", []attribute.KeyValue{attribute.String("end", "closed")}, 1},
		{"redlease.lease.duration", []attribute.KeyValue{attribute.String("end", "expired")}, 0},
	} {
		if got := r.count(tc.name, tc.attrs...); got != tc.want {
			t.Errorf("%s %v: %d recorded, want %d", tc.name, tc.attrs, got, tc.want)
		}
	}
	if v, _ := r.value("redlease.lease.active"); v != 0 {
		t.Errorf("lease.active %d after every lease ended", v)
	}
	if n, _ := r.value("redlease.extend.count", attribute.String("outcome", "extended")); n < 2 {
		t.Errorf("extend.count extended: %d, want the manual one and at least one automatic", n)
	}
	if n, _ := r.value("redlease.extend.count", attribute.String("outcome", "failed")); n < 1 {
		t.Errorf("extend.count failed: %d, want at least one under a paused majority", n)
	}
	if r.count("redlease.extend.lateness") == 0 {
		t.Error("no automatic extension's lateness recorded")
	}
	if _, ok := r.value("redlease.events.dropped"); ok {
		t.Error("events.dropped still observed after Close") // unregistered with the nodes
	}

	byName := map[string][]tracetest.SpanStub{}
	for _, s := range spans.GetSpans() {
		byName[s.Name] = append(byName[s.Name], s)
		if s.Name != "parent" && s.Parent.SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %s is not a child of the caller's span", s.Name)
		}
	}
	for name, want := range map[string]int{"redlease.Acquire": 4, "redlease.TryAcquire": 1, "redlease.Extend": 1, "redlease.Release": 1} {
		if got := len(byName[name]); got != want {
			t.Errorf("%d %s spans, want %d", got, name, want)
		}
	}
	won := 0
	for _, s := range byName["redlease.Acquire"] {
		attrs := attribute.NewSet(s.Attributes...)
		if !has(attrs, []attribute.KeyValue{attribute.String("redlease.resource", "a"), attribute.String("redlease.outcome", "acquired")}) {
			continue
		}
		won++
		granted := 0
		for _, ev := range s.Events {
			if has(attribute.NewSet(ev.Attributes...), []attribute.KeyValue{attribute.String("outcome", "granted")}) {
				granted++
			}
		}
		if granted < 2 || s.Status.Code == codes.Error {
			t.Errorf("acquired span: %d granted node events, status %v; want a quorum's answers, no error", granted, s.Status)
		}
	}
	if won != 1 {
		t.Errorf("%d acquired spans for a, want 1", won)
	}
	if s := byName["redlease.TryAcquire"]; len(s) == 1 {
		if s[0].Status.Code != codes.Error || len(s[0].Events) < 3 {
			t.Errorf("refused TryAcquire span: status %v, %d events; want an error and each node's answer", s[0].Status, len(s[0].Events))
		}
		if !has(attribute.NewSet(s[0].Attributes...), []attribute.KeyValue{attribute.String("redlease.resource", "a-elsewhere"), attribute.String("redlease.outcome", "not_acquired")}) {
			t.Errorf("refused TryAcquire span attributes: %v", s[0].Attributes)
		}
	}
}

// TestTelemetryNoopCostsNothing: with the global providers left at their
// no-op defaults, starting a call's span allocates nothing, where the
// global tracer's own non-recording spans cost allocations on every call.
func TestTelemetryNoopCostsNothing(t *testing.T) {
	c := startNodes(t, 1)
	e, err := New(Config{Nodes: c.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	ours := testing.AllocsPerRun(100, func() { e.tel.start(ctx, "x") })
	global := testing.AllocsPerRun(100, func() { e.tel.tracer.Start(ctx, "x") })
	if ours != 0 || global == 0 {
		t.Errorf("a span with no tracer provider set: %v allocations, the global tracer's %v; want 0 and some", ours, global)
	}
}

// A Redis Cluster node's figures carry the shard, its master's address:
// each shard's state and round trips.
func TestTelemetryOfACluster(t *testing.T) {
	t.Parallel() // it waits on its own cluster or master set, not on the CPU
	c := redisproc.StartRedisClusterT(t, 2, 0)
	spec := clusterNode(c)
	if err := MarkNew(t.Context(), Config{Nodes: []string{spec}}); err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	e := newEngine(t, []string{spec}, func(cfg *Config) { cfg.MeterProvider = mp })
	for i := range 50 { // over both shards
		l, err := e.TryAcquire(t.Context(), fmt.Sprint("r", i))
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Release(t.Context())
	}
	masters, err := c.Masters(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	r := read(t, reader)
	for _, m := range masters {
		attrs := []attribute.KeyValue{attribute.String("node", spec), attribute.String("shard", m.Addr())}
		if up, ok := r.value("redlease.node.state", append(attrs, attribute.String("state", "up"))...); !ok || up != 1 {
			t.Errorf("shard %s state up: %d (%v), want 1", m.Addr(), up, ok)
		}
		if n := r.count("redlease.node.rtt", attrs...); n == 0 {
			t.Errorf("shard %s: no round trip measured", m.Addr())
		}
	}
}
