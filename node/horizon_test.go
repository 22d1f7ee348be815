package node

import (
	"strconv"
	"testing"
	"time"

	"github.com/redlease/redlease/internal/redisproc"
)

// The record lives as long as recorded.due assumes it does (recordSlack
// TTLs after an update), keeps the longest TTL, and answers the one it
// held before: the script and the actor's bookkeeping are one rule.
func TestRecordLivesAsDueAssumes(t *testing.T) {
	c := redisproc.Start(t, 1)
	client := newClient(t, c.Addrs()[0])
	ctx, key := t.Context(), RecordKey(epochKey)
	for _, step := range []struct {
		ttl        time.Duration
		was, holds string
	}{
		{time.Second, "0", "1000"},
		{400 * time.Millisecond, "1000", "1000"}, // a shorter one keeps the longest
		{3 * time.Second, "1000", "3000"},
	} {
		was, err := client.Do(ctx, recordCmd(client, key, step.ttl)).ToInt64()
		if err != nil {
			t.Fatal(err)
		}
		holds, _, _ := c.Nodes[0].Get(ctx, key)
		pttl, err := c.Nodes[0].PTTL(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		var r recorded
		r.due(time.Now(), step.ttl) // what the actor assumes after sending it
		if life := time.Until(r.until); pttl < life-200*time.Millisecond || strconv.FormatInt(was, 10) != step.was || holds != step.holds {
			t.Fatalf("record of %v: was %d, holds %q, PTTL %v; want was %s, holds %s, PTTL about %v (recorded.due)",
				step.ttl, was, holds, pttl, step.was, step.holds, life)
		}
	}
}
