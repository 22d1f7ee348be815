package engine

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/redlease/redlease/node"
)

// MetaSep ends the random part of an owner value that carries a meta
// (WithMeta): <random part>|<meta>. The random part, URL-safe base64,
// never holds it.
const MetaSep = node.MetaSep

// MaxMetaLen bounds WithMeta's meta, in bytes: every command of the lease
// to every node carries it.
const MaxMetaLen = 256

// WithMeta stores meta, a short text saying who holds the lease (a host
// and pid, a leader's address), with the lease on the nodes, so that
// operators and followers see who holds a resource without a side
// channel: `redlease locks` shows it (InspectLocks and MetaOf read it),
// Lease.Check returns it, and an Acquire or TryAcquire that this lease
// keeps out names it in its error ("held by", AcquireError.HeldBy).
//
// It is kept in the lease's owner value (Lease.Value: its random part,
// MetaSep, then meta), so it costs no key of its own, but every
// command of the lease carries it: keep it short. It must be valid UTF-8
// without control characters, at most MaxMetaLen bytes; "" means none. It
// is no secret: whoever reads the nodes, or is refused by the lease,
// reads it (the random part stays secret: refusals and announcements
// name values by their SHA1). For Acquire and TryAcquire; Resume takes
// the meta that its value carries.
//
//	lease, err := e.Acquire(ctx, "leader", engine.WithMeta("10.0.0.7:8080"))
//	var ae *engine.AcquireError
//	if errors.As(err, &ae) { follow(ae.HeldBy) } // the leader's "10.0.0.7:8080"
func WithMeta(meta string) Option {
	return Option{set: setMeta, meta: meta}
}

// MetaOf is the meta (WithMeta) that an owner value (Lease.Value,
// LockKey.Value) carries; "" for none.
func MetaOf(value string) string { return node.MetaOf(value) }

// checkMeta refuses a meta that WithMeta does not take.
func checkMeta(meta string) error {
	switch {
	case len(meta) > MaxMetaLen:
		return fmt.Errorf("redlease: WithMeta is %d bytes long, at most %d", len(meta), MaxMetaLen)
	case !utf8.ValidString(meta):
		return fmt.Errorf("redlease: WithMeta must be valid UTF-8, got %q", meta)
	}
	for i, r := range meta {
		if unicode.IsControl(r) {
			return fmt.Errorf("redlease: WithMeta must hold no control character, got %U at byte %d of %q", r, i, meta)
		}
	}
	return nil
}

// ownerValue is a new lease's owner value: its random part (newValue),
// then MetaSep and meta unless meta is "". The random part, URL-safe
// base64, never holds the separator, so MetaOf finds the meta whatever it
// holds.
func ownerValue(meta string) string {
	if meta == "" {
		return newValue()
	}
	return newValue() + MetaSep + meta
}

// maxValueLen bounds the value Resume takes: a random part and the
// longest meta.
const maxValueLen = 27 + len(MetaSep) + MaxMetaLen

var (
	// errMetaAtResume: WithMeta given to Resume, whose meta is in its value.
	errMetaAtResume = errors.New("redlease: WithMeta is for Acquire and TryAcquire: a resumed lease's meta is the one its value carries")
)
