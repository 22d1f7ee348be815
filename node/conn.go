package node

import (
	"fmt"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// redialEvery limits how often a node that could not be reached is dialled.
const redialEvery = time.Second

// conn is a node's client, dialled lazily when the node was down at start.
// Only batch goroutines call get, one at a time per node.
type conn struct {
	opt rueidis.ClientOption

	mu      sync.Mutex
	client  rueidis.Client
	closed  bool
	err     error     // the last dial error
	retryAt time.Time // no dial before this
}

func (c *conn) get() (rueidis.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return nil, ErrStopped
	case c.client != nil:
		return c.client, nil
	case time.Now().Before(c.retryAt):
		return nil, c.err
	}
	client, err := rueidis.NewClient(c.opt)
	if err != nil {
		c.err = fmt.Errorf("redlease: connect: %w", err)
		c.retryAt = time.Now().Add(redialEvery)
		return nil, c.err
	}
	c.client = client
	return client, nil
}

func (c *conn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.client != nil {
		c.client.Close()
		c.client = nil
	}
}
