package redisinfo

import (
	"slices"
	"testing"
)

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

func TestReplicas(t *testing.T) {
	info := "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n" +
		"slave0:ip=127.0.0.1,port=7001,state=online,offset=1442478,lag=0\r\n" +
		"slave1:ip=::1,port=7002,state=wait_bgsave,offset=0,lag=1\r\nmaster_replid:abc\r\nmaster_repl_offset:1442500\r\n"
	want := []Replica{{"127.0.0.1:7001", "online", 22}, {"[::1]:7002", "wait_bgsave", 1442500}}
	if got := Replicas(info); !slices.Equal(got, want) {
		t.Errorf("Replicas = %v, want %v", got, want)
	}
	if got := Replicas("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n"); got != nil {
		t.Errorf("no replicas: %v", got)
	}
}
