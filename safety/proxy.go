package safety

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards TCP connections from a loopback port to a node, delaying
// every chunk it forwards by the current delay: a slow link, for real.
type Proxy struct {
	ln     net.Listener
	delay  atomic.Int64 // nanoseconds
	mu     sync.Mutex
	target string // under mu
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// NewProxy listens on 127.0.0.1 and forwards to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the address to dial instead of the node's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDelay sets the delay of every forwarded chunk, both ways.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Failover forwards new connections to target and cuts every connection
// made so far, as a failover behind one address (a DNS name, a virtual IP)
// does.
func (p *Proxy) Failover(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
	for c := range p.conns {
		c.Close()
	}
}

// Retarget forwards new connections to target and keeps the connections
// made so far where they go: a DNS name or a lazily reconnecting proxy
// in front of a master and its replica, after a failover between them.
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
}

// Close stops listening and cuts every connection.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil // tells accept the proxy is closing
	p.mu.Unlock()
	p.wg.Wait()
}

// accept takes each connection and has connect dial its node, on a
// goroutine of its own: a dial that waits (up to its second) must not
// hold up the connections behind it, a new engine's among them. Dialling
// in this loop made new engines fail to connect ("1 of 5 nodes
// reachable") about one fault round in four on a loaded machine.
func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.connect(client) })
	}
}

// connect dials the node for client and forwards between them.
func (p *Proxy) connect(client net.Conn) {
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	server, err := net.DialTimeout("tcp", target, time.Second)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(client, server, target) {
		return
	}
	p.wg.Go(func() { p.pipe(server, client) })
	p.wg.Go(func() { p.pipe(client, server) })
}

// track registers a pair of connections, unless the proxy is closing or
// failed over to another target than the one b was dialled to (Failover
// cut the connections it found; this pair came too late for it).
func (p *Proxy) track(a, b net.Conn, target string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil || p.target != target {
		a.Close()
		b.Close()
		return false
	}
	p.conns[a], p.conns[b] = struct{}{}, struct{}{}
	return true
}

// pipe copies from src to dst, chunk by chunk, each after the delay; when
// either side fails it closes both.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer func() {
		dst.Close()
		src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := time.Duration(p.delay.Load()); d > 0 {
				time.Sleep(d)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a broken connection: cut both sides
		}
	}
}
