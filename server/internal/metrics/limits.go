package metrics

import (
	"regexp"
	"strings"
)

// LimitNames are the limits limit_refusals_total counts, each named by
// the pawld flag that changes it, without its dashes (docs/LIMITS.md).
var LimitNames = []string{
	"max-value-bytes", "max-txn-ops", "max-txn-bytes", "max-validator-bytes",
	"validator-max-functions", "validator-max-function-locals", "validator-max-locals", "validator-max-function-bytes",
	"validator-max-code-bytes", "validator-max-loop-depth", "validator-max-loop-joins", "validator-max-blocks", "validator-max-block-joins", "validator-compile-timeout",
	"validator-max-compiles", "validator-memory-bytes", "validator-memory-budget", "validator-output",
	"max-conns", "max-conns-per-address", "reserved-conns",
	"max-streams-per-principal", "max-watchers-per-principal",
	"quota-bytes",
}

// LimitOther is the limit of a refusal that names none of LimitNames.
const LimitOther = "other"

var knownLimit = func() map[string]bool {
	m := map[string]bool{LimitOther: true}
	for _, n := range LimitNames {
		m[n] = true
	}
	return m
}()

// flagPattern finds a pawld flag in a message.
var flagPattern = regexp.MustCompile(`--[a-z][a-z0-9-]*[a-z0-9]`)

// LimitOf names the limit behind a refusal's message: the first flag of
// LimitNames that it names (every refusal for a limit names the flag that
// changes it, docs/LIMITS.md), or what the message says of the limits that
// have no flag; LimitOther when it names none.
func LimitOf(message string) string {
	for _, f := range flagPattern.FindAllString(message, -1) {
		if name := strings.TrimPrefix(f, "--"); knownLimit[name] {
			return name
		}
	}
	switch {
	case strings.Contains(message, "memory limit"):
		return "validator-memory-bytes"
	case strings.Contains(message, "output too large"):
		return "validator-output"
	}
	return LimitOther
}
