package main

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// delayProxy forwards TCP connections from loopback ports to nodes and
// delays what it forwards by a fixed time each way: a chunk read at t is
// written at t+delay while reading goes on, so pipelined commands share
// the delay as on a network link instead of each waiting out the ones
// before it (a latency, not a throughput limit; safety's Proxy sleeps in
// its copy loop, which serializes them).
//
// One goroutine per connection and direction reads and stamps the chunks.
// The delay is the same for all of them, so due times come in the order
// the chunks were read and a single queue serves every connection: one
// delivery goroutine sleeps until the head is due, then writes every chunk
// due by then, those bound for the same connection in one write. It
// writes itself, with no hand-off per chunk: a peer that stopped reading
// would hold up the others, which neither clients nor Redis do. (Right
// after setDelay lowers the delay, a chunk may wait behind one read before
// it that is due later.)
type delayProxy struct {
	delay atomic.Int64 // one way, in ns
	queue chan chunk
	done  chan struct{} // closed when deliver returns

	mu    sync.Mutex
	lns   []net.Listener
	conns map[net.Conn]struct{} // nil once closed
	wg    sync.WaitGroup        // accept loops, dials and readers
}

// chunk is what one read returned, on its way to the other side.
type chunk struct {
	to  *side
	buf *[]byte // from bufPool; nil: the source closed, so close to once what came before is written
	n   int
	due time.Time
}

// side is the write end of a connection, as deliver sees it; only deliver
// touches it once it is made.
type side struct {
	conn       net.Conn
	out        net.Buffers // what this round writes
	bufs       []*[]byte   // out's buffers, back to bufPool once written
	queued     bool        // in this round's list
	closeAfter bool        // its source ended, or a write failed: close it after this round
	closed     bool        // what still comes for it is dropped
}

// bufPool holds read buffers: a chunk keeps its buffer until it is
// written, so a reader takes a fresh one for every read.
var bufPool = sync.Pool{New: func() any {
	b := make([]byte, 16<<10)
	return &b
}}

// newDelayProxy starts a proxy that delays each direction by delay (half
// the round trip it adds); listen adds a target.
func newDelayProxy(delay time.Duration) *delayProxy {
	p := &delayProxy{
		queue: make(chan chunk, 4096),
		done:  make(chan struct{}),
		conns: map[net.Conn]struct{}{},
	}
	p.setDelay(delay)
	go p.deliver()
	return p
}

// setDelay sets the delay of what is read from now on, each way.
func (p *delayProxy) setDelay(d time.Duration) { p.delay.Store(int64(d)) }

// due is when a chunk read now is to be written.
func (p *delayProxy) due() time.Time { return time.Now().Add(time.Duration(p.delay.Load())) }

// listen forwards a new loopback port to target and returns its address.
func (p *delayProxy) listen(target string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		ln.Close()
		return "", net.ErrClosed
	}
	p.lns = append(p.lns, ln)
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.connect(c, target) })
		}
	})
	return ln.Addr().String(), nil
}

// connect dials target for the accepted client and forwards both ways; a
// node that cannot be dialed (a dead one) closes the client at once.
func (p *delayProxy) connect(client net.Conn, target string) {
	server, err := net.DialTimeout("tcp", target, 2*time.Second)
	if err != nil {
		client.Close()
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		client.Close()
		server.Close()
		return
	}
	p.conns[client], p.conns[server] = struct{}{}, struct{}{}
	p.wg.Go(func() { p.read(client, &side{conn: server}) })
	p.wg.Go(func() { p.read(server, &side{conn: client}) })
}

// read queues what src sends for to, stamped with when it is due, and
// once src ends queues to's close.
func (p *delayProxy) read(src net.Conn, to *side) {
	for {
		b := bufPool.Get().(*[]byte)
		n, err := src.Read(*b)
		if n > 0 {
			p.queue <- chunk{to: to, buf: b, n: n, due: p.due()}
		} else {
			bufPool.Put(b)
		}
		if err != nil {
			p.queue <- chunk{to: to, due: p.due()}
			p.mu.Lock()
			delete(p.conns, src) // deliver closes it, once the other way ends
			p.mu.Unlock()
			return
		}
	}
}

// deliver writes the queued chunks when they are due, until the queue is
// closed and empty.
func (p *delayProxy) deliver() {
	defer close(p.done)
	var s sleeper
	s.init()
	var round []*side // the sides this round writes to
	c, ok := <-p.queue
	for ok {
		// A sleep may end early by what the machine adds on waking, but
		// never by more than a quarter of the delay.
		cutoff := s.until(c.due, time.Duration(p.delay.Load())/4)
		round = c.to.add(c, round)
		// Every other chunk due by then goes out in this round; the first
		// one not due yet starts the next.
		pending := false
	drain:
		for {
			select {
			case c, ok = <-p.queue:
				if !ok {
					break drain
				}
				if c.due.After(cutoff) {
					pending = true
					break drain
				}
				round = c.to.add(c, round)
			default:
				break drain
			}
		}
		for _, to := range round {
			to.flush()
		}
		round = round[:0]
		if ok && !pending {
			c, ok = <-p.queue
		}
	}
}

// add takes c into this round, and to into round if it is not yet.
func (to *side) add(c chunk, round []*side) []*side {
	if !to.queued {
		to.queued = true
		round = append(round, to)
	}
	if c.buf == nil {
		to.closeAfter = true
	} else {
		to.out = append(to.out, (*c.buf)[:c.n])
		to.bufs = append(to.bufs, c.buf)
	}
	return round
}

// flush writes the round's chunks for to in one write (writev), then
// closes it if its source ended.
func (to *side) flush() {
	if len(to.out) > 0 && !to.closed {
		out := to.out // WriteTo consumes its receiver
		if _, err := out.WriteTo(to.conn); err != nil {
			to.closeAfter = true
		}
	}
	for _, b := range to.bufs {
		bufPool.Put(b)
	}
	clear(to.out)
	clear(to.bufs)
	to.out, to.bufs, to.queued = to.out[:0], to.bufs[:0], false
	if to.closeAfter && !to.closed {
		to.closed = true
		to.conn.Close() // its reader then ends the other way
	}
}

// close stops listening, cuts every connection and waits until what was
// read is delivered.
func (p *delayProxy) close() {
	p.mu.Lock()
	for _, ln := range p.lns {
		ln.Close()
	}
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil // tells connect the proxy is closing
	p.mu.Unlock()
	p.wg.Wait()
	close(p.queue)
	<-p.done
}
