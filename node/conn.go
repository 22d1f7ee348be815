package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// redialEvery limits how often a node that could not be reached is dialled.
const redialEvery = time.Second

// errUnchecked: a batch would have gone out on a connection no probe has
// checked (rueidis redials lazily, on the next command). Nothing was sent;
// the batch waits for a probe.
var errUnchecked = errors.New("redlease: new connection not yet probed")

// Conn is a node's rueidis client behind a dial gate. Any new connection
// may reach a new server process (one restarted from a snapshot keeps old
// keys but lost recent ones), and the server may still run what an
// abandoned connection had sent. So only a probe may dial: it learns the
// process (run id), kills the previous connection on the server, and only
// then do commands flow. A batch that would make rueidis redial fails
// unsent instead.
//
// One goroutine at a time uses a Conn: the engine before it spawns the
// node actor, the actor's sender goroutine after.
type Conn struct {
	opt   rueidis.ClientOption // its dialler goes through gate
	open  atomic.Bool          // dials allowed: only while probing
	dials atomic.Uint64        // connections made

	// sentinels, for a Sentinel master set, name the server to connect
	// to at each probe; nil for a standalone master.
	sentinels *sentinels

	mu       sync.Mutex
	addr     string   // the server connected to, or to connect to
	split    []string // a master set's other servers that still answer as masters; a cluster shard's former masters (setSplit)
	switches int64    // a master set's failovers so far (Info.Switches)
	client   rueidis.Client
	closed   bool
	err      error     // the last dial error
	retryAt  time.Time // no client made before this
}

// NewConn returns an unconnected Conn for opt; Probe connects it. So that
// commands take effect in the order they were issued, NewConn makes the
// client one connection (ForceSingleClient, PipelineMultiplex -1), keeps
// batches on it (auto-pipelining, BlockingPipeline above maxBatch) and
// turns client-side caching off. An opt that names a Sentinel master set
// (Target.Option) makes a Conn that asks the sentinels at every probe which
// server is the master, and moves there.
func NewConn(opt rueidis.ClientOption) *Conn {
	opt.DisableCache = true
	opt.ForceSingleClient = true
	opt.PipelineMultiplex = -1
	opt.DisableAutoPipelining = false
	if opt.BlockingPipeline <= maxBatch {
		opt.BlockingPipeline = rueidis.DefaultBlockingPipeline
	}
	c := &Conn{}
	if opt.Sentinel.MasterSet != "" {
		c.sentinels = newSentinels(opt)
		opt.Sentinel, opt.InitAddress = rueidis.SentinelOption{}, nil
	} else if len(opt.InitAddress) > 0 {
		c.addr = opt.InitAddress[0]
	}
	dial := opt.DialCtxFn
	if dial == nil {
		dial = defaultDial(opt.DialFn)
	}
	opt.DialCtxFn = func(ctx context.Context, dst string, d *net.Dialer, tc *tls.Config) (net.Conn, error) {
		if !c.open.Load() {
			return nil, errUnchecked
		}
		nc, err := dial(ctx, dst, d, tc)
		if err == nil {
			c.dials.Add(1)
		}
		return nc, err
	}
	opt.DialFn = nil
	c.opt = opt
	return c
}

// defaultDial is rueidis' own dialling, or the user's deprecated DialFn.
func defaultDial(fn func(string, *net.Dialer, *tls.Config) (net.Conn, error)) func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
	return func(ctx context.Context, dst string, d *net.Dialer, tc *tls.Config) (net.Conn, error) {
		switch {
		case fn != nil:
			return fn(dst, d, tc)
		case tc != nil:
			return (&tls.Dialer{NetDialer: d, Config: tc}).DialContext(ctx, "tcp", dst)
		}
		return d.DialContext(ctx, "tcp", dst)
	}
}

// get returns the client for a batch, or errUnchecked when there is none
// yet: only a probe makes it.
func (c *Conn) get() (rueidis.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return nil, ErrStopped
	case c.client == nil:
		return nil, errUnchecked
	}
	return c.client, nil
}

// dialled makes the client if there is none, at most every redialEvery.
// The gate must be open.
func (c *Conn) dialled() (rueidis.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return nil, ErrStopped
	case c.client != nil:
		return c.client, nil
	case time.Now().Before(c.retryAt):
		return nil, c.err
	}
	client, err := rueidis.NewClient(c.opt)
	if err != nil {
		if client != nil {
			client.Close()
		}
		c.err = fmt.Errorf("connect: %w", err)
		c.retryAt = time.Now().Add(redialEvery)
		return nil, c.err
	}
	c.client = client
	return client, nil
}

// locate takes the latest answer of a master set's sentinels (asked off
// the probe's path, see sentinels.latest) and, when it names another
// server, drops the client: the probe's dial reaches the new one.
func (c *Conn) locate(ctx context.Context) error {
	if c.sentinels == nil {
		return nil
	}
	l, err := c.sentinels.latest(ctx)
	if err != nil {
		return err
	}
	addr := l.addr
	c.mu.Lock()
	defer c.mu.Unlock()
	c.split, c.switches = l.split, l.switches
	if addr != c.addr {
		if c.client != nil {
			c.client.Close()
			c.client = nil
		}
		c.addr, c.opt.InitAddress, c.retryAt = addr, []string{addr}, time.Time{}
	}
	return nil
}

// Addr is the server the Conn connects to: for a master set, the master
// the sentinels named at the last probe ("" before the first).
func (c *Conn) Addr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addr
}

// setSplit sets what the next probe reports as Info.Split: for a cluster's
// shard, the former masters that still serve its slots (Cluster.split).
func (c *Conn) setSplit(split []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.split = split
}

// splitMasters are the master set's other servers that the sentinels saw
// answer as masters at the last probe.
func (c *Conn) splitMasters() ([]string, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.split, c.switches
}

// redial drops the connection, so that the next probe dials the address
// again and meets whatever serves it now (a DNS name, or a proxy that
// sends new connections to the current master, after a failover): a kept
// connection would meet the demoted master for ever. The client closes
// on a goroutine of its own: Close waits for its calls in flight, which
// the node actor must not.
func (c *Conn) redial() {
	c.mu.Lock()
	client := c.client
	c.client = nil
	c.mu.Unlock()
	if client != nil {
		go client.Close()
	}
}

// Close closes the client; the Conn answers ErrStopped after it.
func (c *Conn) Close() {
	if c.sentinels != nil {
		c.sentinels.close()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.client != nil {
		c.client.Close()
		c.client = nil
	}
}
