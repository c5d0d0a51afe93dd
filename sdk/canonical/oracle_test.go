package canonical

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// decoderForm is Form as it was written first, on encoding/json's
// Decoder: the oracle the parser is checked against. It returns the
// canonical byte form of content (with the depth bound added since): for JSON media types the
// RFC 8785 (JCS) serialization, otherwise the bytes as they are.
func decoderForm(mediaType string, content []byte) ([]byte, error) {
	if !IsJSON(mediaType) {
		return content, nil
	}
	if !utf8.Valid(content) {
		return nil, fmt.Errorf("%w: not valid UTF-8", ErrInvalidJSON)
	}
	dec := json.NewDecoder(bytes.NewReader(content))
	dec.UseNumber()
	var buf bytes.Buffer
	if err := oracleValue(&buf, dec, 0); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidJSON, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the top-level value", ErrInvalidJSON)
	}
	return buf.Bytes(), nil
}

func oracleValue(buf *bytes.Buffer, dec *json.Decoder, depth int) error {
	if depth > MaxDepth {
		return fmt.Errorf("nested deeper than %d arrays and objects", MaxDepth)
	}
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
				if err := oracleValue(buf, dec, depth+1); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil {
				return err
			}
			buf.WriteByte(']')
			return nil
		}
		return oracleObject(buf, dec, depth)
	case string:
		oracleString(buf, t)
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

func oracleObject(buf *bytes.Buffer, dec *json.Decoder, depth int) error {
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
		if err := oracleValue(&v, dec, depth+1); err != nil {
			return err
		}
		members = append(members, member{key, v.Bytes()})
	}
	if _, err := dec.Token(); err != nil {
		return err
	}
	// RFC 8785 sorts keys by their UTF-16 code units.
	sort.Slice(members, func(i, j int) bool { return oracleLessUTF16(members[i].key, members[j].key) })
	buf.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			buf.WriteByte(',')
		}
		oracleString(buf, m.key)
		buf.WriteByte(':')
		buf.Write(m.value)
	}
	buf.WriteByte('}')
	return nil
}

func oracleLessUTF16(a, b string) bool {
	ua, ub := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
	for i := 0; i < len(ua) && i < len(ub); i++ {
		if ua[i] != ub[i] {
			return ua[i] < ub[i]
		}
	}
	return len(ua) < len(ub)
}

// oracleString escapes as ECMAScript's JSON.stringify: the two-character
// escapes for \b \t \n \f \r " \, \u00xx (lower-case hex) for the other
// control characters, everything else as UTF-8.
func oracleString(buf *bytes.Buffer, s string) {
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
