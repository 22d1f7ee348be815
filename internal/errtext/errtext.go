// Package errtext keeps redlease's error texts to one "redlease: " prefix.
//
// Every error redlease makes starts with Prefix when it stands alone, so a
// log line says where it came from. When one error wraps another, only the
// outermost text keeps the prefix: Errorf shows each error argument with
// its prefix trimmed, while the chain (errors.Is, errors.As) still reaches
// the argument itself.
package errtext

import (
	"fmt"
	"slices"
	"strings"
)

// Prefix starts the text of every error redlease makes.
const Prefix = "redlease: "

// Bare returns err's text without Prefix at the start of any of its lines
// (errors.Join puts one error a line); "" for nil.
func Bare(err error) string {
	if err == nil {
		return ""
	}
	return strings.ReplaceAll("\n"+err.Error(), "\n"+Prefix, "\n")[1:]
}

// Errorf is fmt.Errorf, except that each error among args shows its Bare
// text. %w still wraps the argument, so errors.Is and errors.As match it
// and everything it wraps. Write Prefix at the start of format for an
// outermost error, and not for one that will be wrapped again.
func Errorf(format string, args ...any) error {
	args = slices.Clone(args) // the caller's slice stays as it was
	for i, a := range args {
		if err, ok := a.(error); ok {
			args[i] = bare{err}
		}
	}
	return fmt.Errorf(format, args...)
}

// bare shows its error's text without Prefix and unwraps to it.
type bare struct{ err error }

func (b bare) Error() string { return Bare(b.err) }
func (b bare) Unwrap() error { return b.err }
