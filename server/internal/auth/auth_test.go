package auth_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/server/internal/auth"
)

const token = "pawl_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

// TestParseRefusesMalformedFiles: every malformed file is refused with a
// message that names the entry, its line and what is wrong.
func TestParseRefusesMalformedFiles(t *testing.T) {
	h := auth.Hash(token)
	for _, tc := range []struct{ name, file, want string }{
		{"empty", "", "empty"},
		{"nobody", "tokens: []\n", "no tokens and no certificates"},
		{"unknown top-level field", "tokenz: []\n", "tokenz"},
		{"unknown entry field", "tokens:\n  - principal: a\n    hash: " + h + "\n    grant: []\n", `tokens[0] (line 2): field grant not found`},
		{"bad hash", "tokens:\n  - principal: a\n    hash: md5:00\n    grants: [{role: admin}]\n", `tokens[0] (line 2, principal "a"): hash must be sha256:`},
		{"uppercase hash", "tokens:\n  - principal: a\n    hash: " + strings.ToUpper(h) + "\n    grants: [{role: admin}]\n", "hash must be sha256:"},
		{"no principal", "tokens:\n  - hash: " + h + "\n    grants: [{role: admin}]\n", `tokens[0] (line 2): principal ""`},
		{"bad time", "tokens:\n  - principal: a\n    hash: " + h + "\n    expires: tomorrow\n    grants: [{role: admin}]\n", `expires "tomorrow" is not an RFC 3339 time`},
		{"no grants", "tokens:\n  - principal: a\n    hash: " + h + "\n", "it has no grants"},
		{"unknown role", "tokens:\n  - principal: a\n    hash: " + h + "\n    grants: [{role: root}]\n", `grants[0] (role "root"): unknown role`},
		{"reader without prefixes", "tokens:\n  - principal: a\n    hash: " + h + "\n    grants: [{role: reader}]\n", "the role needs prefixes"},
		{"reader with configs", "tokens:\n  - principal: a\n    hash: " + h + "\n    grants: [{role: reader, prefixes: [/a/], configs: [x]}]\n", "scoped by prefixes, not configs"},
		{"admin with a scope", "tokens:\n  - principal: a\n    hash: " + h + "\n    grants: [{role: admin, configs: [x]}]\n", "takes no configs"},
		{"relative prefix", "tokens:\n  - principal: a\n    hash: " + h + "\n    grants: [{role: writer, prefixes: [app/]}]\n", `"app/" is not a key prefix`},
		{"bad config pattern", "tokens:\n  - principal: a\n    hash: " + h + "\n    grants: [{role: releaser, configs: [Pay*ments]}]\n", `"Pay*ments" is not a config ID`},
		{"bad identity", "tokens:\n  - principal: a\n    hash: " + h + "\n    grants: [{role: instance, identities: [\"a b\"]}]\n", `"a b" is not a workload identity`},
		{"duplicate hash", "tokens:\n  - principal: a\n    hash: " + h + "\n    grants: [{role: admin}]\n  - principal: b\n    hash: " + h + "\n    grants: [{role: admin}]\n",
			`tokens[1] (line 5, principal "b"): the same hash as tokens[0] (line 2, principal "a")`},
		{"duplicate certificate", "certificates:\n  - principal: CN=x\n    grants: [{role: admin}]\n  - principal: CN=x\n    grants: [{role: admin}]\n",
			`certificates[1] (line 4, principal "CN=x"): the same principal`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := auth.Parse([]byte(tc.file))
			if !errors.Is(err, auth.ErrInvalidFile) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse: %v, want an invalid file saying %q", err, tc.want)
			}
		})
	}
}

