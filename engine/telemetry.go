package engine

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/redlease/redlease/lease"
	"github.com/redlease/redlease/node"
)

// instrumentationName names the engine's meter and tracer: the module path.
const instrumentationName = "github.com/redlease/redlease"

// Attribute values of the engine's instruments: few, fixed, so that every
// attribute set is made once and recording allocates nothing.
var (
	acquireModes    = [...]string{modeAcquire: "acquire", modeTry: "try"}
	acquireOutcomes = [...]string{outcomeAcquired: "acquired", outcomeNotAcquired: "not_acquired", outcomeCanceled: "canceled", outcomeError: "error"}
	leaseEnds       = [...]string{endReleased: "released", endLost: "lost", endExpired: "expired", endClosed: "closed", endDetached: "detached"}
	extendOutcomes  = [...]string{extendOK: "extended", extendFailed: "failed"}
)

const (
	modeAcquire = iota
	modeTry
)

const (
	outcomeAcquired = iota
	outcomeNotAcquired
	outcomeCanceled
	outcomeError
)

const (
	endReleased = iota
	endLost
	endExpired
	endClosed
	endDetached
)

const (
	extendOK = iota
	extendFailed
)

// Histogram buckets. Acquisitions and round trips take well under a
// millisecond on a healthy network and up to seconds under contention;
// OpenTelemetry's default buckets start at 5 (they assume milliseconds).
var (
	secondsBuckets  = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
	attemptsBuckets = []float64{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64}
	batchBuckets    = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}
)

// globalTracers is the global tracer provider before the application
// sets one: its tracers make non-recording spans, at a few allocations
// each, until then.
var globalTracers = otel.GetTracerProvider()

// telemetry is an engine's OpenTelemetry instruments and tracer.
type telemetry struct {
	tracer       trace.Tracer
	globalTracer bool // tracer comes from the global provider
	meter        metric.Meter

	acquireDuration metric.Float64Histogram
	acquireAttempts metric.Int64Histogram
	leaseActive     metric.Int64UpDownCounter
	leaseDuration   metric.Float64Histogram
	extendCount     metric.Int64Counter
	extendLateness  metric.Float64Histogram
	nodeRTT         metric.Float64Histogram
	nodeBatchSize   metric.Int64Histogram
	observed        metric.Registration // events dropped, node state and restarts

	acquireAttrs [len(acquireModes)][len(acquireOutcomes)][]metric.RecordOption
	endAttrs     [len(leaseEnds)][]metric.RecordOption
	extendAttrs  [len(extendOutcomes)][]metric.AddOption
}

// newTelemetry makes e's instruments from the providers of e.cfg, or the
// global ones (no-ops until the application sets them). Instrument errors go to otel's error handler, as the
// OpenTelemetry API does with its own: the instrument still works.
func newTelemetry(e *Engine) *telemetry {
	mp, tp := e.cfg.MeterProvider, e.cfg.TracerProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	global := tp == nil
	if global {
		tp = otel.GetTracerProvider()
	}
	m := mp.Meter(instrumentationName)
	t := &telemetry{tracer: tp.Tracer(instrumentationName), globalTracer: global}
	var errs []error
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var err error
	t.acquireDuration, err = m.Float64Histogram("redlease.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of Acquire and TryAcquire calls."), metric.WithExplicitBucketBoundaries(secondsBuckets...))
	check(err)
	t.acquireAttempts, err = m.Int64Histogram("redlease.acquire.attempts", metric.WithUnit("{round}"),
		metric.WithDescription("Rounds an Acquire or TryAcquire call ran."), metric.WithExplicitBucketBoundaries(attemptsBuckets...))
	check(err)
	t.leaseActive, err = m.Int64UpDownCounter("redlease.lease.active", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases held now."))
	check(err)
	t.leaseDuration, err = m.Float64Histogram("redlease.lease.duration", metric.WithUnit("s"),
		metric.WithDescription("How long leases were held, from the start of the winning round to their end."), metric.WithExplicitBucketBoundaries(secondsBuckets...))
	check(err)
	t.extendCount, err = m.Int64Counter("redlease.extend.count", metric.WithUnit("{round}"),
		metric.WithDescription("Extension rounds decided, automatic or by Extend."))
	check(err)
	t.extendLateness, err = m.Float64Histogram("redlease.extend.lateness", metric.WithUnit("s"),
		metric.WithDescription("How late automatic extension rounds started against their plan."), metric.WithExplicitBucketBoundaries(secondsBuckets...))
	check(err)
	t.nodeRTT, err = m.Float64Histogram("redlease.node.rtt", metric.WithUnit("s"),
		metric.WithDescription("Round trip of each pipelined batch to a node."), metric.WithExplicitBucketBoundaries(secondsBuckets...))
	check(err)
	t.nodeBatchSize, err = m.Int64Histogram("redlease.node.batch.size", metric.WithUnit("{command}"),
		metric.WithDescription("Commands per round trip to a node."), metric.WithExplicitBucketBoundaries(batchBuckets...))
	check(err)
	if err := errors.Join(errs...); err != nil {
		otel.Handle(err)
	}
	t.meter = m

	for mode := range acquireModes {
		for outcome := range acquireOutcomes {
			t.acquireAttrs[mode][outcome] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(
				attribute.String("mode", acquireModes[mode]), attribute.String("outcome", acquireOutcomes[outcome])))}
		}
	}
	for end := range leaseEnds {
		t.endAttrs[end] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("end", leaseEnds[end])))}
	}
	for outcome := range extendOutcomes {
		t.extendAttrs[outcome] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("outcome", extendOutcomes[outcome])))}
	}
	return t
}

