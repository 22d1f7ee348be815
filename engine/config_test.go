package engine

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/redis/rueidis"
)

// TestConfigValidation passes New invalid Configs: each must fail before
// any dial, with an error naming every bad field and its value.
func TestConfigValidation(t *testing.T) {
	ok := []string{"127.0.0.1:1"} // valid, but nothing listens there
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings of the error
		errs int      // joined errors: one per bad setting
	}{
		{"no nodes", Config{}, []string{"Nodes", "got none"}, 1},
		{"empty nodes", Config{Nodes: []string{}}, []string{"Nodes", "got none"}, 1},
		{"no port", Config{Nodes: []string{"localhost"}},
			[]string{"Nodes[0]", `"localhost"`, "missing port"}, 1},
		{"port 0", Config{Nodes: []string{"127.0.0.1:0"}},
			[]string{"Nodes[0]", `"127.0.0.1:0"`, `got "0"`}, 1},
		{"port 70000", Config{Nodes: []string{"127.0.0.1:1", "127.0.0.1:70000", "127.0.0.1:3"}},
			[]string{"Nodes[1]", `"127.0.0.1:70000"`, `got "70000"`}, 1},
		{"port abc", Config{Nodes: []string{"127.0.0.1:abc"}},
			[]string{"Nodes[0]", `"127.0.0.1:abc"`, `got "abc"`}, 1},
		{"empty host", Config{Nodes: []string{":6379"}},
			[]string{"Nodes[0]", `":6379"`, "missing host"}, 1},
		{"duplicate", Config{Nodes: []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:1"}},
			[]string{`Nodes[2] "127.0.0.1:1"`, "repeats Nodes[0]"}, 1},
		{"sentinel without a name", Config{Nodes: []string{"sentinel://127.0.0.1:26379"}},
			[]string{"Nodes[0]", "names its master set after its sentinels"}, 1},
		{"sentinel bad address", Config{Nodes: []string{"sentinel://127.0.0.1:26379,127.0.0.1/m"}},
			[]string{"Nodes[0]", `sentinel "127.0.0.1"`, "missing port"}, 1},
		{"sentinel twice", Config{Nodes: []string{"sentinel://127.0.0.1:26379,127.0.0.1:26379/m"}},
			[]string{"Nodes[0]", "listed twice"}, 1},
		{"unknown scheme", Config{Nodes: []string{"redis://127.0.0.1:6379"}},
			[]string{"Nodes[0]", "unknown scheme"}, 1},
		{"master set twice", Config{Nodes: []string{"sentinel://127.0.0.1:1,127.0.0.1:2/m", "127.0.0.1:3", "sentinel://127.0.0.1:2/m"}},
			[]string{`Nodes[2] "sentinel://127.0.0.1:2/m"`, "repeats Nodes[0]"}, 1},
		{"cluster twice", Config{Nodes: []string{"cluster://127.0.0.1:1,127.0.0.1:2", "cluster://127.0.0.1:2"}},
			[]string{`Nodes[1] "cluster://127.0.0.1:2"`, "repeats Nodes[0]"}, 1},
		{"cluster bad address", Config{Nodes: []string{"cluster://127.0.0.1"}},
			[]string{"Nodes[0]", `cluster node "127.0.0.1"`, "missing port"}, 1},
		{"braces in the prefix of a cluster's keys", Config{Nodes: []string{"cluster://127.0.0.1:1"}, KeyPrefix: "app{x}:"},
			[]string{"KeyPrefix", "no braces with a Redis Cluster node"}, 1},
		// A negative TTL is also below the default NodeTimeout: two errors.
		{"TTL negative", Config{Nodes: ok, TTL: -time.Second},
			[]string{"TTL", "got -1s"}, 2},
		// Drift of 1ms at 0.01 is 10µs + 2ms = 2.01ms.
		{"TTL below drift", Config{Nodes: ok, TTL: time.Millisecond, NodeTimeout: 500 * time.Microsecond},
			[]string{"TTL", "drift allowance (2.01ms)", "got 1ms"}, 1},
		// Drift of 2.5ms at 0.2 is 500µs + 2ms = 2.5ms: no validity left.
		{"TTL equal to drift", Config{Nodes: ok, TTL: 2500 * time.Microsecond, DriftFactor: 0.2, NodeTimeout: time.Millisecond},
			[]string{"TTL", "drift allowance (2.5ms)", "got 2.5ms"}, 1},
		{"DriftFactor negative", Config{Nodes: ok, DriftFactor: -0.1},
			[]string{"DriftFactor", "got -0.1"}, 1},
		{"DriftFactor 0.7", Config{Nodes: ok, DriftFactor: 0.7},
			[]string{"DriftFactor", "got 0.7"}, 1},
		{"DriftFactor 0.5", Config{Nodes: ok, DriftFactor: 0.5},
			[]string{"DriftFactor", "got 0.5"}, 1},
		{"NodeTimeout negative", Config{Nodes: ok, NodeTimeout: -time.Millisecond},
			[]string{"NodeTimeout", "got -1ms"}, 1},
		{"NodeTimeout equal to TTL", Config{Nodes: ok, TTL: time.Second, NodeTimeout: time.Second},
			[]string{"NodeTimeout", "below TTL (1s)", "got 1s"}, 1},
		{"NodeTimeout above TTL", Config{Nodes: ok, TTL: time.Second, NodeTimeout: 2 * time.Second},
			[]string{"NodeTimeout", "got 2s"}, 1},
		{"ConnectTimeout negative", Config{Nodes: ok, ConnectTimeout: -time.Second},
			[]string{"ConnectTimeout", "got -1s"}, 1},
		{"RestartQuarantine below MaxTTL", Config{Nodes: ok, TTL: 2 * time.Second, MaxTTL: 5 * time.Second, RestartQuarantine: 4 * time.Second},
			[]string{"RestartQuarantine", "MaxTTL (5s)", "got 4s", "UnsafeShortQuarantine"}, 1},
		{"RestartQuarantine below the default MaxTTL", Config{Nodes: ok, TTL: 3 * time.Second, RestartQuarantine: time.Second},
			[]string{"RestartQuarantine", "MaxTTL (3s)", "got 1s"}, 1},
		{"MaxHold negative", Config{Nodes: ok, MaxHold: -time.Minute},
			[]string{"MaxHold", "got -1m0s"}, 1},
		{"RetryAttempts negative", Config{Nodes: ok, RetryAttempts: -3},
			[]string{"RetryAttempts", "got -3"}, 1},
		{"two bad fields", Config{Nodes: ok, DriftFactor: 0.7, RetryAttempts: -3},
			[]string{"DriftFactor", "got 0.7", "RetryAttempts", "got -3"}, 2},
		{"three bad fields", Config{Nodes: []string{":6379"}, ConnectTimeout: -time.Second, NodeTimeout: -time.Millisecond},
			[]string{"Nodes[0]", `":6379"`, "ConnectTimeout", "got -1s", "NodeTimeout", "got -1ms"}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var dials atomic.Int32
			cfg := tt.cfg
			cfg.Client = rueidis.ClientOption{
				DialCtxFn: func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
					dials.Add(1)
					return nil, errors.New("test: dialled")
				},
			}
			e, err := New(cfg)
			if e != nil {
				t.Errorf("New returned an engine, want nil")
				_ = e.Close()
			}
			if err == nil {
				t.Fatalf("New succeeded, want an error containing %q", tt.want)
			}
			if n := dials.Load(); n != 0 {
				t.Errorf("New dialled %d time(s) before rejecting the config: %v", n, err)
			}
			msg := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			if got := joined(err); got != tt.errs {
				t.Errorf("error joins %d error(s), want %d: %q", got, tt.errs, msg)
			}
		})
	}
}

