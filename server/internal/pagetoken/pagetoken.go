// Package pagetoken encodes the opaque tokens that continue a paginated
// listing: what is listed (its scope), the store revision of the first page,
// so that every page is read at it, and the last key returned.
package pagetoken

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
)

// Token continues a listing. It is opaque to clients.
type Token struct {
	// Scope names what is listed (a key prefix, a config ID): a token is
	// refused for a listing of anything else.
	Scope string
	// Revision is the store revision of the first page.
	Revision int64
	// After is the last key returned.
	After string
}

// version is the first byte of every token, so the format can change
// without misreading old tokens.
const version = 1

// ErrMalformed means the string is not a token.
var ErrMalformed = errors.New("pagetoken: malformed page token")

// Encode returns the token as a URL-safe string.
func (t Token) Encode() string {
	b := []byte{version}
	b = binary.AppendUvarint(b, uint64(t.Revision))
	b = binary.AppendUvarint(b, uint64(len(t.Scope)))
	b = append(b, t.Scope...)
	b = append(b, t.After...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Decode reads a token that Encode wrote; anything else is ErrMalformed.
func Decode(s string) (Token, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 1 || b[0] != version {
		return Token{}, ErrMalformed
	}
	b = b[1:]
	rev, n := binary.Uvarint(b)
	if n <= 0 || rev == 0 {
		return Token{}, ErrMalformed
	}
	b = b[n:]
	slen, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < slen {
		return Token{}, ErrMalformed
	}
	b = b[n:]
	return Token{Revision: int64(rev), Scope: string(b[:slen]), After: string(b[slen:])}, nil
}
