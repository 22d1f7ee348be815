package redisproc

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"time"
)

// stallSeen bounds the wait for a stalled node's main thread to be seen
// asleep.
const stallSeen = 5 * time.Second

// Stall makes the node stop serving for d, as a slow command or a stuck
// disk would: DEBUG SLEEP sent on a connection of its own. It returns once
// the server sleeps (its main thread waits in nanosleep, as /proc tells),
// so that any command sent after Stall returns waits for the rest of d.
// The channel receives DEBUG SLEEP's outcome when the node woke up (nil:
// it slept the whole d). Linux only.
func (n *Node) Stall(d time.Duration) (<-chan error, error) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, errClosed
	}
	if n.cmd == nil {
		n.mu.Unlock()
		return nil, fmt.Errorf("redisproc: %s is not running", n.Addr())
	}
	pid := n.cmd.Process.Pid
	n.mu.Unlock()

	conn, err := net.DialTimeout("tcp", n.Addr(), time.Second)
	if err != nil {
		return nil, fmt.Errorf("redisproc: stalling %s: %w", n.Addr(), err)
	}
	conn.SetDeadline(time.Now().Add(d + 10*time.Second))
	if _, err := fmt.Fprintf(conn, "DEBUG SLEEP %.6f\r\n", d.Seconds()); err != nil {
		conn.Close()
		return nil, fmt.Errorf("redisproc: stalling %s: %w", n.Addr(), err)
	}
	woke := make(chan error, 1)
	go func() {
		defer conn.Close()
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err == nil && line != "+OK\r\n" {
			err = fmt.Errorf("redisproc: DEBUG SLEEP on %s answered %q", n.Addr(), strings.TrimSpace(line))
		}
		woke <- err
	}()

	deadline := time.Now().Add(stallSeen)
	for {
		asleep, err := sleeping(pid)
		if err != nil || asleep {
			return woke, err
		}
		if len(woke) > 0 { // already over: a tiny d
			return woke, nil
		}
		if time.Now().After(deadline) {
			return woke, fmt.Errorf("redisproc: %s was not seen asleep within %v of DEBUG SLEEP", n.Addr(), stallSeen)
		}
		time.Sleep(200 * time.Microsecond)
	}
}