// RestartQuarantine is accepted at MaxTTL or above, when negative (off),
// at its default, and below MaxTTL only with UnsafeShortQuarantine.
func TestRestartQuarantineValidation(t *testing.T) {
	nodes := []string{"127.0.0.1:1"}
	tests := []struct {
		name       string
		quarantine time.Duration
		unsafe     bool
		ok         bool
	}{
		{"default (MaxTTL)", 0, false, true},
		{"equal to MaxTTL", 5 * time.Second, false, true},
		{"above MaxTTL", time.Minute, false, true},
		{"off", -1, false, true},
		{"off, unsafe set", -time.Second, true, true},
		{"below MaxTTL", 4 * time.Second, false, false},
		{"just below MaxTTL", 5*time.Second - time.Nanosecond, false, false},
		{"1ns", time.Nanosecond, false, false},
		{"below MaxTTL, unsafe", 4 * time.Second, true, true},
		{"1ns, unsafe", time.Nanosecond, true, true},
	}
	for _, tt := range tests {
		c := Config{Nodes: nodes, TTL: 2 * time.Second, MaxTTL: 5 * time.Second,
			RestartQuarantine: tt.quarantine, UnsafeShortQuarantine: tt.unsafe}.withDefaults()
		err := c.validate()
		if (err == nil) != tt.ok {
			t.Errorf("%s: validate() = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "RestartQuarantine") {
			t.Errorf("%s: error %q does not name RestartQuarantine", tt.name, err)
		}
	}
}

// joined counts the errors joined in err (1 for a plain error).
func joined(err error) int {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return len(j.Unwrap())
	}
	return 1
}

