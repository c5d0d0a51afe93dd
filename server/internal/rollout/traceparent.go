package rollout

import (
	"fmt"
	"strings"
)

// TraceID checks a W3C traceparent header value (Trace Context, level 1)
// and returns its trace ID: "00-<32 hex trace ID>-<16 hex parent ID>-<2
// hex flags>". A later version may append fields after the fourth, which
// are ignored, as the specification asks; version ff is invalid. An empty
// traceparent has no trace ID and no error.
func TraceID(traceparent string) (string, error) {
	if traceparent == "" {
		return "", nil
	}
	bad := func(why string) error {
		return fmt.Errorf("%w: traceparent %q is not a W3C traceparent (version-traceid-parentid-flags, lower-case hex): %s",
			ErrInvalid, traceparent, why)
	}
	const size = 55 // 2 + 1 + 32 + 1 + 16 + 1 + 2
	if len(traceparent) < size {
		return "", bad("too short")
	}
	version := traceparent[:2]
	switch {
	case !isLowerHex(version):
		return "", bad("the version is not two hex digits")
	case version == "ff":
		return "", bad("version ff is invalid")
	case version == "00" && len(traceparent) != size:
		return "", bad("version 00 has exactly four fields")
	case len(traceparent) > size && traceparent[size] != '-':
		return "", bad("the flags are not two hex digits")
	}
	fields := strings.SplitN(traceparent[:size], "-", 4)
	if len(fields) != 4 || len(fields[1]) != 32 || len(fields[2]) != 16 || len(fields[3]) != 2 {
		return "", bad("the fields are not 2, 32, 16 and 2 hex digits separated by '-'")
	}
	switch {
	case !isLowerHex(fields[1]) || strings.Trim(fields[1], "0") == "":
		return "", bad("the trace ID is not 32 lower-case hex digits, not all zero")
	case !isLowerHex(fields[2]) || strings.Trim(fields[2], "0") == "":
		return "", bad("the parent ID is not 16 lower-case hex digits, not all zero")
	case !isLowerHex(fields[3]):
		return "", bad("the flags are not two hex digits")
	}
	return fields[1], nil
}

func isLowerHex(s string) bool {
	for i := range len(s) {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return s != ""
}
