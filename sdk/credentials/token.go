package credentials

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// TokenPrefix begins every token NewToken makes, so that a token is easy
// to recognise (in a secret scanner, in a leaked log).
const TokenPrefix = "pawl_"

// tokenBytes is the number of random bytes in a token: 256 bits, beyond
// any guessing.
const tokenBytes = 32

// NewToken returns a new random token.
func NewToken() (string, error) {
	var b [tokenBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("credentials: new token: %w", err)
	}
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// HashToken returns the hash of token that pawld's auth file stores:
// "sha256:" and the lowercase hex of the sha256 of its bytes.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// TokenSource gives the token to send with a call. Its Token method is
// called once per request, from any goroutine.
type TokenSource interface {
	// Token returns the token; an error with an empty token means there
	// is none to send.
	Token() (string, error)
}

// StaticToken is a TokenSource that never changes.
type StaticToken string

// Token returns t.
func (t StaticToken) Token() (string, error) { return string(t), nil }

// rereadEvery is how often a TokenFile reads its file even when nothing
// about the file seems to have changed: a file rewritten in place with a
// token of the same length, within one tick of a coarse file system clock,
// keeps its size and modification time.
const rereadEvery = time.Minute

// TokenFile is a TokenSource reading the token from a file (surrounding
// white space removed). It reads the file again when the file changes (a
// new inode, as when a secret is replaced by a rename or a symbolic link
// is swapped, or a new size or modification time), and at least once a
// minute. Its methods are safe for concurrent use.
type TokenFile struct {
	path string

	mu    sync.Mutex
	token string
	info  os.FileInfo
	read  time.Time
}

// NewTokenFile reads the token in the file at path, and fails when the file
// cannot be read or holds no token.
func NewTokenFile(path string) (*TokenFile, error) {
	f := &TokenFile{path: path}
	if _, err := f.Token(); err != nil {
		return nil, err
	}
	return f, nil
}

// Token returns the token in the file, reading it again if the file
// changed. When the file cannot be read now, or holds no token (a secret
// being replaced), it returns the last token it read with the error, and
// tries again at the next call.
func (f *TokenFile) Token() (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	info, err := os.Stat(f.path)
	if err != nil {
		return f.token, fmt.Errorf("credentials: token file: %w", err)
	}
	if sameFile(f.info, info) && time.Since(f.read) < rereadEvery {
		return f.token, nil
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return f.token, fmt.Errorf("credentials: token file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return f.token, fmt.Errorf("credentials: token file %s: %w", f.path, errEmpty)
	}
	if strings.ContainsAny(token, "\r\n\t ") {
		return f.token, fmt.Errorf("credentials: token file %s: holds more than one word; a token has no white space", f.path)
	}
	f.token, f.info, f.read = token, info, time.Now()
	return token, nil
}

var errEmpty = errors.New("holds no token")
