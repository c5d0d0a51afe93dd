package canonical

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
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
	dec := json.NewDecoder(bytes.NewReader(content))
	dec.UseNumber()
	var buf bytes.Buffer
	if err := writeValue(&buf, dec); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidJSON, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the top-level value", ErrInvalidJSON)
	}
	return buf.Bytes(), nil
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

func writeValue(buf *bytes.Buffer, dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			buf.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					buf.WriteByte(',')
				}
				if err := writeValue(buf, dec); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil {
				return err
			}
			buf.WriteByte(']')
			return nil
		}
		return writeObject(buf, dec)
	case string:
		writeString(buf, t)
	case json.Number:
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil || math.IsInf(f, 0) {
			return fmt.Errorf("number %s is outside the IEEE 754 double range", t)
		}
		buf.WriteString(formatNumber(f))
	case bool:
		buf.WriteString(strconv.FormatBool(t))
	case nil:
		buf.WriteString("null")
	}
	return nil
}

func writeObject(buf *bytes.Buffer, dec *json.Decoder) error {
	type member struct {
		key   string
		value []byte
	}
	var members []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key := tok.(string)
		if seen[key] {
			return fmt.Errorf("duplicate object key %q", key)
		}
		seen[key] = true
		var v bytes.Buffer
		if err := writeValue(&v, dec); err != nil {
			return err
		}
		members = append(members, member{key, v.Bytes()})
	}
	if _, err := dec.Token(); err != nil {
		return err
	}
	// RFC 8785 sorts keys by their UTF-16 code units.
	sort.Slice(members, func(i, j int) bool { return lessUTF16(members[i].key, members[j].key) })
	buf.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			buf.WriteByte(',')
		}
		writeString(buf, m.key)
		buf.WriteByte(':')
		buf.Write(m.value)
	}
	buf.WriteByte('}')
	return nil
}

func lessUTF16(a, b string) bool {
	ua, ub := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
	for i := 0; i < len(ua) && i < len(ub); i++ {
		if ua[i] != ub[i] {
			return ua[i] < ub[i]
		}
	}
	return len(ua) < len(ub)
}

// writeString escapes as ECMAScript's JSON.stringify: the two-character
// escapes for \b \t \n \f \r " \, \u00xx (lower-case hex) for the other
// control characters, everything else as UTF-8.
func writeString(buf *bytes.Buffer, s string) {
	buf.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			buf.WriteString(`\"`)
		case '\\':
			buf.WriteString(`\\`)
		case '\b':
			buf.WriteString(`\b`)
		case '\f':
			buf.WriteString(`\f`)
		case '\n':
			buf.WriteString(`\n`)
		case '\r':
			buf.WriteString(`\r`)
		case '\t':
			buf.WriteString(`\t`)
		default:
			if r < 0x20 {
				fmt.Fprintf(buf, `\u%04x`, r)
			} else {
				buf.WriteRune(r)
			}
		}
	}
	buf.WriteByte('"')
}

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
