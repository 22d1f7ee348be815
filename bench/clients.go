package main

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	goredispool "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	rueidispool "github.com/go-redsync/redsync/v4/redis/rueidis"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidiscompat"
	"github.com/redis/rueidis/rueidislock"

	"github.com/redlease/redlease/engine"
	"github.com/redlease/redlease/node"
)

// lockTTL is every client's lock TTL, so all of them do the same work.
const lockTTL = 10 * time.Second

// clientNames are the clients the benchmark knows, in table order.
var clientNames = []string{
	"redlease",
	"redsync", "redsync-rueidis", "redsync-rueidis-tuned",
	"raw", "raw-tuned",
	"rueidislock", "redislock",
}

// clusterMasters, with -cluster, is how many masters the one node, a
// Redis Cluster, has; 0 for standalone nodes.
var clusterMasters int

// onCluster are the clients that run on a Redis Cluster (-cluster):
// redlease, and those over rueidis, whose client finds the cluster from
// the address it is given and routes each key to its master.
var onCluster = map[string]bool{"redlease": true, "redsync-rueidis": true, "redsync-rueidis-tuned": true,
	"raw": true, "raw-tuned": true, "rueidislock": true}

// singleNode are the clients that lock on one Redis, not by Redlock: they
// run only on the suite's one-node rows, and the tables mark them with
// singleNodeMark.
var singleNode = map[string]bool{"rueidislock": true, "redislock": true}

// singleNodeMark follows the name of a single-node client in the tables,
// and singleNodeNote, printed under the comparison table, says what it
// means.
const (
	singleNodeMark = "*"
	singleNodeNote = singleNodeMark + " a single-Redis lock, not Redlock: no fault tolerance; run on one node only"
)

// clientLabel is a client's name as the tables show it.
func clientLabel(name string) string {
	if singleNode[name] {
		return name + singleNodeMark
	}
	return name
}

// rueidis tuned for batching, as redlease's node actors batch in their own
// way: one connection per node (PipelineMultiplex -1; rueidis' default, 0,
// means log2(GOMAXPROCS) capped at 2, so 2 connections on 2 cores, the
// same as 1) whose write loop, while more than one caller waits on it,
// sleeps up to tunedFlushDelay after each flush so that more commands
// share a write. (With a single caller it never sleeps, so 1 worker pays
// nothing; with a few, the sleep costs them its full length, rounded up
// by the Go timer to about a millisecond when the process is otherwise
// idle: tuned rueidis is for many concurrent callers.)
//
// Chosen by measuring raw-tuned, uncontended, 1000 resources, 2s runs, on
// the 2-core machine of docs/PERFORMANCE-NOTES.md (client and nodes sharing the cores):
// cycles/s, the median of runs that vary by up to ±20%:
//
//	multiplex  delay   runs   1 node: 128  512 workers   5 nodes: 128  512
//	 1 (= 0)   none     1             56k  70k                   7.7k  7.2k
//	 1 (= 0)   20µs     1             76k  114k                  13k   9.5k
//	 1 (= 0)   50µs     1             137k 118k                  8.6k  10k
//	 1 (= 0)   100µs    1             94k  117k                  12k   12k
//	 1 (= 0)   200µs    1             107k 131k                  13k   16k
//	 2         none     1             63k  61k                   8.4k  7.9k
//	 2         100µs    1             101k 109k                  7.5k  8.9k
//	-1         none     1             69k  98k                   12k   10k
//	-1         20µs     1             114k 136k                  15k   14k
//	-1         50µs     5             104k 139k                  15k   16k
//	-1         100µs    5             101k 124k                  18k   19k
//	-1         150µs    3             98k  137k                  21k   22k
//	-1         200µs    8             93k  141k                  23k   22k
//	-1         300µs    4             68k  119k                  21k   19k
//
// One connection (-1) wins on five nodes by far, and 200µs is the best
// delay there (+25% over 100µs). On one node the single runs above did not
// tell the delays apart; three runs of each (go run ./bench -n 1 -clients
// raw-tuned -workers 128,512, cycles/s, median and range) did:
//
//	multiplex  delay    1 node: 128 workers      512 workers
//	-1         20µs     105k (103-113k)          125k (119-130k)
//	-1         50µs     115k (103-122k)          132k (131-144k)
//	-1         100µs    103k (87-107k)           134k (124-142k)
//	-1         200µs     93k (82-95k)            137k (136-175k)
//	 1 (= 0)   50µs      99k (96-130k)           118k (110-126k)
//	 1 (= 0)   200µs    103k (102-106k)          124k (123-125k)
//
// 50µs is the best on one node at 128 workers (+24% over 200µs) and within
// the noise of it at 512, so a single node gets 50µs and more nodes 200µs:
// each configuration the strongest we measured for it.
const (
	tunedMultiplex       = -1
	tunedFlushDelay      = 200 * time.Microsecond // on several nodes
	tunedFlushDelayAlone = 50 * time.Microsecond  // on a single node
)

