// Package redisinfo reads the text that Redis' INFO command answers: the
// one parser of it that the engine, the test nodes and the benchmark
// share.
package redisinfo

import "strings"

// Field returns the value of field name ("run_id", "used_cpu_sys", ...)
// in info, and whether it is there.
func Field(info, name string) (string, bool) {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v, true
		}
	}
	return "", false
}
