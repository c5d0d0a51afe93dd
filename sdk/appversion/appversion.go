// Package appversion compares application versions the way releases'
// minimum app version is judged, so that the server (which leaves older
// instances out of a release's membership) and the SDK (which refuses a
// release its app is too old for) give the same answer. It imports only
// the standard library.
package appversion

import (
	"fmt"
	"strconv"
	"strings"
)

// Parse reads an app version such as "2.1.0", "v2.1" or "2.1.0-rc.1" as
// its numeric components; anything after '-' or '+' is ignored, so a
// pre-release counts as its release.
func Parse(v string) ([]int, error) {
	core := strings.TrimPrefix(v, "v")
	if i := strings.IndexAny(core, "-+"); i >= 0 {
		core = core[:i]
	}
	if core == "" {
		return nil, fmt.Errorf("version %q has no numbers", v)
	}
	var out []int
	for _, part := range strings.Split(core, ".") {
		n, err := strconv.Atoi(part)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("version %q: %q is not a number", v, part)
		}
		out = append(out, n)
	}
	return out, nil
}

// AtLeast reports whether version v is at least min (missing components
// count as 0); an unreadable v is not.
func AtLeast(v string, min []int) bool {
	got, err := Parse(v)
	if err != nil {
		return false
	}
	for i := range max(len(got), len(min)) {
		a, b := 0, 0
		if i < len(got) {
			a = got[i]
		}
		if i < len(min) {
			b = min[i]
		}
		if a != b {
			return a > b
		}
	}
	return true
}
