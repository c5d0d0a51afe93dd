package host

import (
	"encoding/json"
	"strconv"
	"strings"
)

// Redacted replaces a secret value in text.
const Redacted = "[redacted]"

// minSecretBytes is the shortest value redacted: a shorter one ("1",
// "on") would blank out ordinary words and numbers all over a message
// while hiding nothing worth hiding.
const minSecretBytes = 4

// SecretValues returns the values at the JSON Pointers secrets (a
// validator's Result.Secrets) in config, a JSON document: strings as they
// are, other values as their JSON text. Pointers that do not resolve, and
// content that is not JSON, give nothing.
func SecretValues(config []byte, secrets []string) []string {
	if len(secrets) == 0 {
		return nil
	}
	var doc any
	if err := json.Unmarshal(config, &doc); err != nil {
		return nil
	}
	var out []string
	for _, ptr := range secrets {
		v, ok := resolve(doc, ptr)
		if !ok {
			continue
		}
		s, isString := v.(string)
		if !isString {
			b, _ := json.Marshal(v)
			s = string(b)
		}
		if len(s) >= minSecretBytes {
			out = append(out, s)
		}
	}
	return out
}

// Redact replaces every occurrence of each of values in text with
// Redacted, longest values first (so that a secret that holds another
// is hidden whole), and also their JSON-quoted forms' insides (a message
// that printed a value with %q).
func Redact(text string, values []string) string {
	if len(values) == 0 || text == "" {
		return text
	}
	forms := make([]string, 0, 2*len(values))
	for _, v := range values {
		forms = append(forms, v)
		if q := strconv.Quote(v); q[1:len(q)-1] != v {
			forms = append(forms, q[1:len(q)-1])
		}
	}
	// Longest first.
	for i := 1; i < len(forms); i++ {
		for j := i; j > 0 && len(forms[j]) > len(forms[j-1]); j-- {
			forms[j], forms[j-1] = forms[j-1], forms[j]
		}
	}
	for _, f := range forms {
		text = strings.ReplaceAll(text, f, Redacted)
	}
	return text
}

// RedactViolations returns vs with the values in messages redacted.
func RedactViolations(vs []Violation, values []string) []Violation {
	if len(values) == 0 {
		return vs
	}
	out := make([]Violation, len(vs))
	for i, v := range vs {
		v.Message = Redact(v.Message, values)
		out[i] = v
	}
	return out
}

// resolve follows an RFC 6901 JSON Pointer in doc.
func resolve(doc any, ptr string) (any, bool) {
	if ptr == "" {
		return doc, true
	}
	if ptr[0] != '/' {
		return nil, false
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch node := doc.(type) {
		case map[string]any:
			v, ok := node[tok]
			if !ok {
				return nil, false
			}
			doc = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(node) {
				return nil, false
			}
			doc = node[i]
		default:
			return nil, false
		}
	}
	return doc, true
}
