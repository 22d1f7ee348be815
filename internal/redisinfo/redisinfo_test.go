package redisinfo

import "testing"

func TestField(t *testing.T) {
	info := "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\nuptime_in_seconds:42\r\n\r\n# CPU\r\nused_cpu_sys:1.5\r\n"
	for _, tt := range []struct {
		name, want string
		ok         bool
	}{
		{"run_id", "abc123", true},
		{"uptime_in_seconds", "42", true},
		{"used_cpu_sys", "1.5", true},
		{"used_cpu", "", false}, // a prefix of a field is not the field
		{"missing", "", false},
	} {
		if got, ok := Field(info, tt.name); got != tt.want || ok != tt.ok {
			t.Errorf("Field(%q) = %q, %v; want %q, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}
