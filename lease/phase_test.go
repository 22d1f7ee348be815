package lease

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// The diagram in the package doc is the edge table, rendered: change one,
// and this fails until the other says the same.
func TestDiagramIsTheEdgeTable(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	in := false
	for _, line := range strings.Split(string(src), "\n") {
		switch {
		case strings.HasPrefix(line, "//\t"):
			in = true
			got.WriteString(strings.TrimPrefix(line, "//\t") + "\n")
		case in:
			in = line != "//"
			if !in {
				break
			}
		}
		if got.Len() > 0 && !in {
			break
		}
	}
	if want := diagram(); got.String() != want {
		t.Fatalf("doc.go's diagram is not the edge table; it should read:\n%s", indent(want))
	}
}

func indent(s string) string {
	return "//\t" + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n//\t") + "\n"
}

// Every phase but idle can be left, and every phase but idle reached;
// the table names each move once.
func TestEdgeTableIsWhole(t *testing.T) {
	for p := range phases {
		in, out := false, false
		for q := range phases {
			in = in || allowed[q][p]
			out = out || allowed[p][q]
		}
		if !in || !out {
			t.Errorf("phase %v: reached %t, left %t", p, in, out)
		}
	}
	seen := map[[2]phase]bool{}
	for _, e := range edges {
		for _, f := range e.from {
			if seen[[2]phase{f, e.to}] {
				t.Errorf("%v -> %v named twice", f, e.to)
			}
			seen[[2]phase{f, e.to}] = true
		}
	}
}

// A move the table lacks panics (and so ends the lease as a crash does).
func TestUndeclaredMovePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("held -> acquiring did not panic")
		}
	}()
	a := &leaseActor{}
	a.body = &body{}
	a.phase = held
	a.to(acquiring)
}

// An event that is not Woken prints its Wake as "none", not WakeCause(0)
// (issue 45: %+v of an Acquired event showed Wake:WakeCause(0)).
func TestWakeCauseZeroIsNone(t *testing.T) {
	if got := fmt.Sprintf("%+v", Event{Kind: Acquired}); !strings.Contains(got, "Wake:none") {
		t.Fatalf("an Acquired event prints %s", got)
	}
	if got := WakeRelease.String(); got != "release" {
		t.Fatalf("WakeRelease prints %q", got)
	}
}
