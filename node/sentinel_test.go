package node

import (
	"slices"
	"testing"
)

// The former master counts as still a master while any sentinel saw it
// answer so, or while no sentinel that lists it has read it since the
// switch; not once one has read it as a replica, nor when flagged down
// (ask maps that to seenReplica).
func TestStillMasters(t *testing.T) {
	const m, old, r = "m:1", "old:2", "r:3"
	for _, tt := range []struct {
		name string
		seen []map[string]seenAs
		want []string
	}{
		{"all replicas", []map[string]seenAs{{old: seenReplica, r: seenReplica}, {old: seenReplica}}, nil},
		{"one saw it a master", []map[string]seenAs{{old: seenReplica}, {old: seenMaster}}, []string{old}},
		{"unread by every sentinel listing it", []map[string]seenAs{{old: seenUnread}, {r: seenReplica}, {old: seenUnread}}, []string{old}},
		{"read as a replica by one", []map[string]seenAs{{old: seenUnread}, {old: seenReplica}}, nil},
		{"the master itself never counts", []map[string]seenAs{{m: seenMaster, old: seenUnread}}, []string{old}},
		{"sorted", []map[string]seenAs{{r: seenMaster, old: seenMaster}}, []string{old, r}},
		{"no answer", nil, nil},
	} {
		if got := stillMasters(m, tt.seen); !slices.Equal(got, tt.want) {
			t.Errorf("%s: stillMasters = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestDownFlags(t *testing.T) {
	for flags, want := range map[string]bool{
		"slave": false, "master": false, "slave,s_down": true, "master,o_down,s_down": true,
		"slave,disconnected": false, "slave,master_down": false, "slave,s_down,disconnected": true,
	} {
		if got := downFlags(flags); got != want {
			t.Errorf("downFlags(%q) = %v, want %v", flags, got, want)
		}
	}
}
