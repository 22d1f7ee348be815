package safety

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// logLine is one line an engine of the run logged (of a node: down, up,
// quarantined; or of a lease), kept to read overlaps by.
type logLine struct {
	At       time.Time
	Engine   string
	Resource string // the lease's, "" for a node's line
	Text     string
}

// engineLog keeps the last lines the run's engines logged.
type engineLog struct {
	mu    sync.Mutex
	lines []logLine
	nodes map[string]string // address an engine dials -> "node k"
}

// keepLines bounds the log: the overlap report looks back a second or two.
const keepLines = 20000

func newEngineLog(addrs []string) *engineLog {
	l := &engineLog{nodes: map[string]string{}}
	for i, a := range addrs {
		l.nodes[a] = fmt.Sprintf("node %d", i)
	}
	return l
}

// logger is the Logger for the engine named name.
func (l *engineLog) logger(name string) *slog.Logger {
	return slog.New(&logHandler{log: l, engine: name})
}

func (l *engineLog) add(line logLine) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == keepLines {
		l.lines = append(l.lines[:0], l.lines[keepLines/2:]...)
	}
	l.lines = append(l.lines, line)
}

// between returns the lines of the engines named from from to to: those
// of their nodes, and those of their leases on resource.
func (l *engineLog) between(from, to time.Time, resource string, engines ...string) []logLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []logLine
	for _, line := range l.lines {
		if !line.At.Before(from) && !line.At.After(to) && slices.Contains(engines, line.Engine) &&
			(line.Resource == "" || line.Resource == resource) {
			out = append(out, line)
		}
	}
	return out
}

// logHandler records redlease's own lines (not protoactor's) at Info and
// above, with node addresses named by their index.
type logHandler struct {
	log    *engineLog
	engine string
}

func (h *logHandler) Enabled(_ context.Context, level slog.Level) bool {
	return level >= slog.LevelInfo
}

func (h *logHandler) Handle(_ context.Context, r slog.Record) error {
	if !strings.HasPrefix(r.Message, "redlease:") {
		return nil
	}
	var b strings.Builder
	b.WriteString(strings.TrimPrefix(r.Message, "redlease: "))
	line := logLine{At: r.Time, Engine: h.engine}
	r.Attrs(func(a slog.Attr) bool {
		v := a.Value.String()
		if a.Key == "resource" {
			line.Resource = v
		}
		if n, ok := h.log.nodes[v]; ok {
			v = n
		}
		if t, ok := a.Value.Any().(time.Time); ok {
			v = "+" + t.Sub(r.Time).Round(time.Millisecond).String() + " from now"
		}
		fmt.Fprintf(&b, " %s=%s", a.Key, v)
		return true
	})
	line.Text = b.String()
	h.log.add(line)
	return nil
}

func (h *logHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logHandler) WithGroup(string) slog.Handler      { return h }

// engineOf is the engine of a holder name: "e1" of "e1/w3", "idle2" of
// "idle2@3.1s".
func engineOf(holder string) string {
	if i := strings.IndexAny(holder, "/@"); i >= 0 {
		return holder[:i]
	}
	return holder
}
