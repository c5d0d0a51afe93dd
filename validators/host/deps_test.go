package host_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestHostImportsNoServerCode keeps the package shareable with the SDK: it
// must not pull in the server, its storage engines or Redis.
func TestHostImportsNoServerCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/pawlcfg/pawl/validators/host").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/pawlcfg/pawl/server", "go.etcd.io/bbolt", "github.com/redis/"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("validators/host depends on %s", dep)
			}
		}
	}
}
