package release

import (
	"testing"

	"github.com/pawlcfg/pawl/sdk/configid"
)

// TestTheServerAndClientsShareTheConfigIDGrammar: the SDK and the agent
// check config IDs from the network with sdk/configid before they become
// paths; the server must refuse exactly what they refuse.
func TestTheServerAndClientsShareTheConfigIDGrammar(t *testing.T) {
	if configIDPattern.String() != configid.Pattern {
		t.Fatalf("the server's config ID pattern %q is not sdk/configid's %q", configIDPattern.String(), configid.Pattern)
	}
}
