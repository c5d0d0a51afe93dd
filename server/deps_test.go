package server_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsGoOneWay checks the layout's import rules with go list -deps:
// cmd → server → server/internal/*; the domain packages never see the wire
// (gen, connect), the storage contract sees no domain package, and the
// record layout sees only the storage contract.
func TestImportsGoOneWay(t *testing.T) {
	const mod = "github.com/pawlcfg/pawl/"
	rules := []struct {
		pkg    string
		banned []string
	}{
		{"server/internal/store", []string{mod + "server/internal/", mod + "gen", "connectrpc.com/"}},
		{"server/internal/records", []string{mod + "server/internal/rollout", mod + "server/internal/release", mod + "server/internal/instance", mod + "gen", "connectrpc.com/"}},
		{"server/internal/watch", []string{mod + "server/internal/rollout", mod + "server/internal/api", mod + "gen", "connectrpc.com/"}},
		{"server/internal/quorum", []string{mod + "server/", mod + "gen", "connectrpc.com/"}},
		{"server/internal/instance", []string{mod + "server/internal/api", mod + "server/internal/rollout", mod + "gen", "connectrpc.com/"}},
		{"server/internal/validator", []string{mod + "server/internal/api", mod + "gen", "connectrpc.com/"}},
		{"server/internal/release", []string{mod + "server/internal/api", mod + "server/internal/rollout", mod + "gen", "connectrpc.com/"}},
		{"server/internal/rollout", []string{mod + "server/internal/api", mod + "gen", "connectrpc.com/"}},
		{"server/internal/auth", []string{mod + "server/internal/", mod + "gen", "connectrpc.com/"}},
		{"server/internal/metrics", []string{mod, "connectrpc.com/"}},
		{"server/internal/tracing", []string{mod, "connectrpc.com/"}},
		{"server", []string{mod + "cmd/"}},
	}
	for _, r := range rules {
		out, err := exec.Command("go", "list", "-deps", mod+r.pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", r.pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, banned := range r.banned {
				if dep != mod+r.pkg && strings.HasPrefix(dep, banned) {
					t.Errorf("%s imports %s", r.pkg, dep)
				}
			}
		}
	}
}
