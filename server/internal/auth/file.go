package auth

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// ErrInvalidFile means the auth file is malformed; the message names the
// entry and its line.
var ErrInvalidFile = errors.New("auth: invalid auth file")

// MaxFileBytes bounds the auth file: a token entry takes about 200 bytes,
// so this holds tens of thousands.
const MaxFileBytes = 8 << 20

// File is a parsed and checked auth file.
type File struct {
	// Tokens are the bearer tokens, by the hash of each.
	Tokens []TokenEntry
	// Certificates are the principals of client certificates.
	Certificates []CertificateEntry
}

// TokenEntry is one bearer token of the file.
type TokenEntry struct {
	Principal string
	// Hash is the sha256 of the token (32 bytes).
	Hash []byte
	// Expires is when the token stops working; zero: never.
	Expires time.Time
	Grants  []Grant
}

// CertificateEntry is the principal of client certificates: their URI SAN
// (a SPIFFE ID) or, without one, their subject.
type CertificateEntry struct {
	Principal string
	Grants    []Grant
}

// fileYAML is the file as written.
type fileYAML struct {
	Tokens       []yaml.Node `yaml:"tokens"`
	Certificates []yaml.Node `yaml:"certificates"`
}

type tokenYAML struct {
	Principal string      `yaml:"principal"`
	Hash      string      `yaml:"hash"`
	Expires   string      `yaml:"expires"`
	Grants    []grantYAML `yaml:"grants"`
}

type certificateYAML struct {
	Principal string      `yaml:"principal"`
	Grants    []grantYAML `yaml:"grants"`
}

type grantYAML struct {
	Role       string   `yaml:"role"`
	Prefixes   []string `yaml:"prefixes"`
	Configs    []string `yaml:"configs"`
	Identities []string `yaml:"identities"`
}

// ReadFile reads and checks the auth file at path.
func ReadFile(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("auth: read %s: %w", path, err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrInvalidFile, path, MaxFileBytes)
	}
	file, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return file, nil
}

// Parse reads and checks an auth file's contents.
func Parse(data []byte) (*File, error) {
	var raw fileYAML
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&raw); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: the file is empty; it needs tokens or certificates", ErrInvalidFile)
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalidFile, err)
	}
	out := &File{}
	hashes := map[string]string{}
	for i, node := range raw.Tokens {
		where := fmt.Sprintf("tokens[%d] (line %d)", i, node.Line)
		var t tokenYAML
		if err := decodeStrict(&node, &t); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrInvalidFile, where, err)
		}
		if t.Principal != "" {
			where = fmt.Sprintf("tokens[%d] (line %d, principal %q)", i, node.Line, t.Principal)
		}
		entry, err := checkToken(t)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrInvalidFile, where, err)
		}
		if other, dup := hashes[t.Hash]; dup {
			return nil, fmt.Errorf("%w: %s: the same hash as %s; each token has its own", ErrInvalidFile, where, other)
		}
		hashes[t.Hash] = where
		out.Tokens = append(out.Tokens, entry)
	}
	principals := map[string]string{}
	for i, node := range raw.Certificates {
		where := fmt.Sprintf("certificates[%d] (line %d)", i, node.Line)
		var c certificateYAML
		if err := decodeStrict(&node, &c); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrInvalidFile, where, err)
		}
		if err := checkPrincipal(c.Principal); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrInvalidFile, where, err)
		}
		where = fmt.Sprintf("certificates[%d] (line %d, principal %q)", i, node.Line, c.Principal)
		if other, dup := principals[c.Principal]; dup {
			return nil, fmt.Errorf("%w: %s: the same principal as %s; give it all its grants in one entry", ErrInvalidFile, where, other)
		}
		principals[c.Principal] = where
		grants, err := checkGrants(c.Grants)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrInvalidFile, where, err)
		}
		out.Certificates = append(out.Certificates, CertificateEntry{Principal: c.Principal, Grants: grants})
	}
	if len(out.Tokens) == 0 && len(out.Certificates) == 0 {
		return nil, fmt.Errorf("%w: it has no tokens and no certificates: nobody could call", ErrInvalidFile)
	}
	return out, nil
}

// decodeStrict decodes one node, refusing fields the struct lacks.
func decodeStrict(node *yaml.Node, v any) error {
	b, err := yaml.Marshal(node)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		// Line numbers of the re-encoded node are not the file's.
		return errors.New(strings.TrimPrefix(stripLines.ReplaceAllString(err.Error(), ""), "yaml: unmarshal errors:\n  "))
	}
	return nil
}

