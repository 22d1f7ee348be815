package engine

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// Without a Logger the engine (protoactor included) writes nothing; with
// one, its lines and protoactor's go there.
func TestSilentUnlessLogger(t *testing.T) {
	c := startNodes(t, 3)
	restore := captureStderr(t)
	e, err := New(Config{Nodes: c.Addrs()})
	if err != nil {
		restore()
		t.Fatal(err)
	}
	l, err := e.Acquire(t.Context(), "quiet", WithTTL(200*time.Millisecond))
	if err == nil {
		<-l.Done()
	}
	_ = e.Close()
	if out := restore(); err != nil || out != "" {
		t.Fatalf("Acquire err %v; stderr without a Logger: %q", err, out)
	}

	var buf syncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e, err = New(Config{Nodes: c.Addrs(), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	l, err = e.Acquire(t.Context(), "loud")
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(t.Context())
	_ = e.Close()
	out := buf.String()
	for _, want := range []string{"redlease: acquired", "redlease: vote", "component=protoactor"} {
		if !strings.Contains(out, want) {
			t.Fatalf("log lacks %q:\n%s", want, out)
		}
	}
}

// captureStderr points os.Stderr at a pipe; restore puts it back and
// returns what was written.
func captureStderr(t *testing.T) func() string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stderr
	os.Stderr = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	var once sync.Once
	var out string
	return func() string {
		once.Do(func() {
			os.Stderr = old
			w.Close()
			out = <-done
		})
		return out
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
