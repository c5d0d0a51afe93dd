package testkit_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNothingThatShipsImportsTheTestKit: the binaries, the SDK and the
// server (tests aside) depend on no package under internal/testkit, so the
// folder list keeps telling what ships.
func TestNothingThatShipsImportsTheTestKit(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/pawlcfg/pawl/cmd/...", "github.com/pawlcfg/pawl/sdk/...", "github.com/pawlcfg/pawl/server/...", "github.com/pawlcfg/pawl/validators/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/pawlcfg/pawl/internal/testkit") {
			t.Errorf("%s is in what ships; test helpers belong in _test.go files' imports only", pkg)
		}
	}
}