var stripLines = regexp.MustCompile(`line \d+: `)

var (
	hashPattern      = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	principalPattern = regexp.MustCompile(`^[\x21-\x7e][\x20-\x7e]{0,254}$`)
	prefixPattern    = regexp.MustCompile(`^/[^\x00]*$`)
	configPattern    = regexp.MustCompile(`^(\*|[a-z0-9][a-z0-9._-]{0,127}\*?)$`)
	identityPattern  = regexp.MustCompile(`^(\*|[A-Za-z0-9][A-Za-z0-9._:@/-]{0,254}\*?)$`)
)

func checkPrincipal(name string) error {
	if !principalPattern.MatchString(name) || strings.TrimSpace(name) != name {
		return fmt.Errorf("principal %q must be 1-255 printable ASCII characters, not starting or ending with a space", name)
	}
	return nil
}

func checkToken(t tokenYAML) (TokenEntry, error) {
	if err := checkPrincipal(t.Principal); err != nil {
		return TokenEntry{}, err
	}
	if !hashPattern.MatchString(t.Hash) {
		return TokenEntry{}, fmt.Errorf("hash must be sha256: and 64 lowercase hex digits (what pawl token create prints), not %q", t.Hash)
	}
	entry := TokenEntry{Principal: t.Principal}
	entry.Hash, _ = hex.DecodeString(strings.TrimPrefix(t.Hash, "sha256:"))
	if t.Expires != "" {
		at, err := time.Parse(time.RFC3339, t.Expires)
		if err != nil {
			return TokenEntry{}, fmt.Errorf("expires %q is not an RFC 3339 time such as 2027-06-01T00:00:00Z", t.Expires)
		}
		entry.Expires = at
	}
	grants, err := checkGrants(t.Grants)
	if err != nil {
		return TokenEntry{}, err
	}
	entry.Grants = grants
	return entry, nil
}

// checkGrants checks that each grant names a role and the scope that role
// needs, and nothing else.
func checkGrants(in []grantYAML) ([]Grant, error) {
	if len(in) == 0 {
		return nil, errors.New("it has no grants")
	}
	out := make([]Grant, 0, len(in))
	for i, g := range in {
		grant := Grant{Role: Role(g.Role), Prefixes: g.Prefixes, Configs: g.Configs, Identities: g.Identities}
		if err := checkGrant(grant); err != nil {
			return nil, fmt.Errorf("grants[%d] (role %q): %v", i, g.Role, err)
		}
		out = append(out, grant)
	}
	return out, nil
}

func checkGrant(g Grant) error {
	type scope struct {
		name    string
		values  []string
		pattern *regexp.Regexp
		what    string
	}
	scopes := []scope{
		{"prefixes", g.Prefixes, prefixPattern, "a key prefix starting with /"},
		{"configs", g.Configs, configPattern, `a config ID, a prefix ending in "*", or "*"`},
		{"identities", g.Identities, identityPattern, `a workload identity, a prefix ending in "*", or "*"`},
	}
	var want string
	switch g.Role {
	case Reader, Writer:
		want = "prefixes"
	case Releaser, Promoter:
		want = "configs"
	case Instance:
		want = "identities"
	case ValidatorPublisher, Admin:
	default:
		return fmt.Errorf("unknown role; the roles are %s", roleList())
	}
	for _, s := range scopes {
		switch {
		case s.name != want && len(s.values) > 0:
			if want == "" {
				return fmt.Errorf("the role holds everywhere and takes no %s", s.name)
			}
			return fmt.Errorf("the role is scoped by %s, not %s", want, s.name)
		case s.name == want && len(s.values) == 0:
			return fmt.Errorf("the role needs %s (use [\"*\"] or [\"/\"] for all)", want)
		}
		for _, v := range s.values {
			if !s.pattern.MatchString(v) || len(v) > 1024 || !utf8.ValidString(v) {
				return fmt.Errorf("%s: %q is not %s", s.name, v, s.what)
			}
		}
	}
	return nil
}

func roleList() string {
	names := make([]string, len(Roles))
	for i, r := range Roles {
		names[i] = string(r)
	}
	return strings.Join(names, ", ")
}