func TestConfigDefaults(t *testing.T) {
	nodes := []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}
	c := Config{Nodes: nodes}.withDefaults()
	if len(c.Nodes) != 3 || c.Nodes[0] != nodes[0] || c.Nodes[2] != nodes[2] {
		t.Errorf("Nodes = %v, want %v", c.Nodes, nodes)
	}
	checks := []struct {
		field     string
		got, want any
	}{
		{"TTL", c.TTL, DefaultTTL},
		{"DriftFactor", c.DriftFactor, DefaultDriftFactor},
		{"KeyPrefix", c.KeyPrefix, DefaultKeyPrefix},
		{"NodeTimeout", c.NodeTimeout, DefaultNodeTimeout},
		{"ConnectTimeout", c.ConnectTimeout, DefaultConnectTimeout},
		{"RetryAttempts", c.RetryAttempts, DefaultRetryAttempts},
		// The documented values, so a changed constant is noticed too.
		{"DefaultTTL", DefaultTTL, 10 * time.Second},
		{"DefaultDriftFactor", DefaultDriftFactor, 0.01},
		{"DefaultKeyPrefix", DefaultKeyPrefix, "redlease:"},
		{"DefaultNodeTimeout", DefaultNodeTimeout, 50 * time.Millisecond},
		{"DefaultConnectTimeout", DefaultConnectTimeout, time.Second},
		{"DefaultRetryAttempts", DefaultRetryAttempts, 32},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.field, ch.got, ch.want)
		}
	}
	if err := c.validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
	if c.RetryBackOff == nil {
		t.Fatal("RetryBackOff is nil")
	}

	b := c.RetryBackOff()
	if b == nil {
		t.Fatal("RetryBackOff() returned nil")
	}
	if b2 := c.RetryBackOff(); b2 == b {
		t.Error("RetryBackOff() returned the same BackOff twice, want a fresh one per call")
	}
	for i := 1; i <= 40; i++ {
		d := b.NextBackOff()
		if d == backoff.Stop {
			t.Fatalf("call %d: NextBackOff() = backoff.Stop", i)
		}
		if i == 1 && (d < time.Millisecond || d > 3*time.Millisecond) {
			t.Errorf("first NextBackOff() = %v, want within [1ms, 3ms]", d)
		}
		if d < time.Millisecond || d > 375*time.Millisecond {
			t.Errorf("call %d: NextBackOff() = %v, want within [1ms, 375ms]", i, d)
		}
		// 2ms doubles past 250ms by the 9th call; from then on each wait
		// is 250ms ± 50%.
		if i >= 10 && d < 125*time.Millisecond {
			t.Errorf("call %d: NextBackOff() = %v, want at least 125ms once at the 250ms cap", i, d)
		}
	}
}

func TestConfigDefaultsKeepSetFields(t *testing.T) {
	custom := func() backoff.BackOff { return &backoff.ZeroBackOff{} }
	in := Config{
		Nodes: []string{"127.0.0.1:1"}, TTL: 3 * time.Second, DriftFactor: 0.02, KeyPrefix: "x:",
		NodeTimeout: 7 * time.Millisecond, ConnectTimeout: 9 * time.Second, RetryAttempts: 4,
		RetryBackOff: custom,
	}
	c := in.withDefaults()
	if c.TTL != 3*time.Second || c.DriftFactor != 0.02 || c.KeyPrefix != "x:" ||
		c.NodeTimeout != 7*time.Millisecond || c.ConnectTimeout != 9*time.Second || c.RetryAttempts != 4 {
		t.Errorf("withDefaults changed set fields: got %+v", c)
	}
	if _, ok := c.RetryBackOff().(*backoff.ZeroBackOff); !ok {
		t.Errorf("withDefaults replaced RetryBackOff: got %T", c.RetryBackOff())
	}
}

// The bound of a lease's extension: WithAutoExtend's maxHold, else
// Config.MaxHold, else DefaultMaxHoldTTLs times the lease's TTL.
func TestMaxHoldResolution(t *testing.T) {
	tests := []struct {
		name    string
		cfg     time.Duration // Config.MaxHold
		opts    []Option
		want    time.Duration
		autoExt bool
	}{
		{"default", 0, nil, DefaultMaxHoldTTLs * DefaultTTL, false},
		{"default follows WithTTL", 0, []Option{WithTTL(2 * time.Second)}, DefaultMaxHoldTTLs * 2 * time.Second, false},
		{"Config.MaxHold", time.Minute, []Option{WithTTL(2 * time.Second)}, time.Minute, false},
		{"WithAutoExtend wins", time.Minute, []Option{WithAutoExtend(5 * time.Second)}, 5 * time.Second, true},
	}
	for _, tt := range tests {
		e := &Engine{cfg: Config{Nodes: []string{"127.0.0.1:1"}, MaxHold: tt.cfg}.withDefaults()}
		o, err := e.options(tt.opts)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if o.maxHold != tt.want || o.autoExtend != tt.autoExt {
			t.Errorf("%s: maxHold %v auto %v, want %v auto %v", tt.name, o.maxHold, o.autoExtend, tt.want, tt.autoExt)
		}
	}
	if DefaultMaxHoldTTLs != 10 {
		t.Errorf("DefaultMaxHoldTTLs = %d, want the documented 10", DefaultMaxHoldTTLs)
	}
}

