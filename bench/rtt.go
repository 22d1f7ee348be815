package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"
)

// proxyEnv, set to a round-trip time, makes the bench a delay proxy
// server instead (see serveProxies): the bench runs a copy of itself so,
// which keeps the proxies' CPU out of the client's.
const proxyEnv = "REDLEASE_BENCH_PROXY_RTT"

// serveProxies is the proxy process: it forwards a loopback port to each
// target with rtt added (half each way), prints the ports' addresses on
// stdout, one a line in the targets' order, and runs until stdin ends (the
// bench closes it, or died). Each line on stdin is a new RTT to add.
func serveProxies(rtt string, targets []string) int {
	d, err := time.ParseDuration(rtt)
	if err != nil || d <= 0 || len(targets) == 0 {
		fmt.Fprintf(os.Stderr, "bench proxy: want %s=<rtt> and target addresses, got %q %q\n", proxyEnv, rtt, targets)
		return 2
	}
	signal.Ignore(os.Interrupt) // Ctrl-C reaches the whole group; the bench ends us once its run has stopped
	p := newDelayProxy(d / 2)
	for _, t := range targets {
		addr, err := p.listen(t)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench proxy: %v\n", err)
			return 1
		}
		fmt.Println(addr)
	}
	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		if d, err := time.ParseDuration(lines.Text()); err == nil && d >= 0 {
			p.setDelay(d / 2)
		}
	}
	return 0
}

// proxyProc is a running proxy process.
type proxyProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	addrs []string // in the targets' order
}

// startProxies starts a proxy process that adds rtt in front of each of
// targets.
func startProxies(rtt time.Duration, targets []string) (*proxyProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, targets...)
	cmd.Env = append(os.Environ(), proxyEnv+"="+rtt.String())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the proxy process: %w", err)
	}
	p := &proxyProc{cmd: cmd, stdin: stdin}
	lines := bufio.NewScanner(stdout)
	for range targets {
		if !lines.Scan() {
			p.close()
			return nil, errors.New("the proxy process ended before listing its addresses")
		}
		p.addrs = append(p.addrs, lines.Text())
	}
	return p, nil
}

// setRTT makes the proxies add rtt from now on.
func (p *proxyProc) setRTT(rtt time.Duration) error {
	_, err := fmt.Fprintln(p.stdin, rtt)
	return err
}

// close ends the process and waits for it; nil does nothing.
func (p *proxyProc) close() {
	if p == nil {
		return
	}
	p.stdin.Close()
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// cpu is the process's user+system CPU time so far (/proc/PID/stat, in
// 10ms ticks); -1 where that is unreadable, and for nil.
func (p *proxyProc) cpu() time.Duration {
	if p == nil {
		return -1
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/stat")
	if err != nil {
		return -1
	}
	// After the command's name in parentheses: state, then utime and
	// stime as the 12th and 13th fields.
	_, rest, _ := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return -1
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return -1
		}
		ticks += n
	}
	return time.Duration(ticks) * (time.Second / 100) // USER_HZ, 100 on Linux
}

// pingRTT measures the round trip of PING to a node direct and through
// its proxy, alternating, n times each, and returns both medians.
func pingRTT(direct, proxied string, n int) (directP50, proxiedP50 time.Duration, err error) {
	var conns [2]net.Conn
	for i, addr := range []string{direct, proxied} {
		if conns[i], err = net.DialTimeout("tcp", addr, 2*time.Second); err != nil {
			return 0, 0, err
		}
		defer conns[i].Close()
	}
	const ping, pong = "*1\r\n$4\r\nPING\r\n", "+PONG\r\n"
	var took [2][]time.Duration
	buf := make([]byte, len(pong))
	for range n + 10 { // the first 10 warm up
		for i, c := range conns {
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			t0 := time.Now()
			if _, err := io.WriteString(c, ping); err != nil {
				return 0, 0, err
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				return 0, 0, err
			}
			took[i] = append(took[i], time.Since(t0))
			if string(buf) != pong {
				return 0, 0, fmt.Errorf("PING answered %q", buf)
			}
		}
	}
	for i := range took {
		took[i] = took[i][10:]
		slices.Sort(took[i])
	}
	return took[0][n/2], took[1][n/2], nil
}
