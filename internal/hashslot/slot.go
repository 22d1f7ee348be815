// Package hashslot computes Redis Cluster hash slots, and names a hash tag for
// each slot.
//
// A Redis Cluster script call may declare keys of one slot only. A value
// that must sit beside the keys of any slot (a per-slot marker, say) needs
// a key name in every slot: Tag gives, for each slot, a short hash tag
// whose slot it is.
package hashslot

import (
	"strconv"
	"strings"
	"sync"
)

// Count is the number of hash slots of a Redis Cluster.
const Count = 16384

// Of returns the hash slot of key, as Redis Cluster computes it: the CRC16
// (XMODEM) of the key modulo Count, where a key holding a non-empty hash
// tag, the text between its first '{' and the first '}' after it, hashes
// only the tag ("{user1}.a" and "{user1}.b" share a slot).
func Of(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key)) & (Count - 1)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the CRC
// of Redis's crc16.c, a byte at a time from crcTable: every command to a
// cluster hashes its key twice (the router, the shard), and the bit-wise
// loop cost 4% of a client's CPU.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^s[i]]
	}
	return crc
}

// crcTable is the CRC of each byte, the top byte of the running CRC
// xored with the next byte of the input.
var crcTable = func() (t [256]uint16) {
	for b := range t {
		crc := uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[b] = crc
	}
	return t
}()

// Tag returns a hash tag of slot s: "{" + Tag(s) + "}" in a key puts the
// key in slot s. Tags are the base-36 numbers 0, 1, 2, ... in order, the
// first of each slot taken: at most 4 characters. The first call makes the
// table (some 10ms of CPU).
func Tag(s int) string {
	tagsOnce.Do(makeTags)
	return tags[s]
}

var (
	tagsOnce sync.Once
	tags     []string
)

func makeTags() {
	tags = make([]string, Count)
	for n, left := int64(0), Count; left > 0; n++ {
		t := strconv.FormatInt(n, 36)
		if s := Of(t); tags[s] == "" {
			tags[s] = t
			left--
		}
	}
}
