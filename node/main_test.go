package node

import (
	"testing"

	"github.com/redis/rueidis"
	"github.com/redlease/redlease/internal/leakcheck"
)

// TestMain fails the package when goroutines of redlease, rueidis or
// protoactor outlive the tests: stopped actors must leave nothing behind.
func TestMain(m *testing.M) { leakcheck.Main(m, "redlease/", "rueidis", "protoactor") }

// newClient is a plain rueidis client of the server at addr, for a
// test's own commands; closed with the test.
func newClient(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
