package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cenkalti/backoff/v4"
	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/redlease/redlease/lease"
	"github.com/redlease/redlease/node"
)

// Defaults for the zero fields of Config. The README compares them with
// other Redis lock clients.
const (
	DefaultTTL            = 10 * time.Second
	DefaultDriftFactor    = 0.01
	DefaultKeyPrefix      = "redlease:"
	DefaultNodeTimeout    = 50 * time.Millisecond
	DefaultConnectTimeout = time.Second
	DefaultRetryAttempts  = 32
	DefaultEventBuffer    = 8
	DefaultHealthInterval = time.Second
	// DefaultRetryInitial and DefaultRetryMax bound the default retry
	// schedule: exponential, doubling, each wait randomized by ±50%.
	DefaultRetryInitial = 2 * time.Millisecond
	DefaultRetryMax     = 250 * time.Millisecond
	// DefaultMaxHoldTTLs bounds Lease.Extend when Config.MaxHold is zero:
	// a lease is extended for at most this many of its own TTLs after it
	// was acquired. The Redlock specification bounds extension so that a
	// holder stuck in a loop of extensions cannot keep a resource from
	// everyone else forever. A multiple of the TTL keeps the bound in
	// proportion to what the caller declared a lease needs: ten times
	// that gives a job that overruns room to finish (100s at the default
	// 10s TTL), while a runaway holder blocks others for ten TTLs at most.
	// Work that legitimately runs longer says so with Config.MaxHold or
	// WithAutoExtend(maxHold).
	DefaultMaxHoldTTLs = 10
)

// Protocol constants: fixed rather than configurable, stated here so that
// users can plan with them. The README quotes them by name.
const (
	// AutoExtendDivisor: WithAutoExtend starts an extension round
	// TTL/AutoExtendDivisor (3: a third of the TTL) after the start of the
	// round that acquired or last extended the lease.
	AutoExtendDivisor = lease.ExtendDivisor
	// ExtendRetryDivisor: a failed automatic extension round is retried
	// about TTL/ExtendRetryDivisor (15) later, randomized by ±50%, until
	// the validity deadline.
	ExtendRetryDivisor = lease.RetryDivisor
	// NodeDownAfterFailures: this many (2) batches or health probes in a row
	// without an answer mark a node down; its commands then fail at once
	// with a Failed outcome until a probe succeeds.
	NodeDownAfterFailures = node.DownAfterFailures
	// DownProbeDivisor: a node that is down is probed every
	// HealthInterval/DownProbeDivisor (5: five times as often as when up).
	DownProbeDivisor = node.DownProbeDivisor
	// YieldDivisor: the next caller in an engine's line after a local
	// release waits NodeTimeout/YieldDivisor (10: 5ms by default) to hear
	// its announcement, which says who goes next, before it races.
	YieldDivisor = lease.YieldDivisor
	// SilenceTimeouts: a waiting Acquire that releases name neither next
	// nor to stand in for the next waits to be named without a round, and
	// looks again once no release was announced for SilenceTimeouts node
	// timeouts (10: half a second by default).
	SilenceTimeouts = lease.SilenceTimeouts
	// WakeJitter bounds the random delay of the waiters a release woke
	// without naming any: larger than the spread of its delivery to
	// several engines, so that the order they subscribed in does not
	// decide who wins.
	WakeJitter = lease.WakeJitter
)

