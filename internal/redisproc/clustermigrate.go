package redisproc

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redlease/redlease/internal/hashslot"
)

// SlotMigration is a slot on its way from one master to another, as
// StartSlotMigration leaves it: the destination imports it (CLUSTER
// SETSLOT IMPORTING), the source migrates it (MIGRATING), and the keys
// moved so far are on the destination, the others still on the source.
// Meanwhile the source still serves the slot: it answers a command on a
// key it does not have (moved, or new: a SET of a new key too) with ASK
// (the client then sends ASKING and the command to the destination), and
// a command on several keys of which it has only some with TRYAGAIN; the
// destination answers MOVED to the source, unless the command follows
// ASKING. The slot's master is still the source (MasterOf). Finish ends
// it.
//
// The two states live on the two masters alone, as in production: a
// replica promoted in between has neither, and Finish, which works on
// From and To as they were, then fails.
type SlotMigration struct {
	// Slot is the slot being moved.
	Slot int
	// From is the source, the slot's master when the migration started;
	// To the destination.
	From, To *Node

	c            *RedisCluster
	fromID, toID string
	port         string // To's port, for MIGRATE
}

// StartSlotMigration starts moving slot from the master that serves it
// to master to, and moves keys (which must be in the slot) with MIGRATE:
// it leaves the slot half moved, as SlotMigration tells. Keys that do not
// exist (or expired) are skipped. On error it puts both masters' slot
// back to stable when it can.
func (c *RedisCluster) StartSlotMigration(ctx context.Context, slot int, to *Node, keys ...string) (*SlotMigration, error) {
	from, err := c.MasterOf(ctx, slot)
	if err != nil {
		return nil, err
	}
	ti := c.index(to)
	switch {
	case ti < 0:
		return nil, fmt.Errorf("redisproc: %s is not a server of the Redis Cluster", to.Addr())
	case to == from:
		return nil, fmt.Errorf("redisproc: %s serves slot %d already", to.Addr(), slot)
	}
	if err := inSlot(slot, keys); err != nil {
		return nil, err
	}
	m := &SlotMigration{Slot: slot, From: from, To: to, c: c,
		fromID: c.members[c.index(from)].id, toID: c.members[ti].id, port: strconv.Itoa(to.port)}
	s := strconv.Itoa(slot)
	// The destination first: once the source migrates, it sends clients
	// there with ASK, which only an importing node accepts.
	if _, err := to.Do(ctx, "CLUSTER", "SETSLOT", s, "IMPORTING", m.fromID); err != nil {
		return nil, fmt.Errorf("redisproc: %s: CLUSTER SETSLOT %d IMPORTING: %w", to.Addr(), slot, err)
	}
	if _, err := from.Do(ctx, "CLUSTER", "SETSLOT", s, "MIGRATING", m.toID); err != nil {
		m.stable(ctx)
		return nil, fmt.Errorf("redisproc: %s: CLUSTER SETSLOT %d MIGRATING: %w", from.Addr(), slot, err)
	}
	if err := m.Move(ctx, keys...); err != nil {
		m.stable(ctx)
		return nil, err
	}
	return m, nil
}

// stable puts the slot back to stable on both masters, as far as it can.
// Keys already moved stay on the destination, out of reach until the
// slot is moved there.
func (m *SlotMigration) stable(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	for _, n := range []*Node{m.From, m.To} {
		qctx, cancel := context.WithTimeout(ctx, queryTimeout)
		n.Do(qctx, "CLUSTER", "SETSLOT", strconv.Itoa(m.Slot), "STABLE")
		cancel()
	}
}

