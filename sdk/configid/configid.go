// Package configid is the grammar of config IDs and generations that the
// server enforces and that every client checks again before a name from
// the network becomes a path (a cache file, an agent's output file): 1 to
// 128 of a-z, 0-9, '.', '_' and '-', starting with a letter or a digit, so
// an ID is one path element that is never "." or "..", never hidden and
// never holds a separator. It imports the standard library alone.
package configid

import (
	"errors"
	"fmt"
	"regexp"
)

// Pattern is the regular expression every config ID matches; the server's
// release package uses the same one.
const Pattern = `^[a-z0-9][a-z0-9._-]{0,127}$`

// MaxLen is the longest config ID, in bytes.
const MaxLen = 128

var pattern = regexp.MustCompile(Pattern)

// ErrInvalid is wrapped by every error of Check and CheckGeneration.
var ErrInvalid = errors.New("configid: invalid")

// Valid reports whether id is a well-formed config ID.
func Valid(id string) bool { return pattern.MatchString(id) }

// Check returns nil for a well-formed config ID and an error wrapping
// ErrInvalid, which quotes it, otherwise.
func Check(id string) error {
	if !Valid(id) {
		return fmt.Errorf("%w: config ID %q must be 1-%d of a-z 0-9 . _ - and start with a letter or digit", ErrInvalid, id, MaxLen)
	}
	return nil
}

// CheckGeneration returns nil for a generation a release can have (1 and
// up) and an error wrapping ErrInvalid otherwise.
func CheckGeneration(gen int64) error {
	if gen <= 0 {
		return fmt.Errorf("%w: generation %d must be positive", ErrInvalid, gen)
	}
	return nil
}