// Config configures an Engine. The zero value of every field but Nodes
// means its default.
type Config struct {
	// Nodes holds one entry per independent Redis node (no replication,
	// no cluster between them); required, no duplicates. A lease needs
	// len(Nodes)/2+1 of them; use an odd number, typically 3 or 5. An
	// entry is a master's host:port, a Sentinel master set as
	// sentinel://host:port[,host:port...]/name (its sentinels, then its
	// name), or a Redis Cluster as cluster://host:port[,host:port...]
	// (some of its nodes). A master set is one node: its master votes,
	// and a failover to a replica is a restart (quarantine); see
	// node.Target. A cluster is one node too, whose vote on a resource
	// its key's shard casts (see node.Cluster). Kinds mix freely, and one
	// master set or cluster alone is a quorum of one.
	Nodes []string
	// TTL is the default lease TTL (WithTTL overrides it per call).
	// Default DefaultTTL (10s). It must exceed the drift allowance.
	TTL time.Duration
	// MaxTTL bounds the TTL of every lease (WithTTL above it is refused),
	// and so how long, at least, a node that lost its data sits out
	// (RestartQuarantine's default). Default: TTL. Raising it lengthens
	// every restart quarantine; engines that use these nodes with longer
	// TTLs need not be matched by it: each engine records the TTLs it uses
	// on the nodes, and every engine quarantines for the longest recorded
	// (see RestartQuarantine).
	MaxTTL time.Duration
	// RestartQuarantine is how long a node that may have lost lock keys
	// refuses to grant, counted from when this engine saw it so: a node
	// met without an epoch marker naming its dataset (a restart, a
	// snapshot, a flush, a reload, a promoted replica, or a new node not
	// marked with MarkNew), one whose dataset changed since the last probe,
	// or one that evicted keys (see package node for the whole list):
	// every lease it may have held has expired by then. Default: MaxTTL.
	// It is a floor: when the engines on these nodes use longer TTLs
	// (each records its TTLs on the nodes it uses, beside the epoch marker),
	// a quarantine lasts the longest TTL this engine's probes find
	// recorded on any of its nodes, and one under way grows when a probe
	// finds a longer one (Stats().Nodes[i].QuarantinedUntil follows).
	// Negative turns the quarantine off (unsafe with nodes that run
	// without persistence). A positive value below MaxTTL is refused
	// unless UnsafeShortQuarantine is set: the node would grant again
	// while a lease it held before its loss may still be valid.
	RestartQuarantine time.Duration
	// UnsafeShortQuarantine allows a RestartQuarantine below MaxTTL, for
	// tests and for deployments that know their longest lease is shorter
	// than MaxTTL says. It gives up guarantee 7 (a restarted node sits out
	// until every lease it could have held has expired). Default false.
	UnsafeShortQuarantine bool
	// UnsafeEviction lets nodes that may evict lock keys grant leases. A
	// node with a memory limit (maxmemory) and any maxmemory-policy but
	// noeviction evicts keys with a TTL when its memory fills, whatever
	// else shares it fills it, and lock keys have a TTL: it would forget a
	// held lease and grant the resource to another owner. By default New
	// refuses such a node, and one that is set so later (CONFIG SET)
	// refuses acquires from its next health probe on (ErrEvicting). Set it
	// only for nodes whose memory cannot fill. Default false.
	UnsafeEviction bool
	// MaxHold bounds how long Lease.Extend keeps a lease that is not
	// auto-extended: no extension starts later than MaxHold after the
	// lease was acquired (Extend then fails with ErrMaxHold), so a lease is
	// held at most MaxHold plus one TTL. WithAutoExtend(maxHold) sets the
	// bound of its lease instead. Default: DefaultMaxHoldTTLs (10) times
	// the lease's TTL. Must not be negative: there are no unbounded leases.
	// A lease that Extend moves to another TTL (ExtendTTL) is still held
	// at most MaxHold plus the TTL it was acquired with.
	MaxHold time.Duration
	// HealthInterval is the time between health probes of each node
	// (HealthInterval/DownProbeDivisor, a fifth of it, for a node that is
	// down). Default DefaultHealthInterval (1s).
	HealthInterval time.Duration
	// DriftFactor is the clock drift allowed per unit of TTL; a lease's
	// validity is TTL − elapsed − (TTL·DriftFactor + 2ms). Default 0.01;
	// must be in (0, 0.5).
	DriftFactor float64
	// KeyPrefix prefixes every lock key: <KeyPrefix>{<resource>}.
	// Default "redlease:".
	KeyPrefix string
	// Logger receives redlease's and protoactor's log lines. Default: none.
	Logger *slog.Logger
	// NodeTimeout bounds each node's answer in a round. A round decides as
	// soon as a quorum answered, so a slow node only matters when it is
	// needed for the quorum. Default 50ms, after the Redlock
	// specification's 5–50ms for a 10s TTL; must be below the TTL.
	NodeTimeout time.Duration
	// ConnectTimeout bounds dialling a node, in New and when reconnecting.
	// Default 1s.
	ConnectTimeout time.Duration
	// RetryAttempts bounds the rounds Acquire starts on its backoff: after
	// rounds that failed for want of nodes (down, slow, quarantined), or
	// while no node can announce releases. Rounds woken by a holder's
	// release or expiry do not count: waiting for a holder is bounded by
	// the caller's context. Default 32.
	RetryAttempts int
	// RetryBackOff makes the wait schedule between those rounds, one per
	// call (a BackOff is stateful), when the call first waits: most calls
	// never do (an ExponentialBackOff's MaxElapsedTime counts from that
	// first wait). Default: exponential from 2ms to
	// 250ms, doubling, each wait randomized by ±50%. backoff.Stop ends the
	// retries.
	RetryBackOff func() backoff.BackOff
	// EventBuffer is the capacity of each lease's event channel. When it is
	// full, non-terminal events are dropped (and counted); the terminal one
	// always fits. Default 8; at least 2. The channel is made by the first
	// Lease.Events call; until then the lease keeps its events as the
	// channel would (a lease whose holder never asks costs no channel).
	EventBuffer int
	// Client is the template for each node's rueidis client (TLS, auth,
	// dialer; ClientName defaults to "redlease"). So that commands reach a
	// node in the order they were issued, on one connection, redlease sets
	// InitAddress, DisableCache, ForceSingleClient, one connection per node
	// (PipelineMultiplex -1), auto-pipelining (DisableAutoPipelining
	// false) and a BlockingPipeline above its largest batch (below it,
	// rueidis would send batches over pooled connections). It wraps the
	// dialler: a new connection carries commands only after a probe
	// checked which server process it reached.
	Client rueidis.ClientOption
	// ActorSystem, if set, hosts the engine's actors; Close leaves it
	// running. Default: a system of the engine's own, silent unless Logger
	// is set.
	ActorSystem *actor.ActorSystem
	// MeterProvider makes the engine's metrics (docs/OBSERVABILITY.md lists them;
	// their names are a contract). Default: otel.GetMeterProvider(), a
	// no-op until the application sets one.
	MeterProvider metric.MeterProvider
	// TracerProvider makes a span per Acquire, TryAcquire, Extend and
	// Release call, child of the caller's context. Default:
	// otel.GetTracerProvider(), a no-op until the application sets one.
	TracerProvider trace.TracerProvider

	// clock, if set, is the leases' clock (tests): lease.Clock.
	clock lease.Clock
}

