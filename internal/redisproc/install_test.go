package redisproc

import (
	"bytes"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeSystem is an installer over a fake PATH: lookPath finds the commands
// in have; run records each command and "installs" what install lists.
type fakeSystem struct {
	have    map[string]bool
	install map[string][]string // package -> commands it brings
	ran     []string
	locked  int
	// onLock runs when the lock is taken (another process's install).
	onLock func()
}

func (f *fakeSystem) installer(root bool, env map[string]string, log *bytes.Buffer) *installer {
	return &installer{
		lookPath: func(file string) (string, error) {
			if f.have[file] {
				return "/usr/bin/" + file, nil
			}
			return "", fs.ErrNotExist
		},
		getenv: func(k string) string { return env[k] },
		root:   root,
		lock: func(string) (func(), error) {
			f.locked++
			if f.onLock != nil {
				f.onLock()
			}
			return func() {}, nil
		},
		run: func(env []string, name string, args ...string) ([]byte, error) {
			line := strings.Join(append([]string{name}, args...), " ")
			if name == "apt-get" && !slices.Contains(env, "DEBIAN_FRONTEND=noninteractive") {
				line += " (interactive!)"
			}
			f.ran = append(f.ran, line)
			if name == "apt-get" && len(args) > 0 && args[0] == "install" {
				for _, p := range args[2:] {
					for _, c := range f.install[p] {
						f.have[c] = true
					}
				}
			}
			return nil, nil
		},
		log:      log,
		lockPath: "/nonexistent/lock",
	}
}

func TestFind(t *testing.T) {
	const redisCmd = "apt-get update && apt-get install -y redis-server"
	installRedis := []string{"apt-get update", "apt-get install -y redis-server", "service redis-server stop"}
	tests := []struct {
		name    string
		tool    tool
		have    []string // on PATH at the start
		root    bool
		env     map[string]string
		byOther bool // another process installs it while we wait for the lock
		wantErr string
		wantRan []string
		wantLog bool
	}{
		{name: "present", tool: redisServerTool, have: []string{"redis-server"}},
		{name: "disabled", tool: redisServerTool, have: []string{"apt-get"}, root: true,
			env: map[string]string{NoInstallEnv: "1"}, wantErr: "REDLEASE_NO_INSTALL is set); install it as root with: " + redisCmd},
		{name: "not root", tool: redisServerTool, have: []string{"apt-get"},
			wantErr: "not running as root); install it as root with: " + redisCmd},
		{name: "no apt-get", tool: redisServerTool, root: true,
			wantErr: "(no apt-get); install it as root with: " + redisCmd},
		{name: "installs", tool: redisServerTool, have: []string{"apt-get"}, root: true,
			wantRan: installRedis, wantLog: true},
		{name: "installed by another process meanwhile", tool: redisServerTool, have: []string{"apt-get"}, root: true,
			byOther: true},
		{name: "compiler", tool: compilerTool, have: []string{"apt-get"}, root: true,
			wantRan: []string{"apt-get update", "apt-get install -y gcc libc6-dev"}, wantLog: true},
		{name: "compiler disabled", tool: compilerTool, have: []string{"apt-get"}, root: true,
			env:     map[string]string{NoInstallEnv: "1"},
			wantErr: "redisproc: cc is not on PATH (REDLEASE_NO_INSTALL is set); install it as root with: apt-get update && apt-get install -y gcc libc6-dev"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeSystem{have: map[string]bool{}, install: map[string][]string{"redis-server": {"redis-server"}, "gcc": {"cc"}}}
			for _, c := range tt.have {
				f.have[c] = true
			}
			if tt.byOther {
				f.onLock = func() { f.have[tt.tool.cmd] = true }
			}
			var log bytes.Buffer
			path, err := f.installer(tt.root, tt.env, &log).find(tt.tool)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				if f.locked != 0 || len(f.ran) != 0 {
					t.Fatalf("locked %d times, ran %q: want neither", f.locked, f.ran)
				}
				return
			}
			if err != nil || path != "/usr/bin/"+tt.tool.cmd {
				t.Fatalf("find = %q, %v", path, err)
			}
			if !slices.Equal(f.ran, tt.wantRan) {
				t.Fatalf("ran %q, want %q", f.ran, tt.wantRan)
			}
			if lines := strings.Count(log.String(), "\n"); (lines == 1) != tt.wantLog || lines > 1 {
				t.Fatalf("printed %q: want one line only when installing", log.String())
			}
		})
	}
}

// lockFile excludes a second holder until the first unlocks.
func TestLockFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	unlock, err := lockFile(path)
	if err != nil {
		t.Fatalf("lockFile: %v (parallel test packages install under this lock)", err)
	}
	// quiet: long enough for a second lockFile that did not wait to return.
	const quiet = 50 * time.Millisecond
	got := make(chan func(), 1)
	go func() {
		u, err := lockFile(path)
		if err != nil {
			t.Error(err)
			u = func() {}
		}
		got <- u
	}()
	select {
	case u := <-got:
		u()
		t.Fatal("a second lockFile got the lock while the first held it")
	case <-time.After(quiet):
	}
	unlock()
	(<-got)()
}
