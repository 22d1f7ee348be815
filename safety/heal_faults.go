package safety

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redlease/redlease/engine"
	"github.com/redlease/redlease/lease"
)

// FaultHeal: a held, auto-extended lease loses its key on one node (its
// next extension heals it there), then on every node at once, as a clock
// step on every node would expire it (a Lapse); another owner takes and
// releases the resource in the gap. The lease's next extension finds its
// key absent on a quorum and must lose the lease. An extension that set
// an absent key before it knew it held a quorum would make the lease
// again, and it would hold on across the gap beside the other owner: an
// overlap that the lapse does not explain.
const FaultHeal = "heal"

// Lapse is a lapse of every key of one held lease (FaultHeal): Redlock's
// timing broken for that lease, as a clock step on every node would
// break it.
type Lapse struct {
	Resource, Value string    // the lease's
	At              time.Time // when its keys began to go
	Until           time.Time // the lease's validity deadline when they were all gone
}

// explains reports whether the lapse explains o: the lease is o's first
// holding, the second was acquired after the lapse, and the first ended by
// the validity it had then. It may not go on past it: its next extension
// finds none of its keys, and loses it (the holder learns). A lease that
// went on was made again on keys another owner held meanwhile.
func (l Lapse) explains(o Overlap) bool {
	return o.First.Resource == l.Resource && o.First.Value == l.Value && o.Second.Acquired.After(l.At) &&
		!o.First.End.After(l.Until)
}

// heal injects FaultHeal on a resource of its own, with engines of its own
// (leases of five TTLs, time enough for the schedule), node k losing the
// key first.
func (r *run) heal(ctx context.Context, rng *rand.Rand, k int) error {
	ttl := 5 * r.cfg.TTL
	for len(r.healers) < 2 {
		e, err := r.faultEngine(fmt.Sprintf("heal%d", len(r.healers)), r.addrs, ttl, faultPrefix)
		if err != nil {
			return err
		}
		r.healers = append(r.healers, e)
	}
	// Not while they sit a node out: the lease is to hold on every node,
	// and the other owner to win in the gap.
	if err := r.sitOut(ctx, r.healers...); err != nil {
		return err
	}
	resource := fmt.Sprintf("heal-%d", rng.Uint64())
	lapse := func(nodes ...int) error { // the key's lapse on nodes
		var errs []error
		for _, i := range nodes {
			n, err := r.serverOf(ctx, i, faultKey(resource))
			if err == nil {
				_, err = n.Do(ctx, "DEL", faultKey(resource))
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}

	// Under load a round may time out: the owners retry as the workers do,
	// within a TTL.
	actx, cancel := context.WithTimeout(ctx, ttl)
	defer cancel()
	l, err := r.healers[0].Acquire(actx, resource, engine.WithAutoExtend(4*ttl), workerRetry)
	if err != nil {
		return err
	}
	h := r.rec.Held(resource, "heal0/A", l.Value(), time.Now(), l.Until(), l.Token())
	closed := doneOpen(l)
	var lapsed *Lapse
	var gone time.Time // when every key was gone
	defer func() {
		if lapsed != nil {
			// A holder goes on while its lease holds (a lease made again,
			// for a TTL more), and stops when Done closes.
			select {
			case <-l.Done():
			case <-time.After(ttl):
			}
		}
		r.rec.Ended(h, time.Now(), l.Until())
		if lapsed != nil {
			// An extension round in flight while the keys went may have
			// won on the nodes it reached before their DEL: the validity
			// the lease had when they were all gone is that round's. Its
			// start is its validity's, less a TTL and the drift; a round
			// that began later met none of the keys, and must have lost.
			u := l.Until()
			if start := u.Add(-ttl + lease.Drift(ttl, engine.DefaultDriftFactor)); !start.After(gone) && u.After(lapsed.Until) {
				lapsed.Until = u
			}
			r.lapses = append(r.lapses, *lapsed)
		}
		_ = l.Release(context.Background())
		r.checkDone(h, l, closed)
	}()
	extensions := 1
	if len(r.cluster.Nodes) > 1 { // on one node, that loss is the lapse
		if err := lapse(k); err != nil {
			return err
		}
		extensions = 2 // the first heals node k
	}
	// The gap begins just after an extension: the next is a third of a
	// TTL away.
	for range extensions {
		if kind := nextExtension(l, ttl); kind != engine.Extended {
			return fmt.Errorf("the lease's extension: %v (%v)", kind, l.Err())
		}
	}
	if extensions == 2 {
		// The first extension healed node k (the heal goes right after
		// the round that won): a fault whose heal did not happen is not
		// this one.
		n, err := r.serverOf(ctx, k, faultKey(resource))
		if err != nil {
			return err
		}
		if v, _, err := n.Get(ctx, faultKey(resource)); err != nil || v != l.Value() {
			return fmt.Errorf("node %d not healed after two extensions: it holds %q (%v)", k+1, v, err)
		}
	}
	lapsed = &Lapse{Resource: resource, Value: l.Value(), At: time.Now(), Until: l.Until()}
	all := make([]int, len(r.addrs))
	for i := range all {
		all[i] = i
	}
	if err := lapse(all...); err != nil {
		return err
	}
	gone = time.Now()
	// Before the lease's next extension: a third of a TTL from the last.
	bctx, cancel := context.WithTimeout(ctx, ttl/engine.AutoExtendDivisor/2)
	defer cancel()
	b, err := r.healers[1].Acquire(bctx, resource, workerRetry)
	if err != nil {
		return fmt.Errorf("another owner in the gap: %w", err)
	}
	hb := r.rec.Held(resource, "heal1/B", b.Value(), time.Now(), b.Until(), b.Token())
	r.rec.Ended(hb, time.Now(), b.Until())
	if err := b.Release(ctx); err != nil {
		return err
	}
	nextExtension(l, ttl) // lost, unless it was made again
	return nil
}

// nextExtension waits up to limit for l's next extension (a failed round
// is tried again), and returns Extended, or how the lease ended (0:
// neither came).
func nextExtension(l *engine.Lease, limit time.Duration) engine.EventKind {
	timeout := time.After(limit)
	for {
		select {
		case ev, ok := <-l.Events():
			switch {
			case !ok:
				return 0 // the lease ended, and its end was read before
			case ev.Kind == engine.Extended, ev.Kind.Terminal():
				return ev.Kind
			}
		case <-timeout:
			return 0
		}
	}
}
