package redisproc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// NoInstallEnv, set to any non-empty value, stops redisproc from
// installing a missing redis-server or C compiler: it then fails with the
// command to run instead.
const NoInstallEnv = "REDLEASE_NO_INSTALL"

// A tool is a command redisproc runs and the Debian packages that provide
// it.
type tool struct {
	cmd      string
	packages []string
	// stop runs after installing: the redis-server package starts a
	// system instance on port 6379, which nothing here uses.
	stop []string
}

var (
	redisServerTool = tool{cmd: "redis-server", packages: []string{"redis-server"}, stop: []string{"service", "redis-server", "stop"}}
	compilerTool    = tool{cmd: "cc", packages: []string{"gcc", "libc6-dev"}}
)

// installCommand is what a user runs to install t's packages.
func (t tool) installCommand() string {
	return "apt-get update && apt-get install -y " + strings.Join(t.packages, " ")
}

// installer finds the tools redisproc needs and installs a missing one
// from Debian's packages when it can: as root, with apt-get on PATH, and
// without NoInstallEnv. Test packages run as parallel processes, so the
// installation runs under a lock shared by all of them, and whoever gets
// the lock looks again first: another process may have installed it.
type installer struct {
	lookPath func(file string) (string, error)
	getenv   func(key string) string
	root     bool
	// lock takes an exclusive lock on the file at path, waiting for it.
	lock func(path string) (unlock func(), err error)
	// run runs a command with extra environment, returning its output.
	run      func(env []string, name string, args ...string) ([]byte, error)
	log      io.Writer // the one line that says an installation starts
	lockPath string
}

// system is the installer of this process.
var system = installer{
	lookPath: exec.LookPath,
	getenv:   os.Getenv,
	root:     os.Geteuid() == 0,
	lock:     lockFile,
	run: func(env []string, name string, args ...string) ([]byte, error) {
		cmd := exec.Command(name, args...)
		cmd.Env = append(os.Environ(), env...)
		return cmd.CombinedOutput()
	},
	log:      os.Stderr,
	lockPath: filepath.Join(os.TempDir(), "redlease-redisproc-install.lock"),
}

// find returns the path of t's command, installing its packages first
// when the command is missing and installing is possible; otherwise the
// error gives the command to run.
func (in *installer) find(t tool) (string, error) {
	if path, err := in.lookPath(t.cmd); err == nil {
		return path, nil
	}
	if why := in.cannotInstall(); why != "" {
		return "", fmt.Errorf("redisproc: %s is not on PATH (%s); install it as root with: %s", t.cmd, why, t.installCommand())
	}
	unlock, err := in.lock(in.lockPath)
	if err != nil {
		return "", fmt.Errorf("redisproc: %s is not on PATH, and the lock for installing it failed: %w; install it as root with: %s", t.cmd, err, t.installCommand())
	}
	defer unlock()
	if path, err := in.lookPath(t.cmd); err == nil {
		return path, nil // another process installed it while we waited
	}
	fmt.Fprintf(in.log, "redisproc: %s is not on PATH; installing it as root: %s\n", t.cmd, t.installCommand())
	env := []string{"DEBIAN_FRONTEND=noninteractive"}
	steps := [][]string{{"apt-get", "update"}, append([]string{"apt-get", "install", "-y"}, t.packages...)}
	for _, s := range steps {
		if out, err := in.run(env, s[0], s[1:]...); err != nil {
			return "", fmt.Errorf("redisproc: %s failed: %w; output:\n%s", strings.Join(s, " "), err, tail(out))
		}
	}
	if len(t.stop) > 0 {
		_, _ = in.run(nil, t.stop[0], t.stop[1:]...) // no init system, nothing started: fine
	}
	path, err := in.lookPath(t.cmd)
	if err != nil {
		return "", fmt.Errorf("redisproc: installed %s but %s is still not on PATH", strings.Join(t.packages, " "), t.cmd)
	}
	return path, nil
}

// cannotInstall says why find may not install; "" when it may.
func (in *installer) cannotInstall() string {
	switch {
	case in.getenv(NoInstallEnv) != "":
		return NoInstallEnv + " is set"
	case !in.root:
		return "not running as root"
	}
	if _, err := in.lookPath("apt-get"); err != nil {
		return "no apt-get"
	}
	return ""
}

// tail returns the last logTail bytes of out.
func tail(out []byte) []byte {
	out = bytes.TrimSpace(out)
	if len(out) > logTail {
		out = out[len(out)-logTail:]
	}
	return out
}

var errNoLock = errors.New("file locks are not supported on this system")
