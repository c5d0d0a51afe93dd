package auth

import (
	"context"
	"crypto/x509"
	"slices"
	"strings"
	"sync"
)

// Role is what a grant allows.
type Role string

// The roles. A grant of each is scoped: reader and writer to key prefixes,
// releaser and promoter to config IDs, instance to workload identities;
// validator-publisher and admin hold everywhere.
const (
	// Reader reads and watches keys under its prefixes.
	Reader Role = "reader"
	// Writer puts, deletes and changes in transactions keys under its
	// prefixes, and reads them.
	Writer Role = "writer"
	// ValidatorPublisher uploads validators.
	ValidatorPublisher Role = "validator-publisher"
	// Releaser creates releases of its configs.
	Releaser Role = "releaser"
	// Promoter promotes, rolls back, stops, retires members of and
	// revokes releases of its configs.
	Promoter Role = "promoter"
	// Instance speaks for the workload identities it names: it registers,
	// heartbeats, follows assignments, downloads what it is assigned and
	// ACKs as them.
	Instance Role = "instance"
	// Admin may do everything, and alone reads Pawl's own records under
	// /_pawl/ and the boot IDs and membership epochs of instances.
	Admin Role = "admin"
)

// Roles are every role, in the order the docs list them.
var Roles = []Role{Reader, Writer, ValidatorPublisher, Releaser, Promoter, Instance, Admin}

// Methods of authentication, as Principal.Method says.
const (
	// MethodToken is a bearer token of the auth file.
	MethodToken = "token"
	// MethodMTLS is a client certificate verified against the client CA.
	MethodMTLS = "mtls"
	// MethodOpen is a server without an auth file: nobody is
	// authenticated and everybody may do everything.
	MethodOpen = "open"
)

// Anonymous is the principal of every caller of a server without an auth
// file.
const Anonymous = "anonymous"

// SystemPrefix is where Pawl keeps its own records; only admins read them.
const SystemPrefix = "/_pawl/"

// Grant is a role with its scope: which of Prefixes, Configs and
// Identities applies depends on the role.
type Grant struct {
	Role Role
	// Prefixes are key prefixes, for reader and writer.
	Prefixes []string
	// Configs are config IDs, for releaser and promoter: an ID, a prefix
	// pattern ending in "*", or "*" for every config.
	Configs []string
	// Identities are workload identities, for instance, as patterns like
	// Configs.
	Identities []string
}

// Principal is an authenticated caller.
type Principal struct {
	// Name is who it is: the auth file's principal, recorded as the actor.
	Name string
	// Method is how it was authenticated: MethodToken, MethodMTLS or
	// MethodOpen.
	Method string
	// OnBehalfOf is what the caller's Pawl-Actor header says it acts for:
	// a note beside the principal, never in its place.
	OnBehalfOf string
	// Grants are what it may do.
	Grants []Grant
}

// Open is the principal of every caller of a server without an auth file.
func Open() Principal {
	return Principal{Name: Anonymous, Method: MethodOpen, Grants: []Grant{{Role: Admin}}}
}

// Actor is what a record names as who acted: the principal, with the
// on-behalf-of note in parentheses when there is one.
func (p Principal) Actor() string {
	if p.OnBehalfOf == "" {
		return p.Name
	}
	return p.Name + " (on behalf of " + p.OnBehalfOf + ")"
}

// IsAdmin reports whether the principal holds the admin role.
func (p Principal) IsAdmin() bool { return p.Has(Admin) }

// Has reports whether the principal holds role with any scope (admin holds
// every role).
func (p Principal) Has(role Role) bool {
	return slices.ContainsFunc(p.Grants, func(g Grant) bool { return g.Role == role || g.Role == Admin })
}

// MayKey reports whether the principal holds role (Reader or Writer) for
// key: a writer's prefixes are readable too, and keys under SystemPrefix
// are an admin's alone.
func (p Principal) MayKey(role Role, key string) bool {
	if p.IsAdmin() {
		return true
	}
	if strings.HasPrefix(key, SystemPrefix) {
		return false
	}
	for _, g := range p.Grants {
		if keyRole(g.Role, role) && slices.ContainsFunc(g.Prefixes, func(prefix string) bool { return strings.HasPrefix(key, prefix) }) {
			return true
		}
	}
	return false
}