// flushDelay is the tuned MaxFlushDelay for a client of nodes nodes.
func flushDelay(nodes int) time.Duration {
	if nodes == 1 {
		return tunedFlushDelayAlone
	}
	return tunedFlushDelay
}

// tunedHelp describes the tuned settings for -h.
func tunedHelp() string {
	return fmt.Sprintf("one connection per node (PipelineMultiplex %d), MaxFlushDelay %v (%v on a single node)",
		tunedMultiplex, tunedFlushDelay, tunedFlushDelayAlone)
}

// rueidisOption is the rueidis client option for addr, tuned or at
// rueidis' defaults; client-side caching is off either way (locks never
// read cached values), except where a lock client needs it.
func rueidisOption(addr string, tuned bool, nodes int) rueidis.ClientOption {
	opt := rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, DialCtxFn: countRueidis}
	if tuned {
		opt.PipelineMultiplex, opt.MaxFlushDelay = tunedMultiplex, flushDelay(nodes)
	}
	return opt
}

// locker is one lock client under test, connected to every node.
type locker interface {
	// acquire takes the lock on resource: one round when retry is false,
	// otherwise with the client's own retry policy.
	acquire(ctx context.Context, resource string, retry bool) (held, error)
	// close disconnects; every lock taken has been released by then.
	close()
}

// held is an acquired lock. *engine.Lease is one as it is.
type held interface {
	Release(ctx context.Context) error
}

// newLocker connects the named client to addrs.
func newLocker(name string, addrs []string) (locker, error) {
	switch name {
	case "redlease":
		return newRedlease(addrs)
	case "redsync":
		return newRedsync(addrs)
	case "redsync-rueidis", "redsync-rueidis-tuned":
		return newRedsyncRueidis(addrs, name == "redsync-rueidis-tuned")
	case "raw", "raw-tuned":
		return newRaw(addrs, name == "raw-tuned")
	case "rueidislock":
		return newRueidislock(addrs)
	case "redislock":
		return newRedislock(addrs)
	}
	return nil, fmt.Errorf("unknown client %q (known: %v)", name, clientNames)
}

// redleaseLocker is the engine with its default Config; TTL is set only
// to pin it to lockTTL should the default ever change.
type redleaseLocker struct{ e *engine.Engine }

func newRedlease(addrs []string) (*redleaseLocker, error) {
	if clusterMasters > 0 { // one Redis Cluster, by its seed
		addrs = []string{node.Target{Cluster: addrs}.String()}
	}
	e, err := engine.New(engine.Config{Nodes: addrs, TTL: lockTTL})
	if err != nil {
		return nil, err
	}
	engines.add(e)
	return &redleaseLocker{e}, nil
}

func (r *redleaseLocker) acquire(ctx context.Context, resource string, retry bool) (held, error) {
	var l *engine.Lease
	var err error
	if retry {
		l, err = r.e.Acquire(ctx, resource)
	} else {
		l, err = r.e.TryAcquire(ctx, resource)
	}
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return l, nil
}

func (r *redleaseLocker) close() {
	engines.remove(r.e)
	_ = r.e.Close()
}

// redsyncLocker is go-redsync with its default options (TTL aside), over
// a go-redis v9 client with default options per node (redsync), or over a
// rueidis client per node through redsync's rueidis adapter, at rueidis'
// defaults or tuned.
type redsyncLocker struct {
	rs     *redsync.Redsync
	closes []func()
}

