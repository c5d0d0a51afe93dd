// Package hostile holds validators that misbehave on purpose, used only by
// tests to show that the host contains them: loop (never returns), membomb
// (allocates without end), trap (panics), bigoutput (returns too much),
// forbidden (imports a function outside the allowed WASI subset), noabi
// (exports none of the ABI), abiv2 (claims another ABI version) and
// stateful (its verdict depends on the calls before it, which only the
// conformance kit, validators/abitest, notices).
package hostile
