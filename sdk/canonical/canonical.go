package canonical

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Domain prefixes the hashed bytes, so that a content digest can never equal
// the digest of other data that happens to have the same bytes.
const Domain = "pawl.content.v1"

// ErrInvalidJSON means JSON content could not be canonicalized.
var ErrInvalidJSON = errors.New("canonical: invalid JSON content")

// IsJSON reports whether a media type is canonicalized as JSON:
// application/json, or any type with the +json suffix, ignoring parameters.
func IsJSON(mediaType string) bool {
	mt, _, _ := strings.Cut(mediaType, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// Form returns the canonical byte form of content: for JSON media types the
// RFC 8785 (JCS) serialization, otherwise the bytes as they are.
func Form(mediaType string, content []byte) ([]byte, error) {
	if !IsJSON(mediaType) {
		return content, nil
	}
	if !utf8.Valid(content) {
		return nil, fmt.Errorf("%w: not valid UTF-8", ErrInvalidJSON)
	}
	p := parser{in: content, out: make([]byte, 0, len(content))}
	p.space()
	if err := p.value(0); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidJSON, err)
	}
	if p.space(); p.pos < len(p.in) {
		return nil, fmt.Errorf("%w: data after the top-level value at offset %d", ErrInvalidJSON, p.pos)
	}
	return p.out, nil
}

// Digest returns "sha256:<hex>" of Domain, NUL, the media type (lower-cased,
// without parameters), NUL, and the canonical form.
func Digest(mediaType string, content []byte) (string, error) {
	form, err := Form(mediaType, content)
	if err != nil {
		return "", err
	}
	mt, _, _ := strings.Cut(mediaType, ";")
	h := sha256.New()
	h.Write([]byte(Domain))
	h.Write([]byte{0})
	h.Write([]byte(strings.ToLower(strings.TrimSpace(mt))))
	h.Write([]byte{0})
	h.Write(form)
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// appendString appends s, unescaped, quoted as ECMAScript's
// JSON.stringify does: the two-character escapes for \b \t \n \f \r " \,
// \u00xx (lower-case hex) for the other control characters, everything
// else as its UTF-8 bytes.
func appendString(out, s []byte) []byte {
	out = append(out, '"')
	for _, c := range s {
		switch c {
		case '"':
			out = append(out, `\"`...)
		case '\\':
			out = append(out, `\\`...)
		case '\b':
			out = append(out, `\b`...)
		case '\f':
			out = append(out, `\f`...)
		case '\n':
			out = append(out, `\n`...)
		case '\r':
			out = append(out, `\r`...)
		case '\t':
			out = append(out, `\t`...)
		default:
			if c < 0x20 {
				out = append(out, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			} else {
				out = append(out, c)
			}
		}
	}
	return append(out, '"')
}

const hexDigits = "0123456789abcdef"

// formatNumber is ECMAScript's Number.prototype.toString for finite
// doubles, as RFC 8785 requires: the shortest digits that round-trip, in
// plain notation for exponents from -6 to 20, otherwise d.ddde±n.
func formatNumber(f float64) string {
	if f == 0 {
		return "0" // also for -0
	}
	sign := ""
	if f < 0 {
		sign, f = "-", -f
	}
	// 'e' with precision -1 gives the shortest round-trip digits.
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddddde±XX
	mant, expStr, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	exp, _ := strconv.Atoi(expStr)
	n := exp + 1 // position of the decimal point after the first n digits
	k := len(digits)
	switch {
	case k <= n && n <= 21:
		return sign + digits + strings.Repeat("0", n-k)
	case 0 < n && n <= 21:
		return sign + digits[:n] + "." + digits[n:]
	case -6 < n && n <= 0:
		return sign + "0." + strings.Repeat("0", -n) + digits
	}
	s := digits[:1]
	if k > 1 {
		s += "." + digits[1:]
	}
	if n-1 >= 0 {
		return sign + s + "e+" + strconv.Itoa(n-1)
	}
	return sign + s + "e-" + strconv.Itoa(1-n)
}
