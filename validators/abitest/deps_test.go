package abitest_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestTheKitImportsNoServerOrSDK: the kit runs the host alone, as a server
// and an SDK would, and so stays usable from the CLI and from any test.
func TestTheKitImportsNoServerOrSDK(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/pawlcfg/pawl/validators/abitest", "github.com/pawlcfg/pawl/validators").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/pawlcfg/pawl/server", "github.com/pawlcfg/pawl/sdk", "github.com/pawlcfg/pawl/gen", "connectrpc.com", "github.com/spf13/cobra"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("validators/abitest or validators depends on %s", dep)
			}
		}
	}
}
