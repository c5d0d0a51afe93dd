package sdk_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestTheSDKPullsInNoServer: what services import stays small. The SDK's
// packages (tests aside) depend on no server code, bbolt, go-redis or
// cobra, and sdk/canonical, sdk/appversion, sdk/credentials, sdk/configid,
// sdk/auditchain and sdk/textsafe on the standard library alone.
func TestTheSDKPullsInNoServer(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/pawlcfg/pawl/sdk/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/pawlcfg/pawl/server", "go.etcd.io/bbolt", "github.com/redis/go-redis", "github.com/spf13/cobra"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("the SDK depends on %s", dep)
			}
		}
	}
	for _, pkg := range []string{"sdk/canonical", "sdk/appversion", "sdk/credentials", "sdk/auditchain", "sdk/configid", "sdk/textsafe"} {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "github.com/pawlcfg/pawl/"+pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		if deps := strings.Fields(string(out)); len(deps) != 1 {
			t.Errorf("%s imports more than the standard library: %v", pkg, deps)
		}
	}
}

// TestOnlyTheProviderPullsInOpenFeature: the OpenFeature SDK and the
// OpenTelemetry metrics SDK are for the services that choose them; the
// SDK's other packages (tests aside) import neither, and sdk itself only
// the OpenTelemetry metrics API.
func TestOnlyTheProviderPullsInOpenFeature(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, "github.com/pawlcfg/pawl/sdk/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, deps := fields[0], fields[1:]
		for _, dep := range deps {
			if strings.HasPrefix(dep, "github.com/open-feature/") && pkg != "github.com/pawlcfg/pawl/sdk/openfeature" {
				t.Errorf("%s depends on %s", pkg, dep)
			}
			if strings.HasPrefix(dep, "go.opentelemetry.io/otel/sdk/metric") {
				t.Errorf("%s depends on the OpenTelemetry metrics SDK (%s): it takes a MeterProvider", pkg, dep)
			}
		}
	}
}
