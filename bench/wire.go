package main

import (
	"context"
	"crypto/tls"
	"net"
	"sync/atomic"
)

// sent counts the commands every client under test wrote to the nodes, as
// they went on the wire: a script is one command, whatever it calls
// inside (the nodes' own count, INFO's total_commands_processed, counts
// those calls too). The bench's own admin connections are not counted.
var sent atomic.Int64

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
