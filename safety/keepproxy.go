package safety

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// KeepProxy forwards TCP connections from a loopback port to a Redis node
// and keeps its clients' connections when the process behind it changes,
// as a managed endpoint or a pooling proxy does: Switch moves every client
// connection to a new backend connection (to the same address, now served
// by a restarted process, or to another node), which the client never
// sees. Unlike Proxy.Failover, nothing is cut: a client that probed one
// process goes on talking to another.
//
// Each new backend connection is first sent HELLO 3 (its reply dropped),
// so that it speaks RESP3 as the client's handshake asked of the first.
// Bytes a client sends while its backend is gone (killed, not yet
// switched) wait for the next Switch; replies lost with a killed backend
// stay lost.
type KeepProxy struct {
	ln     net.Listener
	mu     sync.Mutex
	target string
	conns  map[*keptConn]struct{} // nil once closed
	wg     sync.WaitGroup
}

// keptConn is one client connection and its current backend.
type keptConn struct {
	client net.Conn
	mu     sync.Mutex
	cond   *sync.Cond // signalled when server changes
	server net.Conn   // nil while there is none (killed, not yet switched)
	closed bool
}

// NewKeepProxy listens on 127.0.0.1 and forwards to target.
func NewKeepProxy(target string) (*KeepProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &KeepProxy{ln: ln, target: target, conns: map[*keptConn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the address to dial instead of the node's.
func (p *KeepProxy) Addr() string { return p.ln.Addr().String() }

// Target is the address new backend connections go to.
func (p *KeepProxy) Target() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

// Switch points the proxy at target and moves every client connection to
// a new backend connection there, cutting the old ones. It returns once
// each moved connection is ready, with the first error (a connection it
// could not move is closed).
func (p *KeepProxy) Switch(target string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
	var errs []error
	for k := range p.conns {
		if err := p.dial(k, target, true); err != nil {
			k.close()
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Close stops listening and closes every connection.
func (p *KeepProxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	for k := range p.conns {
		k.close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *KeepProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		k := &keptConn{client: client}
		k.cond = sync.NewCond(&k.mu)
		p.mu.Lock()
		if p.conns == nil {
			p.mu.Unlock()
			client.Close()
			return
		}
		p.conns[k] = struct{}{}
		// The first backend gets no HELLO: the client's own handshake is
		// the first thing it sends.
		err = p.dial(k, p.target, false)
		p.mu.Unlock()
		if err != nil {
			p.drop(k)
			continue
		}
		p.wg.Go(func() { p.forward(k) })
	}
}

// dial connects k to target (p.mu held), after a HELLO 3 if hello, and
// starts copying its replies.
func (p *KeepProxy) dial(k *keptConn, target string, hello bool) error {
	server, err := net.DialTimeout("tcp", target, time.Second)
	if err != nil {
		return err
	}
	r := bufio.NewReader(server)
	if hello {
		server.SetDeadline(time.Now().Add(time.Second))
		_, err := server.Write([]byte("HELLO 3\r\n"))
		if err == nil {
			err = skipReply(r)
		}
		server.SetDeadline(time.Time{})
		if err != nil {
			server.Close()
			return fmt.Errorf("keep proxy: HELLO to %s: %w", target, err)
		}
	}
	k.mu.Lock()
	if k.closed { // dropped meanwhile (its client went): nobody would close server
		k.mu.Unlock()
		server.Close()
		return nil
	}
	old := k.server
	k.server = server
	k.cond.Broadcast()
	k.mu.Unlock()
	if old != nil {
		old.Close()
	}
	p.wg.Go(func() { p.back(k, server, r) })
	return nil
}

// forward copies what the client sends to its current backend, waiting
// for one while there is none. It ends with the client connection.
func (p *KeepProxy) forward(k *keptConn) {
	defer p.drop(k)
	buf := make([]byte, 32<<10)
	for {
		n, err := k.client.Read(buf)
		if n > 0 && !k.send(buf[:n]) {
			return
		}
		if err != nil {
			return
		}
	}
}

// send writes b to k's backend, waiting for a Switch while it has none or
// the one it has fails; false once k is closed.
func (k *keptConn) send(b []byte) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for {
		for k.server == nil && !k.closed {
			k.cond.Wait()
		}
		if k.closed {
			return false
		}
		if _, err := k.server.Write(b); err == nil {
			return true
		}
		k.server.Close() // dead: wait for the next one
		k.server = nil
	}
}

// back copies server's replies to the client. When the backend goes (a
// killed process, a switch), the client stays: it waits for the next.
func (p *KeepProxy) back(k *keptConn, server net.Conn, r *bufio.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := k.client.Write(buf[:n]); werr != nil {
				p.drop(k)
				return
			}
		}
		if err != nil {
			k.mu.Lock()
			if k.server == server {
				k.server = nil
			}
			k.mu.Unlock()
			server.Close()
			return
		}
	}
}

// drop closes k and forgets it.
func (p *KeepProxy) drop(k *keptConn) {
	k.close()
	p.mu.Lock()
	if p.conns != nil {
		delete(p.conns, k)
	}
	p.mu.Unlock()
}

func (k *keptConn) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return
	}
	k.closed = true
	k.client.Close()
	if k.server != nil {
		k.server.Close()
		k.server = nil
	}
	k.cond.Broadcast()
}

// skipReply reads one RESP2 or RESP3 reply from r and drops it.
func skipReply(r *bufio.Reader) error {
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if len(line) < 3 {
		return fmt.Errorf("bad reply line %q", line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '-':
		return errors.New(body)
	case '+', ':', '_', ',', '#', '(':
		return nil
	case '$', '=', '!':
		size, err := strconv.Atoi(body)
		if err != nil || size < 0 {
			return err // nil for $-1
		}
		_, err = io.CopyN(io.Discard, r, int64(size)+2)
		return err
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(body)
		if err != nil {
			return err
		}
		if kind == '%' || kind == '|' {
			n *= 2 // maps and attributes: keys and values
		}
		for range n {
			if err := skipReply(r); err != nil {
				return err
			}
		}
		if kind == '|' { // an attribute precedes the reply it annotates
			return skipReply(r)
		}
		return nil
	}
	return fmt.Errorf("unknown reply type %q", kind)
}
