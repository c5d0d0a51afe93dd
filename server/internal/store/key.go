package store

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/pawlcfg/pawl/sdk/textsafe"
)

// SystemPrefix holds Pawl's own records (releases, pointers, receipts,
// instances). Clients cannot write under it through the KV API.
const SystemPrefix = "/_pawl/"

// MaxKeyBytes is the longest key accepted, in bytes. Keys are paths, not
// payloads; 1 KiB keeps index entries small.
const MaxKeyBytes = 1024

// ErrInvalidKey is matched by every error ValidateKey returns.
var ErrInvalidKey = errors.New("store: invalid key")

// InvalidKeyError says why a key or prefix was refused. It matches
// ErrInvalidKey.
type InvalidKeyError struct {
	// Field is "key" or "prefix".
	Field string
	// Reason says which rule failed, for the client.
	Reason string
}

func (e *InvalidKeyError) Error() string { return "store: invalid " + e.Field + ": " + e.Reason }

// Is reports whether target is ErrInvalidKey.
func (e *InvalidKeyError) Is(target error) bool { return target == ErrInvalidKey }

// ValidateKey checks that key is a non-empty UTF-8 path that starts with
// "/", is at most MaxKeyBytes long and holds no character that breaks how
// keys are shown (see textsafe.Breaking): a key is printed one per line by
// `pawl ls`, in logs and in audit records, so a newline, a tab, an escape
// sequence or a bidirectional override in it would forge or hide lines.
// The error says which rule failed, naming the character and its byte
// position, and matches ErrInvalidKey.
func ValidateKey(key string) error {
	if reason := keyProblem(key); reason != "" {
		return &InvalidKeyError{Field: "key", Reason: reason}
	}
	return nil
}

func keyProblem(key string) string {
	switch {
	case key == "":
		return "the key is empty; keys are paths such as /payments/limits.json"
	case len(key) > MaxKeyBytes:
		return fmt.Sprintf("the key is %d bytes; the limit is %d", len(key), MaxKeyBytes)
	case key[0] != '/':
		return fmt.Sprintf("key %q does not start with \"/\"", key)
	case !utf8.ValidString(key):
		return "the key is not valid UTF-8"
	}
	for i, r := range key {
		if name := textsafe.Breaking(r); name != "" {
			return fmt.Sprintf("key %q holds %U (%s) at byte %d; keys may not hold control characters, "+
				"line or paragraph separators, or format characters (Unicode Cf: bidirectional, zero width, tag...)", key, r, name, i)
		}
	}
	return ""
}

// ValidatePrefix checks a watch or list prefix: empty (everything), or a
// string that passes ValidateKey.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if reason := keyProblem(prefix); reason != "" {
		return &InvalidKeyError{Field: "prefix", Reason: strings.Replace(reason, "key", "prefix", 1)}
	}
	return nil
}
