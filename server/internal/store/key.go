package store

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxKeyBytes is the longest key accepted, in bytes. Keys are paths, not
// payloads; 1 KiB keeps index entries small.
const MaxKeyBytes = 1024

// ErrInvalidKey is matched by every error ValidateKey returns.
var ErrInvalidKey = errors.New("store: invalid key")

// ValidateKey checks that key is a non-empty UTF-8 path that starts with "/",
// has no NUL byte and is at most MaxKeyBytes long. The error says which rule
// failed and matches ErrInvalidKey.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: the key is empty; keys are paths such as /payments/limits.json", ErrInvalidKey)
	case len(key) > MaxKeyBytes:
		return fmt.Errorf("%w: the key is %d bytes; the limit is %d", ErrInvalidKey, len(key), MaxKeyBytes)
	case key[0] != '/':
		return fmt.Errorf("%w: key %q does not start with \"/\"", ErrInvalidKey, key)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: the key is not valid UTF-8", ErrInvalidKey)
	case strings.IndexByte(key, 0) >= 0:
		return fmt.Errorf("%w: the key contains a NUL byte", ErrInvalidKey)
	}
	return nil
}

// ValidatePrefix checks a watch or list prefix: empty (everything), or a
// string that passes ValidateKey.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if err := ValidateKey(prefix); err != nil {
		return fmt.Errorf("prefix: %w", err)
	}
	return nil
}
