package node

import "strings"

// Announcement is a release announcement, as the batch script publishes
// it on the lock key's channel (Key+ReleasedSuffix): the Digests of the
// owner whose key it deleted (Holder), of the next waiter in the queue
// (Next, who leaves it and goes at once) and of the one after it (Standby,
// who stands in for Next should it not come). A waiter not in the queue
// is "". An owner that left the queue while the key was free names the
// next waiter in its stead, with no Holder. Granted: the release also set
// the key to Next's value (see Config.Channel), so Next holds it without
// a round of its own.
type Announcement struct {
	Holder, Next, Standby string
	Granted               bool
}

// ParseAnnouncement reads msg as the batch script publishes it:
// "<holder> <next> <standby>", then GrantedSuffix if it granted. A field
// that msg lacks is "".
func ParseAnnouncement(msg string) Announcement {
	msg, granted := strings.CutSuffix(msg, GrantedSuffix)
	holder, rest, _ := strings.Cut(msg, " ")
	next, standby, _ := strings.Cut(rest, " ")
	return Announcement{Holder: holder, Next: next, Standby: standby, Granted: granted}
}

// String is a as the batch script publishes it.
func (a Announcement) String() string {
	s := a.Holder + " " + a.Next + " " + a.Standby
	if a.Granted {
		s += GrantedSuffix
	}
	return s
}

// isReleaseChannel reports whether channel is a lock key's release
// channel (ReleasedSuffix), which a Redis Cluster's master announces on
// with SPUBLISH and watchers hear with SSUBSCRIBE.
func isReleaseChannel(channel string) bool { return strings.HasSuffix(channel, ReleasedSuffix) }