// observe registers the instruments read from e's counters when a reader
// collects: events dropped, node state and restarts. New calls it once
// e's nodes run.
func (t *telemetry) observe(e *Engine) {
	m := t.meter
	var errs []error
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	dropped, err := m.Int64ObservableCounter("redlease.events.dropped", metric.WithUnit("{event}"),
		metric.WithDescription("Events a full lease or subscription channel did not take."))
	check(err)
	state, err := m.Int64ObservableGauge("redlease.node.state",
		metric.WithDescription("1 while a node serves, 0 while it is down, quarantined or evicting; attribute state says which."))
	check(err)
	restarts, err := m.Int64ObservableCounter("redlease.node.restarts", metric.WithUnit("{restart}"),
		metric.WithDescription("Times a node was seen to have lost its data (a restart, a FLUSHALL)."))
	check(err)
	t.observed, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(dropped, int64(e.dropped.Load()))
		now := time.Now()
		observe := func(s node.Stats, attrs ...attribute.KeyValue) {
			up, st := int64(0), "up"
			switch {
			case s.Down:
				st = "down"
			case now.Before(s.QuarantineUntil):
				st = "quarantined"
			case s.Evicting:
				st = "evicting"
			default:
				up = 1
			}
			o.ObserveInt64(state, up, metric.WithAttributes(append(attrs, attribute.String("state", st))...))
			o.ObserveInt64(restarts, int64(s.Restarts), metric.WithAttributes(attrs...))
		}
		for i, n := range e.nodes {
			addr := attribute.String("node", e.cfg.Nodes[i])
			c := n.Cluster()
			if c == nil {
				observe(n.Stats(), addr)
				continue
			}
			for master, shard := range c.Shards() { // a cluster: by shard, its master's address
				observe(shard.Stats(), addr, attribute.String("shard", master))
			}
		}
		return nil
	}, dropped, state, restarts)
	check(err)
	if err := errors.Join(errs...); err != nil {
		otel.Handle(err)
	}
}

// start starts a call's span, child of ctx's. While the global tracer
// provider is still the default no-op, the span is a shared no-op one:
// tracing costs nothing until the application sets a provider.
func (t *telemetry) start(ctx context.Context, name string) (context.Context, trace.Span) {
	if t.globalTracer && otel.GetTracerProvider() == globalTracers {
		return ctx, noSpan
	}
	return t.tracer.Start(ctx, name)
}

var noSpan trace.Span = noop.Span{} // boxed once

// close stops the observations; the engine's nodes are gone.
func (t *telemetry) close() {
	if t.observed != nil {
		_ = t.observed.Unregister()
	}
}

