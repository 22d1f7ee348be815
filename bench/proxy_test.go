package main

import (
	"fmt"
	"io"
	"net"
	"slices"
	"testing"
	"time"
)

// The delay proxy adds its round trip to a request, and pipelined
// requests share it rather than wait out each other's: a writer that slept
// the delay before each chunk would answer the last of n requests about
// n×delay after it was sent, and one that slept in its copy loop (as
// safety's Proxy does) would hold a request read during a sleep until the
// sleep ended, rtt/4 more in the median. The bounds leave tens of
// milliseconds to spare, so that a loaded machine cannot fail them.
func TestDelayProxy(t *testing.T) {
	const rtt = 200 * time.Millisecond
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	p := newDelayProxy(rtt / 2)
	defer p.close()
	addr, err := p.listen(echo.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))

	const n = 40
	req := func(i int) string { return fmt.Sprintf("req%04d\n", i) }
	buf := make([]byte, len(req(0)))
	t0 := time.Now()
	if _, err := io.WriteString(c, req(0)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	// The proxy may end a sleep up to a quarter of the delay early.
	if took := time.Since(t0); took < rtt-rtt/4 || took > rtt+time.Second {
		t.Errorf("one request took %v through a proxy adding %v", took, rtt)
	}

	// n requests, each in a write of its own 5ms apart, so that the proxy
	// reads them one by one.
	sent := make(chan time.Time, n)
	go func() {
		for i := range n {
			sent <- time.Now()
			if _, err := io.WriteString(c, req(i)); err != nil {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	took := make([]time.Duration, n)
	for i := range n {
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		took[i] = time.Since(<-sent)
		if string(buf) != req(i) {
			t.Fatalf("answer %d is %q, want %q: out of order", i, buf, req(i))
		}
	}
	slices.Sort(took)
	if p50, slowest := took[n/2], took[n-1]; p50 > rtt+rtt/8 || slowest > 5*rtt {
		t.Errorf("pipelined: %d requests took %v in the median, %v at most, through a proxy adding %v: serialized?", n, p50, slowest, rtt)
	}
}