// withDefaults returns c with its zero fields set to the defaults.
func (c Config) withDefaults() Config {
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.MaxTTL == 0 {
		c.MaxTTL = c.TTL
	}
	if c.RestartQuarantine == 0 {
		c.RestartQuarantine = c.MaxTTL
	}
	if c.HealthInterval == 0 {
		c.HealthInterval = DefaultHealthInterval
	}
	if c.DriftFactor == 0 {
		c.DriftFactor = DefaultDriftFactor
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultKeyPrefix
	}
	if c.NodeTimeout == 0 {
		c.NodeTimeout = DefaultNodeTimeout
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.RetryAttempts == 0 {
		c.RetryAttempts = DefaultRetryAttempts
	}
	if c.EventBuffer == 0 {
		c.EventBuffer = DefaultEventBuffer
	}
	if c.RetryBackOff == nil {
		c.RetryBackOff = defaultBackOff
	}
	return c
}

func defaultBackOff() backoff.BackOff {
	return exponentialBackOff(DefaultRetryInitial, DefaultRetryMax)
}

// exponentialBackOff waits from initial to max, doubling, each wait
// randomized by ±50%, without end.
func exponentialBackOff(initial, max time.Duration) *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(initial),
		backoff.WithMaxInterval(max),
		backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(0.5),
		backoff.WithMaxElapsedTime(0), // the context and RetryAttempts bound it
	)
}