// Move moves keys, which must be in the slot, from the source to the
// destination with MIGRATE, which keeps their values and times to live
// (the destination gets the time left when it was sent). Keys the source
// does not have are skipped.
func (m *SlotMigration) Move(ctx context.Context, keys ...string) error {
	if err := inSlot(m.Slot, keys); err != nil {
		return err
	}
	for len(keys) > 0 {
		batch := keys[:min(len(keys), migrateBatch)]
		keys = keys[len(batch):]
		args := append([]string{"MIGRATE", "127.0.0.1", m.port, "", "0",
			strconv.FormatInt(migrateTimeout.Milliseconds(), 10), "KEYS"}, batch...)
		if _, err := m.From.Do(ctx, args...); err != nil {
			return fmt.Errorf("redisproc: %s: MIGRATE of slot %d to %s: %w", m.From.Addr(), m.Slot, m.To.Addr(), err)
		}
	}
	return nil
}

// Finish moves the keys left in the slot and gives the slot to the
// destination: CLUSTER SETSLOT NODE on the destination (which takes a new
// config epoch for it and tells every node), then on the source, then on
// the other masters that answer (that last step only speeds up what the
// cluster bus spreads anyway). It returns once the cluster has settled
// (see Failover) with every running server naming the destination the
// slot's master and neither the source nor the destination migrating or
// importing it.
func (m *SlotMigration) Finish(ctx context.Context) error {
	s := strconv.Itoa(m.Slot)
	for {
		v, err := m.From.Do(ctx, "CLUSTER", "GETKEYSINSLOT", s, strconv.Itoa(migrateBatch))
		if err != nil {
			return fmt.Errorf("redisproc: %s: CLUSTER GETKEYSINSLOT %d: %w", m.From.Addr(), m.Slot, err)
		}
		list, _ := v.([]any)
		if len(list) == 0 {
			break
		}
		keys := make([]string, len(list))
		for i, k := range list {
			keys[i] = fmt.Sprint(k)
		}
		if err := m.Move(ctx, keys...); err != nil {
			return err
		}
	}
	for _, n := range []*Node{m.To, m.From} {
		if _, err := n.Do(ctx, "CLUSTER", "SETSLOT", s, "NODE", m.toID); err != nil {
			return fmt.Errorf("redisproc: %s: CLUSTER SETSLOT %d NODE: %w", n.Addr(), m.Slot, err)
		}
	}
	claims, err := m.c.claims(ctx)
	if err != nil {
		return err
	}
	for _, cl := range claims {
		if cl.node != m.To && cl.node != m.From && !cl.self.replica {
			qctx, cancel := context.WithTimeout(ctx, queryTimeout)
			cl.node.Do(qctx, "CLUSTER", "SETSLOT", s, "NODE", m.toID) // optional: see above
			cancel()
		}
	}
	err = m.c.waitSettled(ctx, func(st *clusterState) error {
		if e := st.agreed[m.toID]; e.replica || !e.owns(m.Slot) {
			return fmt.Errorf("%s is %s; want master of slot %d", m.To.Addr(), e, m.Slot)
		}
		for n, v := range st.views {
			for _, mv := range v.entries[v.self].moving {
				if strings.HasPrefix(mv, "["+s+"-") {
					return fmt.Errorf("%s still moves slot %d: %s", n.Addr(), m.Slot, mv)
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisproc: migration of slot %d from %s to %s did not settle: %w", m.Slot, m.From.Addr(), m.To.Addr(), err)
	}
	return nil
}

// MigrateSlot moves slot, with its keys, from the master that serves it to
// master to: StartSlotMigration, then Finish. Keys keep their times to
// live. When Finish fails, both masters' slot is put back to stable.
func (c *RedisCluster) MigrateSlot(ctx context.Context, slot int, to *Node) error {
	m, err := c.StartSlotMigration(ctx, slot, to)
	if err != nil {
		return err
	}
	if err := m.Finish(ctx); err != nil {
		m.stable(ctx) // not left half moved for the next migration to trip on
		return err
	}
	return nil
}

// inSlot fails unless every key is in slot want.
func inSlot(want int, keys []string) error {
	for _, k := range keys {
		if s := hashslot.Of(k); s != want {
			return fmt.Errorf("redisproc: key %q is in slot %d, not %d", k, s, want)
		}
	}
	return nil
}
