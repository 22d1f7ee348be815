package redisproc

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"time"
)

// Stall makes the node stop serving its clients for d, as a slow command
// or a stuck disk would: CLIENT PAUSE ALL, sent on a connection of its
// own. (Not DEBUG SLEEP: engines count DEBUG calls as possible reloads of
// the dataset and quarantine the node.) It returns once the pause is in
// effect, so that any command sent after Stall returns waits for the rest
// of d. The channel receives the outcome when the node serves again (nil:
// it paused the whole d): a PING sent behind the pause, answered.
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
	n.mu.Unlock()

	conn, err := net.DialTimeout("tcp", n.Addr(), time.Second)
	if err != nil {
		return nil, fmt.Errorf("redisproc: stalling %s: %w", n.Addr(), err)
	}
	conn.SetDeadline(time.Now().Add(d + 10*time.Second))
	r := bufio.NewReader(conn)
	answer := func(cmd, want string) error {
		line, err := r.ReadString('\n')
		if err == nil && line != want {
			err = fmt.Errorf("redisproc: %s on %s answered %q", cmd, n.Addr(), strings.TrimSpace(line))
		}
		return err
	}
	ms := max(d.Milliseconds(), 1)
	if _, err := fmt.Fprintf(conn, "CLIENT PAUSE %d ALL\r\nPING\r\n", ms); err != nil {
		conn.Close()
		return nil, fmt.Errorf("redisproc: stalling %s: %w", n.Addr(), err)
	}
	if err := answer("CLIENT PAUSE", "+OK\r\n"); err != nil {
		conn.Close()
		return nil, err
	}
	woke := make(chan error, 1)
	go func() {
		defer conn.Close()
		woke <- answer("PING", "+PONG\r\n")
	}()
	return woke, nil
}
