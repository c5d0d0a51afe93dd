package kvservice

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
)

// pageToken continues a listing: the prefix it lists, the revision of its
// first page, and the last key returned. It is opaque to clients.
type pageToken struct {
	prefix   string
	revision int64
	after    string
}

// pageTokenVersion is the first byte of every token, so the format can
// change without misreading old tokens.
const pageTokenVersion = 1

var errBadToken = errors.New("kvservice: malformed page token")

func (t pageToken) encode() string {
	b := []byte{pageTokenVersion}
	b = binary.AppendUvarint(b, uint64(t.revision))
	b = binary.AppendUvarint(b, uint64(len(t.prefix)))
	b = append(b, t.prefix...)
	b = append(b, t.after...)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodePageToken(s string) (pageToken, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 1 || b[0] != pageTokenVersion {
		return pageToken{}, errBadToken
	}
	b = b[1:]
	rev, n := binary.Uvarint(b)
	if n <= 0 || rev == 0 {
		return pageToken{}, errBadToken
	}
	b = b[n:]
	plen, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < plen {
		return pageToken{}, errBadToken
	}
	b = b[n:]
	return pageToken{revision: int64(rev), prefix: string(b[:plen]), after: string(b[plen:])}, nil
}