func TestTokensAndCertificates(t *testing.T) {
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	other := "pawl_BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
	path := filepath.Join(t.TempDir(), "auth.yaml")
	file := "tokens:\n" +
		"  - principal: ci\n    hash: " + auth.Hash(token) + "\n    grants: [{role: releaser, configs: [\"pay-*\"]}]\n" +
		"  - principal: old\n    hash: " + auth.Hash(other) + "\n    expires: 2026-01-01T00:00:00Z\n    grants: [{role: admin}]\n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := auth.NewAuthenticator(path, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Token(token)
	if err != nil || p.Name != "ci" || p.Method != auth.MethodToken || !p.MayConfig(auth.Releaser, "pay-eu") || p.MayConfig(auth.Releaser, "billing") || p.MayConfig(auth.Promoter, "pay-eu") {
		t.Errorf("Token: %+v, %v", p, err)
	}
	if _, err := a.Token(other); !errors.Is(err, auth.ErrUnauthenticated) || !strings.Contains(err.Error(), "expired at 2026-01-01T00:00:00Z") || strings.Contains(err.Error(), other) {
		t.Errorf("an expired token: %v", err)
	}
	if _, err := a.Token("pawl_" + strings.Repeat("C", 43)); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("an unknown token: %v", err)
	}
	if _, err := a.Token("hunter2"); !errors.Is(err, auth.ErrUnauthenticated) || !strings.Contains(err.Error(), "malformed") {
		t.Errorf("a malformed token: %v", err)
	}
}

func TestGrants(t *testing.T) {
	p := auth.Principal{Name: "x", Grants: []auth.Grant{
		{Role: auth.Writer, Prefixes: []string{"/app/"}},
		{Role: auth.Reader, Prefixes: []string{"/"}},
		{Role: auth.Instance, Identities: []string{"web-1"}},
	}}
	for _, tc := range []struct {
		got, want bool
		what      string
	}{
		{p.MayKey(auth.Writer, "/app/a"), true, "write under its prefix"},
		{p.MayKey(auth.Writer, "/other"), false, "write elsewhere"},
		{p.MayKey(auth.Reader, "/other"), true, "read under /"},
		{p.MayKey(auth.Reader, "/_pawl/configs/x"), false, "read /_pawl/ with a grant of /"},
		{p.MayPrefix("/_pawl/"), false, "list /_pawl/"},
		{p.MayPrefix("/"), true, "list /"},
		{p.InstanceCredential("web-1"), true, "its identity"},
		{p.InstanceCredential("web-10"), false, "another identity"},
		{auth.Match("web-*", "web-10"), true, "a pattern"},
		{auth.Match("*", "anything"), true, "everything"},
		{auth.Open().IsAdmin(), true, "open is admin"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %v, want %v", tc.what, tc.got, tc.want)
		}
	}
	if id, ok := p.SoleIdentity(); !ok || id != "web-1" {
		t.Errorf("SoleIdentity: %q %v", id, ok)
	}
	pool := auth.Principal{Grants: []auth.Grant{{Role: auth.Instance, Identities: []string{"web-*"}}}}
	if _, ok := pool.SoleIdentity(); ok {
		t.Error("a pool has a sole identity")
	}
	if got := (auth.Principal{Name: "ci", OnBehalfOf: "alice"}).Actor(); got != "ci (on behalf of alice)" {
		t.Errorf("Actor: %q", got)
	}
}

// TestSlotCarriesThePrincipalOutward: code that holds the context from
// before the authentication finds the principal in its slot.
func TestSlotCarriesThePrincipalOutward(t *testing.T) {
	outer := auth.WithSlot(context.Background())
	if _, ok := auth.PrincipalFrom(outer); ok {
		t.Fatal("a principal before authentication")
	}
	inner := auth.NewContext(outer, auth.Principal{Name: "ci", OnBehalfOf: "alice"})
	for _, ctx := range []context.Context{inner, outer} {
		if p, ok := auth.PrincipalFrom(ctx); !ok || p.Name != "ci" || p.OnBehalfOf != "alice" {
			t.Errorf("PrincipalFrom: %+v, %v", p, ok)
		}
	}
}
