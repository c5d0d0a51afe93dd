package goroutines

import (
	"runtime/pprof"
	"strings"
)

// Stacks returns every goroutine's stack, one string each, as the
// goroutine profile prints it with debug=2: a header ("goroutine 7
// [select]:"), then each frame's function and, indented, its file, and
// the "created by" frame.
func Stacks() []string {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2) // a strings.Builder does not fail
	return strings.Split(strings.TrimSpace(b.String()), "\n\n")
}

// Count returns how many goroutines' stacks contain any of funcs (such as
// "api.(*session).run(") anywhere in their text: a function, a file or
// the function that created the goroutine.
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

// Waiting reports whether, at one moment, for each of innermost some
// goroutine waits in state (the start of its header's state, such as
// "select" or "chan receive") with that as the start of its innermost
// frame outside the runtime (such as
// "github.com/pawlcfg/pawl/server/internal/api.(*session).ack("). The
// profile leaves out the runtime's frames (even with GOTRACEBACK=system):
// a goroutine blocked in a select shows the function that selects
// innermost.
func Waiting(state string, innermost ...string) bool {
	found := make([]bool, len(innermost))
	for _, g := range Stacks() {
		header, frames, _ := strings.Cut(g, "\n")
		if !strings.Contains(header, "["+state) {
			continue
		}
		for i, want := range innermost {
			found[i] = found[i] || strings.HasPrefix(frames, want)
		}
	}
	for _, f := range found {
		if !f {
			return false
		}
	}
	return true
}