func newRedsync(addrs []string) (*redsyncLocker, error) {
	r := &redsyncLocker{}
	var pools []redsyncredis.Pool
	for _, addr := range addrs {
		c, err := newGoRedis(addr)
		if err != nil {
			r.close()
			return nil, fmt.Errorf("redsync: %w", err)
		}
		r.closes = append(r.closes, func() { _ = c.Close() })
		pools = append(pools, goredispool.NewPool(c))
	}
	r.rs = redsync.New(pools...)
	return r, nil
}

func newRedsyncRueidis(addrs []string, tuned bool) (*redsyncLocker, error) {
	r := &redsyncLocker{}
	var pools []redsyncredis.Pool
	for _, addr := range addrs {
		c, err := rueidis.NewClient(rueidisOption(addr, tuned, len(addrs)))
		if err != nil {
			r.close()
			return nil, fmt.Errorf("redsync over rueidis: node %s: %w", addr, err)
		}
		r.closes = append(r.closes, c.Close)
		pools = append(pools, rueidispool.NewPool(rueidiscompat.NewAdapter(c)))
	}
	r.rs = redsync.New(pools...)
	return r, nil
}

// newGoRedis is a go-redis client for addr with default options, pinged:
// go-redis dials lazily, and a dead node should fail here, not in the run.
func newGoRedis(addr string) (*goredis.Client, error) {
	c := goredis.NewClient(&goredis.Options{Addr: addr, Dialer: countGoRedis})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("node %s: %w", addr, err)
	}
	return c, nil
}

// goRedisLog takes go-redis's log lines off stderr, where they would break
// the progress line: its pool logs every failed dial, and the degraded
// workload makes many. runOne reports their number and the first one
// after each run.
var goRedisLog = &redisLogger{}

func init() { goredis.SetLogger(goRedisLog) }

type redisLogger struct {
	mu    sync.Mutex
	n     int
	first string
}

func (l *redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == 0 {
		l.first = fmt.Sprintf(format, v...)
	}
	l.n++
}

// take returns the lines logged since the last take: how many, and the
// first.
func (l *redisLogger) take() (int, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, first := l.n, l.first
	l.n, l.first = 0, ""
	return n, first
}

func (r *redsyncLocker) acquire(ctx context.Context, resource string, retry bool) (held, error) {
	// A Mutex holds the value of one lock: a new one per acquisition, as
	// concurrent holders of one name need.
	m := r.rs.NewMutex(resource, redsync.WithExpiry(lockTTL))
	var err error
	if retry {
		err = m.LockContext(ctx)
	} else {
		err = m.TryLockContext(ctx)
	}
	if err != nil {
		return nil, err
	}
	return redsyncLease{m}, nil
}

func (r *redsyncLocker) close() {
	for _, c := range r.closes {
		c()
	}
}

type redsyncLease struct{ m *redsync.Mutex }

func (l redsyncLease) Release(ctx context.Context) error {
	ok, err := l.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock not confirmed by a quorum")
	}
	return err
}

// Retry schedule of the raw client: redlease's default (exponential from
// 2ms to 250ms, ±50%, 32 rounds), so contended runs compare the engines,
// not the retry policies.
const (
	rawAttempts     = 32
	rawRetryInitial = 2 * time.Millisecond
	rawRetryMax     = 250 * time.Millisecond
)

// rawDelete is the compare-and-delete every Redlock client uses: delete
// the key only while it holds this lock's value.
const rawDelete = `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`

var errTaken = errors.New("raw: held by another owner")

// rawLocker issues the commands a perfect Redlock client needs straight
// through rueidis, at its defaults (raw) or tuned (raw-tuned): SET NX PX
// on all nodes in parallel, a decision at quorum, compare-and-delete on
// all nodes. Tuned, rueidis batches the commands of concurrent locks into
// shared writes as redlease does; it is the strongest Redlock peer.
type rawLocker struct {
	clients []rueidis.Client
	quorum  int
	del     *rueidis.Lua
}