// validate checks a Config that has its defaults; every error names the
// field and the bad value.
func (c *Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("redlease: config: "+format, args...))
	}
	if len(c.Nodes) == 0 {
		bad("Nodes must list at least one address, got none")
	}
	seen := make(map[string]int, len(c.Nodes)) // an address, or a sentinel's and its master set's
	for i, addr := range c.Nodes {
		t, err := node.ParseTarget(addr)
		if err != nil {
			bad("Nodes[%d] %q: %v", i, addr, err)
			continue
		}
		names := []string{t.Addr}
		if len(t.Cluster) > 0 {
			names = t.Cluster
			if strings.ContainsAny(c.KeyPrefix, "{}") {
				bad("KeyPrefix %q: no braces with a Redis Cluster node (Nodes[%d]): a lock key's hash tag is its resource", c.KeyPrefix, i)
			}
		}
		if t.MasterSet != "" {
			names = names[:0]
			for _, s := range t.Sentinels {
				names = append(names, s+"/"+t.MasterSet)
			}
		}
		for _, name := range names {
			if j, dup := seen[name]; dup && j != i {
				bad("Nodes[%d] %q repeats Nodes[%d]: one server must not vote twice", i, addr, j)
				break
			}
			seen[name] = i
		}
	}
	if !(c.DriftFactor > 0 && c.DriftFactor < 0.5) { // NaN too
		bad("DriftFactor must be in (0, 0.5), got %v", c.DriftFactor)
	}
	if err := checkTTL(c.TTL, c.DriftFactor); err != nil {
		bad("TTL %v", err)
	}
	if c.MaxTTL < c.TTL {
		bad("MaxTTL must be >= TTL (%v), got %v", c.TTL, c.MaxTTL)
	}
	if c.RestartQuarantine > 0 && c.RestartQuarantine < c.MaxTTL && !c.UnsafeShortQuarantine {
		bad("RestartQuarantine must be >= MaxTTL (%v), got %v: a restarted node would grant while leases it held may be valid (set UnsafeShortQuarantine to allow it, or a negative value to turn the quarantine off)",
			c.MaxTTL, c.RestartQuarantine)
	}
	if c.MaxHold < 0 {
		bad("MaxHold must be >= 0 (0: %d TTLs), got %v", DefaultMaxHoldTTLs, c.MaxHold)
	}
	if c.HealthInterval < 0 {
		bad("HealthInterval must be > 0, got %v", c.HealthInterval)
	}
	if c.NodeTimeout < 0 || c.NodeTimeout >= c.TTL {
		bad("NodeTimeout must be > 0 and below TTL (%v), got %v", c.TTL, c.NodeTimeout)
	}
	if c.ConnectTimeout < 0 {
		bad("ConnectTimeout must be > 0, got %v", c.ConnectTimeout)
	}
	if c.RetryAttempts < 0 {
		bad("RetryAttempts must be > 0, got %d", c.RetryAttempts)
	}
	if c.EventBuffer < 2 {
		bad("EventBuffer must be >= 2, got %d", c.EventBuffer)
	}
	return errors.Join(errs...)
}

// checkTTL: a TTL that the drift allowance eats whole can never be valid.
func checkTTL(ttl time.Duration, driftFactor float64) error {
	if drift := lease.Drift(ttl, driftFactor); ttl <= drift {
		return fmt.Errorf("must exceed the drift allowance (%v), got %v", drift, ttl)
	}
	return nil
}

// lockKey is resource's lock key (node.LockKey).
func (c *Config) lockKey(resource string) string { return node.LockKey(c.KeyPrefix, resource) }

// fenceKey is the fence counter's key beside lockKey (node.FenceKey).
func fenceKey(lockKey string) string { return node.FenceKey(lockKey) }

// epochKey holds, on every node, the epoch marker (node.EpochKey).
func (c *Config) epochKey() string { return node.EpochKey(c.KeyPrefix) }

// engineChannel is an engine's own channel (node.Config.Channel): random,
// so that only this engine's watchers listen on it.
func (c *Config) engineChannel() string { return c.KeyPrefix + "engine:" + newValue() }

// clientOption is the rueidis option for one node; node.NewConn sets what
// keeps commands in order.
func (c *Config) clientOption(addr string) rueidis.ClientOption {
	t, _ := node.ParseTarget(addr) // validate checked it
	o := t.Option(c.Client)
	if o.ClientName == "" {
		o.ClientName = "redlease" // so operators find our connections in CLIENT LIST
	}
	if o.Dialer.Timeout == 0 {
		o.Dialer.Timeout = c.ConnectTimeout
	}
	return o
}
