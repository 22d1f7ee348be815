package node

import (
	"context"

	"github.com/redis/rueidis"

	"github.com/redlease/redlease/internal/hashslot"
)

// Unlock deletes lock key key on the node c reaches if it still holds
// value, and announces the release as a holder's own release does (the
// batch script's announced release): the next waiter is named and runs
// its round at once, the others after it in their order. It grants
// nobody the key (it names no engine's channel: an operator's process
// does not listen), and requires no epoch marker (it only deletes).
// cluster: c is a Redis Cluster's client, where the marker key goes in
// the lock key's slot and the announcement on that slot's sharded
// channel. deleted: the key held value, and is gone. For an operator's
// forced unlock (cmd/redlease): waiters must wake then, not at the key's
// expiry.
func Unlock(ctx context.Context, c rueidis.Client, prefix, key, value string, cluster bool) (deleted bool, err error) {
	epochKey := EpochKey(prefix)
	if cluster {
		epochKey = markerKey(epochKey, uint16(hashslot.Of(key)))
	}
	var s scriptArgs
	s.fill([]entry{{op: opRelease, req: &Request{Key: key, Value: value}, announce: true}}, epochKey, "", "", cluster, new(millis))
	// EVAL, not EVALSHA: the script need not be in the node's cache.
	call := c.B().Eval().Script(batchScript.body).Numkeys(int64(len(s.keys))).Key(s.keys...).Arg(s.args...).Build()
	replies, err := c.Do(ctx, call).ToArray()
	if err != nil {
		return false, err
	}
	n, err := replies[0].AsInt64()
	return n == 1, err
}
