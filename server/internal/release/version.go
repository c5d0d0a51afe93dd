package release

import (
	"fmt"
	"strconv"
	"strings"
)

// parseVersion reads an app version such as "2.1.0", "v2.1" or
// "2.1.0-rc.1" as its numeric components; anything after '-' or '+' is
// ignored, so a pre-release counts as its release.
func parseVersion(v string) ([]int, error) {
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

// atLeastVersion reports whether v is at least min (missing components
// count as 0); an unreadable v is not.
func atLeastVersion(v string, min []int) bool {
	got, err := parseVersion(v)
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