// MayPrefix reports whether the principal may read some key under prefix:
// a grant prefix inside it, or one it is inside.
func (p Principal) MayPrefix(prefix string) bool {
	if p.IsAdmin() {
		return true
	}
	for _, g := range p.Grants {
		if !keyRole(g.Role, Reader) {
			continue
		}
		for _, gp := range g.Prefixes {
			inside := strings.HasPrefix(prefix, gp) && !strings.HasPrefix(prefix, SystemPrefix)
			if inside || (strings.HasPrefix(gp, prefix) && !strings.HasPrefix(gp, SystemPrefix)) {
				return true
			}
		}
	}
	return false
}

// keyRole reports whether a grant of held satisfies want for keys.
func keyRole(held, want Role) bool {
	return held == want || (held == Writer && want == Reader)
}

// MayConfig reports whether the principal holds role for the config.
func (p Principal) MayConfig(role Role, config string) bool {
	if p.IsAdmin() {
		return true
	}
	for _, g := range p.Grants {
		if g.Role == role && slices.ContainsFunc(g.Configs, func(pattern string) bool { return Match(pattern, config) }) {
			return true
		}
	}
	return false
}

// MayIdentity reports whether the principal's instance grants cover the
// workload identity (an admin's always do).
func (p Principal) MayIdentity(identity string) bool {
	return p.IsAdmin() || p.InstanceCredential(identity)
}

// InstanceCredential reports whether an instance grant of the principal
// names the identity: a registration it makes for that identity is made
// with an instance credential. An admin's is not.
func (p Principal) InstanceCredential(identity string) bool {
	for _, g := range p.Grants {
		if g.Role == Instance && slices.ContainsFunc(g.Identities, func(pattern string) bool { return Match(pattern, identity) }) {
			return true
		}
	}
	return false
}

// SoleIdentity is the one workload identity the principal's instance
// grants name, when they name exactly one and no pattern.
func (p Principal) SoleIdentity() (string, bool) {
	var only string
	for _, g := range p.Grants {
		if g.Role != Instance {
			continue
		}
		for _, id := range g.Identities {
			if strings.HasSuffix(id, "*") || (only != "" && only != id) {
				return "", false
			}
			only = id
		}
	}
	return only, only != ""
}

// Match reports whether a name matches a pattern: "*" matches everything,
// a pattern ending in "*" every name with what comes before it as a
// prefix, and any other pattern only itself.
func Match(pattern, name string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(name, prefix)
	}
	return pattern == name
}

type principalKey struct{}

// NewContext returns ctx carrying the principal, and records it in the
// slot ctx carries, if any (WithSlot).
func NewContext(ctx context.Context, p Principal) context.Context {
	if s, ok := ctx.Value(slotKey{}).(*slot); ok {
		s.mu.Lock()
		s.p, s.set = p, true
		s.mu.Unlock()
	}
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal the context carries: the one
// NewContext put on it, else the one recorded in its slot, so that code
// wrapped around the authentication (a log of refused calls) learns who
// was refused.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	if p, ok := ctx.Value(principalKey{}).(Principal); ok {
		return p, true
	}
	if s, ok := ctx.Value(slotKey{}).(*slot); ok {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.p, s.set
	}
	return Principal{}, false
}

type slotKey struct{}

// slot is where a call's principal is recorded for code that holds the
// context from before the authentication.
type slot struct {
	mu  sync.Mutex
	p   Principal
	set bool
}

// WithSlot returns ctx with an empty slot for the principal that
// NewContext later records: PrincipalFrom on the returned context (or one
// derived from it) then finds the principal even outside the call that
// authenticated it.
func WithSlot(ctx context.Context) context.Context {
	return context.WithValue(ctx, slotKey{}, &slot{})
}

type certsKey struct{}

// WithPeerCertificates returns ctx carrying the verified certificate
// chains of the connection's client (the HTTP server has them, the Connect
// interceptor does not).
func WithPeerCertificates(ctx context.Context, chains [][]*x509.Certificate) context.Context {
	return context.WithValue(ctx, certsKey{}, chains)
}

// PeerCertificates returns the verified client certificate chains ctx
// carries.
func PeerCertificates(ctx context.Context) [][]*x509.Certificate {
	chains, _ := ctx.Value(certsKey{}).([][]*x509.Certificate)
	return chains
}