func newRaw(addrs []string, tuned bool) (*rawLocker, error) {
	r := &rawLocker{quorum: len(addrs)/2 + 1, del: rueidis.NewLuaScript(rawDelete)}
	for _, addr := range addrs {
		c, err := rueidis.NewClient(rueidisOption(addr, tuned, len(addrs)))
		if err != nil {
			r.close()
			return nil, fmt.Errorf("raw: node %s: %w", addr, err)
		}
		r.clients = append(r.clients, c)
	}
	return r, nil
}

func (r *rawLocker) close() {
	for _, c := range r.clients {
		c.Close()
	}
}

func (r *rawLocker) acquire(ctx context.Context, resource string, retry bool) (held, error) {
	attempts := 1
	if retry {
		attempts = rawAttempts
	}
	wait := rawRetryInitial
	var timer *time.Timer
	for a := 1; ; a++ {
		l, err := r.try(ctx, resource)
		if err == nil {
			return l, nil
		}
		if a == attempts || ctx.Err() != nil {
			return nil, err
		}
		d := wait/2 + rand.N(wait) // wait ± 50%
		wait = min(2*wait, rawRetryMax)
		if timer == nil {
			timer = time.NewTimer(d)
			defer timer.Stop()
		} else {
			timer.Reset(d)
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-timer.C:
		}
	}
}

// rawLease is one attempt's lock. One goroutine per node sends the SET,
// reports it, then waits for free and sends the compare-and-delete on the
// same node. Tying both commands to one goroutine keeps them in order even
// though rueidis may put them on different connections, which matters
// because try returns at quorum while slower SETs are still in flight.
type rawLease struct {
	r          *rawLocker
	key, value string
	votes      chan error      // one SET outcome per node
	free       chan struct{}   // closed by Release
	releaseCtx context.Context // written before free is closed
	deletes    chan error      // one compare-and-delete outcome per node
}

// try makes one round on all nodes and returns as soon as the quorum is
// decided; a lost round deletes its keys everywhere before returning.
func (r *rawLocker) try(ctx context.Context, resource string) (*rawLease, error) {
	n := len(r.clients)
	l := &rawLease{
		r: r, key: resource, value: newValue(),
		votes: make(chan error, n), free: make(chan struct{}), deletes: make(chan error, n),
	}
	start := time.Now()
	for _, c := range r.clients {
		go l.node(ctx, c)
	}
	granted, lost := 0, 0
	var lastErr error
	for granted < r.quorum && lost <= n-r.quorum {
		if err := <-l.votes; err == nil {
			granted++
		} else {
			lost++
			lastErr = err
		}
	}
	// Redlock's validity check: the round must end well within the TTL.
	if granted >= r.quorum && time.Since(start) < lockTTL-lockTTL/100-2*time.Millisecond {
		return l, nil
	}
	_ = l.Release(context.WithoutCancel(ctx))
	if lastErr == nil {
		lastErr = errors.New("raw: round outlived the TTL")
	}
	return nil, fmt.Errorf("raw: %d of %d nodes granted, %d needed: %w", granted, n, r.quorum, lastErr)
}

func (l *rawLease) node(ctx context.Context, c rueidis.Client) {
	err := c.Do(ctx, c.B().Set().Key(l.key).Value(l.value).Nx().PxMilliseconds(lockTTL.Milliseconds()).Build()).Error()
	if rueidis.IsRedisNil(err) {
		err = errTaken
	}
	l.votes <- err
	<-l.free
	l.deletes <- l.r.del.Exec(l.releaseCtx, c, []string{l.key}, []string{l.value}).Error()
}

// Release deletes the key on all nodes and waits for all of them; it
// fails when fewer than a quorum answered.
func (l *rawLease) Release(ctx context.Context) error {
	l.releaseCtx = ctx
	close(l.free)
	answered := 0
	var lastErr error
	for range len(l.r.clients) {
		if err := <-l.deletes; err == nil {
			answered++
		} else {
			lastErr = err
		}
	}
	if answered < l.r.quorum {
		return fmt.Errorf("raw: release answered by %d nodes, %d needed: %w", answered, l.r.quorum, lastErr)
	}
	return nil
}

