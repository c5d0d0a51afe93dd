package metrics_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pawlcfg/pawl/server/internal/metrics"
)

// TestLimitOf: each refusal names its limit by the flag in its message
// (the messages are the server's own, from docs/LIMITS.md); a flag that
// is no limit's is passed over, and a message that names none is "other".
func TestLimitOf(t *testing.T) {
	for _, c := range []struct{ message, want string }{
		{"the value is 2000 bytes; the limit is 1024 bytes (pawld --max-value-bytes)", "max-value-bytes"},
		{"the transaction has 20 ops; the limit is 16 (pawld --max-txn-ops)", "max-txn-ops"},
		{`principal "ci" holds 3 streams, the limit per principal (--max-streams-per-principal 3): close one`, "max-streams-per-principal"},
		{"storage quota: this write of 10 bytes would take the store from 5 bytes past its 8-byte quota (--quota-bytes): delete keys you no longer need and let compaction drop their history (pawld --retain-revisions, --retain-for), or raise pawld --quota-bytes", "quota-bytes"},
		{"validator: over a limit: the module has 9 functions; the limit is 8 (pawld --validator-max-functions)", "validator-max-functions"},
		{"op 0: the value of /a--b--read-timeout is 9 bytes; the limit is 8 bytes (pawld --max-txn-bytes)", "max-txn-bytes"},
		{"validator: memory limit exceeded", "validator-memory-bytes"},
		{"validator: output too large", "validator-output"},
		{"no room", metrics.LimitOther},
	} {
		if got := metrics.LimitOf(c.message); got != c.want {
			t.Errorf("LimitOf(%q) = %q, want %q", c.message, got, c.want)
		}
	}
}

// TestEveryLimitOfTheDocsIsNamed: every limit docs/LIMITS.md lists as
// refused with RESOURCE_EXHAUSTED, or as a connection limit, has its
// flag among LimitNames, so that its refusals are not counted as
// "other".
func TestEveryLimitOfTheDocsIsNamed(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/LIMITS.md")
	if err != nil {
		t.Fatal(err)
	}
	flag := regexp.MustCompile("`--([a-z0-9-]+)`")
	checked := 0
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 5 || !(strings.Contains(line, "RESOURCE_EXHAUSTED") || strings.Contains(line, "connection is reset")) {
			continue
		}
		for _, m := range flag.FindAllStringSubmatch(cells[3], -1) {
			checked++
			if !slices.Contains(metrics.LimitNames, m[1]) {
				t.Errorf("docs/LIMITS.md: --%s is refused with RESOURCE_EXHAUSTED, but is not in metrics.LimitNames", m[1])
			}
		}
	}
	if checked < 15 {
		t.Fatalf("found %d limits' flags in docs/LIMITS.md; the table's layout changed?", checked)
	}
}
