package hashslot

import (
	"testing"
)

func TestOf(t *testing.T) {
	for _, tt := range []struct {
		key  string
		want int
	}{
		{"", 0},
		{"foo", 12182},       // Redis's documentation
		{"123456789", 12739}, // CRC16/XMODEM check value 0x31C3, mod 16384
		{"{user1000}.following", Of("user1000")},
		{"foo{}{bar}", Of("foo{}{bar}")}, // an empty tag: the whole key
		{"foo{{bar}}zap", Of("{bar")},
		{"foo{bar}{zap}", Of("bar")},
	} {
		if got := Of(tt.key); got != tt.want {
			t.Errorf("Of(%q) = %d, want %d", tt.key, got, tt.want)
		}
	}
}

// Every slot has a tag, in the slot, short, and the tags are distinct.
func TestTag(t *testing.T) {
	seen := map[string]bool{}
	for s := range Count {
		tag := Tag(s)
		if tag == "" || len(tag) > 4 || seen[tag] {
			t.Fatalf("Tag(%d) = %q (seen before: %v)", s, tag, seen[tag])
		}
		seen[tag] = true
		if got := Of("prefix:lineage{" + tag + "}"); got != s {
			t.Fatalf("Tag(%d) = %q, in slot %d", s, tag, got)
		}
	}
}