func TestAcquireErrorMatching(t *testing.T) {
	canceled := &AcquireError{Resource: "r", Attempts: 2, Cause: context.Canceled}
	closed := &AcquireError{Resource: "r", Attempts: 1, Cause: ErrClosed}
	tests := []struct {
		name   string
		err    error
		target error
		want   bool
	}{
		{"canceled is ErrNotAcquired", canceled, ErrNotAcquired, true},
		{"canceled is context.Canceled", canceled, context.Canceled, true},
		{"canceled is not ErrClosed", canceled, ErrClosed, false},
		{"canceled is not DeadlineExceeded", canceled, context.DeadlineExceeded, false},
		{"wrapped canceled is ErrNotAcquired", fmt.Errorf("wrap: %w", canceled), ErrNotAcquired, true},
		{"wrapped canceled is context.Canceled", fmt.Errorf("wrap: %w", canceled), context.Canceled, true},
		{"closed is ErrClosed", closed, ErrClosed, true},
		{"closed is ErrNotAcquired", closed, ErrNotAcquired, true},
		{"closed is not context.Canceled", closed, context.Canceled, false},
		{"closed is not ErrReleased", closed, ErrReleased, false},
	}
	for _, tt := range tests {
		if got := errors.Is(tt.err, tt.target); got != tt.want {
			t.Errorf("%s: errors.Is(%v, %v) = %v, want %v", tt.name, tt.err, tt.target, got, tt.want)
		}
	}

	checkOnePrefix(t, &AcquireError{Resource: "r", Attempts: 1, Cause: ErrClosed, Nodes: []NodeOutcome{
		{Addr: "a:1", Outcome: Failed, Err: ErrQuarantined, QuarantinedUntil: time.Now()},
		{Addr: "b:1", Outcome: Taken},
	}})

	var ae *AcquireError
	if !errors.As(fmt.Errorf("wrap: %w", canceled), &ae) {
		t.Fatal("errors.As into *AcquireError failed through fmt.Errorf")
	}
	if ae != canceled {
		t.Errorf("errors.As gave %p, want %p", ae, canceled)
	}
	if ae.Resource != "r" || ae.Attempts != 2 || !errors.Is(ae.Cause, context.Canceled) {
		t.Errorf("errors.As gave %+v", ae)
	}
	if errors.As(fmt.Errorf("wrap: %w", ErrNotAcquired), &ae) {
		t.Error("errors.As found an *AcquireError in a plain ErrNotAcquired")
	}
}

func TestErrClosedLease(t *testing.T) {
	tests := []struct {
		target error
		want   bool
	}{
		{ErrReleased, true},
		{ErrClosed, true},
		{ErrExpired, false},
		{ErrLeaseLost, false},
		{ErrNotAcquired, false},
	}
	for _, tt := range tests {
		if got := errors.Is(errClosedLease, tt.target); got != tt.want {
			t.Errorf("errors.Is(errClosedLease, %v) = %v, want %v", tt.target, got, tt.want)
		}
	}
	checkOnePrefix(t, errClosedLease)
}

// checkOnePrefix fails unless err's text names the package once, at its
// start: a wrapped error keeps its chain but drops its own prefix.
func checkOnePrefix(t *testing.T, err error) {
	t.Helper()
	t.Logf("error text: %v", err)
	if s := err.Error(); !strings.HasPrefix(s, "redlease: ") || strings.Count(s, "redlease:") != 1 {
		t.Errorf("error %q: want one \"redlease: \" prefix, at the start", s)
	}
}

// The README's table of protocol constants states each by its name and
// value; this keeps the two from drifting apart.
func TestReadmeQuotesProtocolConstants(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		value int
	}{
		{"AutoExtendDivisor", AutoExtendDivisor},
		{"ExtendRetryDivisor", ExtendRetryDivisor},
		{"NodeDownAfterFailures", NodeDownAfterFailures},
		{"DownProbeDivisor", DownProbeDivisor},
		{"YieldDivisor", YieldDivisor},
		{"SilenceTimeouts", SilenceTimeouts},
	} {
		if row := fmt.Sprintf("| `%s` | %d |", c.name, c.value); !strings.Contains(string(readme), row) {
			t.Errorf("README.md has no row %q", row)
		}
	}
	if row := fmt.Sprintf("| `WakeJitter` | %v |", WakeJitter); !strings.Contains(string(readme), row) {
		t.Errorf("README.md has no row %q", row)
	}
}
