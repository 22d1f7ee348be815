package main

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"

	"github.com/redlease/redlease/engine"
)

// sent counts the commands every client under test wrote to the nodes, as
// they went on the wire: a script is one command, whatever it calls
// inside (the nodes' own count, INFO's total_commands_processed, counts
// those calls too). The bench's own admin connections are not counted,
// nor redlease's: see engines.
var sent atomic.Int64

// engines are the live redlease engines of the run. Their node actors send
// each batch as one script call that carries every command of the batch
// (node/batch.lua), so for them the bench counts the commands carried
// (the nodes' Stats().Commands), not the scripts on the wire: that is the
// number the other clients' cmds compares with.
var engines liveEngines

type liveEngines struct {
	mu   sync.Mutex
	live map[*engine.Engine]struct{}
}

func (l *liveEngines) add(e *engine.Engine) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.live == nil {
		l.live = map[*engine.Engine]struct{}{}
	}
	l.live[e] = struct{}{}
}

func (l *liveEngines) remove(e *engine.Engine) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.live, e)
}

// commands is the commands the live engines' node actors sent so far.
func (l *liveEngines) commands() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n uint64
	for e := range l.live {
		for _, s := range e.Stats().Nodes {
			n += s.Commands
		}
	}
	return int64(n)
}

// countRueidis is a rueidis DialCtxFn whose connections count what they
// write in sent.
func countRueidis(ctx context.Context, dst string, d *net.Dialer, tc *tls.Config) (net.Conn, error) {
	var c net.Conn
	var err error
	if tc != nil {
		c, err = (&tls.Dialer{NetDialer: d, Config: tc}).DialContext(ctx, "tcp", dst)
	} else {
		c, err = d.DialContext(ctx, "tcp", dst)
	}
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c}, nil
}

// countGoRedis is go-redis' Dialer doing the same.
func countGoRedis(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c}, nil
}

// countingConn counts the commands written through it: the top-level
// arrays of the RESP request stream, which a write may split anywhere.
type countingConn struct {
	net.Conn
	s respScanner
}

func (c *countingConn) Write(b []byte) (int, error) {
	sent.Add(c.s.scan(b))
	return c.Conn.Write(b)
}

// respScanner follows a stream of RESP requests (arrays of bulk strings,
// as every client sends them) across writes.
type respScanner struct {
	state int   // what the next byte is part of: one of the states below
	num   int64 // the number being read off a header line
	args  int64 // bulk strings left in the command
	skip  int64 // bytes left of the bulk string, with its CRLF
}

const (
	atCommand = iota // '*' next
	inCount          // the array's length, up to LF
	atArg            // '$' next
	inLen            // the bulk string's length, up to LF
	inArg            // the bulk string's bytes
)

// scan reads b and returns the commands it completed.
func (s *respScanner) scan(b []byte) (done int64) {
	for i := 0; i < len(b); i++ {
		switch c := b[i]; s.state {
		case atCommand:
			if c == '*' {
				s.state, s.num = inCount, 0
			}
		case atArg:
			if c == '$' {
				s.state, s.num = inLen, 0
			}
		case inCount, inLen:
			switch {
			case c >= '0' && c <= '9':
				s.num = s.num*10 + int64(c-'0')
			case c == '\n' && s.state == inCount:
				s.args, s.state = s.num, atArg
				if s.args == 0 {
					s.state = atCommand
					done++
				}
			case c == '\n':
				s.skip, s.state = s.num+2, inArg
			}
		case inArg:
			n := min(s.skip, int64(len(b)-i))
			s.skip -= n
			i += int(n) - 1
			if s.skip == 0 {
				if s.args--; s.args == 0 {
					s.state = atCommand
					done++
				} else {
					s.state = atArg
				}
			}
		}
	}
	return done
}
