package goroutines

import (
	"runtime/pprof"
	"strings"
)

// Stacks returns every goroutine's stack, one string each, as the
// goroutine profile prints it with debug=2: a header ("goroutine 7
// [select]:"), then each frame's function and, indented, its file.
func Stacks() []string {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2) // a strings.Builder does not fail
	return strings.Split(strings.TrimSpace(b.String()), "\n\n")
}

// Count returns how many goroutines have a frame whose line contains any
// of funcs (such as "api.(*session).run(").
func Count(funcs ...string) int {
	n := 0
	for _, g := range Stacks() {
		for _, f := range funcs {
			if strings.Contains(g, f) {
				n++
				break
			}
		}
	}
	return n
}

// Waiting reports whether a goroutine is in state (its header's, such as
// "select" or "chan receive") with its innermost frame's line beginning
// with innermost (such as "github.com/pawlcfg/pawl/server/internal/api.(*session).ack(").
func Waiting(state, innermost string) bool {
	for _, g := range Stacks() {
		header, frames, _ := strings.Cut(g, "\n")
		if strings.Contains(header, "["+state) && strings.HasPrefix(frames, innermost) {
			return true
		}
	}
	return false
}