// acquired records an Acquire or TryAcquire call that started at start
// and got r from its lease actor, and ends its span.
func (t *telemetry) acquired(ctx context.Context, span trace.Span, try bool, start time.Time, r lease.Result, resource string, l *Lease, err error) {
	rounds := r.Attempts
	mode := modeAcquire
	if try {
		mode = modeTry
	}
	outcome := acquireOutcome(err)
	if !start.IsZero() { // zero: acquireDuration is not enabled
		t.acquireDuration.Record(ctx, time.Since(start).Seconds(), t.acquireAttrs[mode][outcome]...)
	}
	if rounds > 0 {
		t.acquireAttempts.Record(ctx, int64(rounds), t.acquireAttrs[mode][outcome]...)
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.String("redlease.resource", resource), attribute.Int("redlease.attempts", rounds),
			attribute.String("redlease.outcome", acquireOutcomes[outcome]))
		if l != nil {
			span.SetAttributes(attribute.Int64("redlease.token", int64(l.Token())), attribute.String("redlease.until", l.Until().Format(time.RFC3339Nano)))
			nodeEvents(span, answered(r.Votes, l.e.cfg.Nodes))
		}
		var ae *AcquireError
		if errors.As(err, &ae) {
			nodeEvents(span, ae.Nodes)
		}
		endSpan(span, err)
	}
	span.End()
}

func acquireOutcome(err error) int {
	switch {
	case err == nil:
		return outcomeAcquired
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return outcomeCanceled
	case errors.Is(err, ErrClosed):
		return outcomeError
	case errors.Is(err, ErrNotAcquired):
		return outcomeNotAcquired
	}
	return outcomeError
}

// call ends the span of an Extend or Release call on l.
func (t *telemetry) call(span trace.Span, l *Lease, err error) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String("redlease.resource", l.resource))
		var ee *ExtendError
		var re *ReleaseError
		switch {
		case errors.As(err, &ee):
			nodeEvents(span, ee.Nodes)
		case errors.As(err, &re):
			nodeEvents(span, re.Nodes)
		}
		endSpan(span, err)
	}
	span.End()
}

// nodeEvents adds each node's answer to the span, as an event.
func nodeEvents(span trace.Span, nodes []NodeOutcome) {
	for _, n := range nodes {
		attrs := []attribute.KeyValue{attribute.String("node", n.Addr), attribute.String("outcome", n.Outcome.String())}
		if n.RTT > 0 {
			attrs = append(attrs, attribute.Float64("rtt_s", n.RTT.Seconds()))
		}
		if n.Err != nil {
			attrs = append(attrs, attribute.String("error", n.Err.Error()))
		}
		span.AddEvent("redlease.node", trace.WithAttributes(attrs...))
	}
}

// answered names the votes that are in, by node: a round is won at
// quorum, and the rest had not answered yet.
func answered(votes []node.Vote, addrs []string) []NodeOutcome {
	out := lease.Outcomes(votes, addrs, nil)
	kept := out[:0]
	for i, n := range out {
		if i < len(votes) && votes[i].Outcome != 0 {
			kept = append(kept, n)
		}
	}
	return kept
}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}

// published counts what the engine's metrics learn from a lease's events.
func (t *telemetry) published(ev Event) {
	switch ev.Kind {
	case Acquired:
		t.leaseActive.Add(context.Background(), 1)
	case Extended:
		t.extendCount.Add(context.Background(), 1, t.extendAttrs[extendOK]...)
	case ExtendFailed:
		t.extendCount.Add(context.Background(), 1, t.extendAttrs[extendFailed]...)
	}
}

// ended records a held lease's end.
func (t *telemetry) ended(held time.Duration, err error) {
	end := endLost
	switch {
	case errors.Is(err, ErrClosed):
		end = endClosed
	case errors.Is(err, ErrReleased):
		end = endReleased
	case errors.Is(err, ErrExpired):
		end = endExpired
	case errors.Is(err, ErrDetached):
		end = endDetached
	}
	t.leaseActive.Add(context.Background(), -1)
	t.leaseDuration.Record(context.Background(), held.Seconds(), t.endAttrs[end]...)
}

// nodeMeter records one node's round trips (node.Meter).
type nodeMeter struct {
	t     *telemetry
	node  string // its address, as in Config.Nodes
	attrs []metric.RecordOption
}

func (t *telemetry) forNode(addr string) *nodeMeter {
	return &nodeMeter{t: t, node: addr, attrs: []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("node", addr)))}}
}

// ForShard is the meter of a Redis Cluster node's shard whose master is
// at addr (node.ShardMeter): its figures carry the shard too.
func (m *nodeMeter) ForShard(addr string) node.Meter {
	return &nodeMeter{t: m.t, attrs: []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(
		attribute.String("node", m.node), attribute.String("shard", addr)))}}
}

func (m *nodeMeter) RoundTrip(rtt time.Duration, commands int) {
	m.t.nodeRTT.Record(context.Background(), rtt.Seconds(), m.attrs...)
	m.t.nodeBatchSize.Record(context.Background(), int64(commands), m.attrs...)
}