// newValue is a lock's owner value: 16 random bytes, as redsync uses.
func newValue() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // never fails (crypto/rand panics instead)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// rueidislockLocker is rueidis' own lock, rueidislock, on one node, over a
// tuned rueidis client (rueidislock forces one connection itself) with
// client-side caching on: a waiting WithContext learns of a release
// through the key's invalidation, where without caching it polls every
// 20ms. Uncontended, caching off measured 1-7% faster (63k/71k against
// 60k/70k cycles/s at 128/512 workers, 2 runs each: within the noise),
// so the lock keeps the configuration it is built for. KeyMajority 1:
// one key per lock, a single-Redis lock; its default (2 of 3 keys on the
// one node) costs three keys for the same guarantee. Retries, when asked
// for, are its own.
type rueidislockLocker struct{ l rueidislock.Locker }

func newRueidislock(addrs []string) (*rueidislockLocker, error) {
	if len(addrs) != 1 {
		return nil, fmt.Errorf("rueidislock locks on one node, not %d", len(addrs))
	}
	opt := rueidisOption(addrs[0], true, 1)
	opt.DisableCache = false
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption: opt, KeyMajority: 1, KeyValidity: lockTTL, NoLoopTracking: true,
	})
	if err != nil {
		return nil, fmt.Errorf("rueidislock: %w", err)
	}
	return &rueidislockLocker{l}, nil
}

func (r *rueidislockLocker) acquire(ctx context.Context, resource string, retry bool) (held, error) {
	var cancel context.CancelFunc
	var err error
	if retry {
		_, cancel, err = r.l.WithContext(ctx, resource)
	} else {
		_, cancel, err = r.l.TryWithContext(ctx, resource)
	}
	if err != nil {
		return nil, err
	}
	return unlockFunc(cancel), nil
}

func (r *rueidislockLocker) close() { r.l.Close() }

// unlockFunc releases a rueidislock lock: its cancel deletes the key and
// waits for that.
type unlockFunc func()

func (u unlockFunc) Release(context.Context) error {
	u()
	return nil
}

// redislockLocker is bsm/redislock, a single-Redis lock, over a go-redis
// v9 client with default options. Retries, when asked for, follow
// redlease's default schedule (exponential from 2ms to 250ms, 32 tries).
type redislockLocker struct {
	c  *goredis.Client
	rl *redislock.Client
}

func newRedislock(addrs []string) (*redislockLocker, error) {
	if len(addrs) != 1 {
		return nil, fmt.Errorf("redislock locks on one node, not %d", len(addrs))
	}
	c, err := newGoRedis(addrs[0])
	if err != nil {
		return nil, fmt.Errorf("redislock: %w", err)
	}
	return &redislockLocker{c: c, rl: redislock.New(c)}, nil
}

func (r *redislockLocker) acquire(ctx context.Context, resource string, retry bool) (held, error) {
	var opt *redislock.Options
	if retry {
		opt = &redislock.Options{RetryStrategy: redislock.LimitRetry(redislock.ExponentialBackoff(rawRetryInitial, rawRetryMax), rawAttempts-1)}
	}
	l, err := r.rl.Obtain(ctx, resource, lockTTL, opt)
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (r *redislockLocker) close() { _ = r.c.Close() }

// refused reports whether err, a single-round acquire's failure, is a
// refusal (the lock is held by another owner), not a timeout or an
// error talking to a node: the trylock workload counts refusals as tries.
func refused(err error) bool {
	var ae *engine.AcquireError
	if errors.As(err, &ae) {
		for _, n := range ae.Nodes {
			if n.Outcome != engine.Granted && n.Outcome != engine.Taken {
				return false
			}
		}
		return true // no nodes: refused in the engine, held by one of its callers
	}
	var re redsync.RedisError
	if errors.As(err, &re) {
		return false
	}
	var taken *redsync.ErrTaken
	var nodeTaken *redsync.ErrNodeTaken
	return errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) || errors.As(err, &nodeTaken) ||
		errors.Is(err, errTaken) || errors.Is(err, rueidislock.ErrNotLocked) || errors.Is(err, redislock.ErrNotObtained)
}
