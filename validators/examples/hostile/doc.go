// Package hostile holds validators that misbehave on purpose, used only by
// tests to show that the host contains them: loop (never returns), membomb
// (allocates without end), trap (panics), bigoutput (returns too much) and
// forbidden (imports a function outside the allowed WASI subset).
package hostile
