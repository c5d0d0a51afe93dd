// Package release keeps releases: immutable generations of a config, each
// naming the canonical digest of its content and the validator that passed
// it. Records live in the key space where package records lays them out
// (the head, one key per release, and an index of configs), so the watch
// hub carries them like any other change; a release is written once and
// never updated (its rollout state moves forward in records of its own).
//
// Create assigns the next generation with a transaction that compares the
// head's revision, so concurrent creators of one config get distinct,
// gap-free generations.
package release

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pawlcfg/pawl/sdk/appversion"
	"github.com/pawlcfg/pawl/sdk/canonical"
	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/records"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/validators/host"
)

// State is a release's rollout state.
type State string

// StateCandidate is the state of every new release.
const StateCandidate State = "CANDIDATE"

var (
	// ErrInvalid means the release request is malformed.
	ErrInvalid = errors.New("release: invalid request")
	// ErrRejected means the validator found the content invalid; the
	// *RejectedError carries the violations.
	ErrRejected = errors.New("release: content rejected by its validator")
	// ErrNoTargets means the spec's selector matches no registered
	// instance: the release could never be promoted, so it is not created.
	ErrNoTargets = errors.New("release: the selector matches no registered instance")
	// ErrNotFound means no such release.
	ErrNotFound = errors.New("release: not found")
	// ErrContended means too many concurrent creators raced for the config.
	ErrContended = errors.New("release: lost the race for the next generation too often")
)

// RejectedError carries a validator's violations. It matches ErrRejected.
type RejectedError struct {
	// Digest is the validator that rejected.
	Digest string
	// Violations are what it found.
	Violations []host.Violation
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("release: validator %s rejected the content with %d violations", e.Digest, len(e.Violations))
}

// Is reports whether target is ErrRejected.
func (e *RejectedError) Is(target error) bool { return target == ErrRejected }

// Spec is what a caller asks to release.
type Spec struct {
	// ConfigID names the config: lower-case letters, digits, '.', '_' and
	// '-', 1 to 128 characters.
	ConfigID string `json:"config_id"`
	// Content and MediaType are the config.
	Content   []byte `json:"content"`
	MediaType string `json:"media_type"`
	// ValidatorDigest names the validator that must pass the content.
	ValidatorDigest string `json:"validator_digest"`
	// ValidatorParams are its parameters (JSON), if any.
	ValidatorParams json.RawMessage `json:"validator_params,omitempty"`
	// Selector chooses the target instances (labels that must match).
	Selector map[string]string `json:"selector,omitempty"`
	// Dependencies are versions of other configs this one needs.
	Dependencies map[string]int64 `json:"dependencies,omitempty"`
	// SecretRefs name secret versions; never secret values.
	SecretRefs []string `json:"secret_refs,omitempty"`
	// MinAppVersion is the oldest app version that may apply it.
	MinAppVersion string `json:"min_app_version,omitempty"`
	// Stages is the rollout plan, in order.
	Stages []Stage `json:"stages"`
	// HealthWindow is how long an instance must stay healthy before its ACK
	// counts.
	HealthWindow time.Duration `json:"health_window"`
	// Deadline bounds the whole rollout.
	Deadline time.Duration `json:"deadline"`
	// MinCoverage is the share of the unretired frozen members, in [0, 1],
	// that must have reported what they run before Promote; nil is 1.
	MinCoverage *float64 `json:"min_coverage,omitempty"`
	// RequireInstanceCredential freezes, and counts, only instances whose
	// registration was made with an instance credential.
	RequireInstanceCredential bool `json:"require_instance_credential,omitempty"`
}

// RequiredCoverage is the share of members that must have reported what
// they run before Promote: MinCoverage, or 1 (every member) when unset.
func (s Spec) RequiredCoverage() float64 {
	if s.MinCoverage == nil {
		return 1
	}
	return *s.MinCoverage
}

// Stage is one step of the rollout plan.
type Stage struct {
	// Name is the stage's name, e.g. "canary" or "zone-a".
	Name string `json:"name"`
	// Selector narrows the release's targets for this stage.
	Selector map[string]string `json:"selector,omitempty"`
	// Policy is its ACK policy.
	Policy quorum.Policy `json:"policy"`
	// Shadow makes the stage's instances download and validate the release
	// and report VALIDATED, without applying it while no stage that
	// applies has reached them; the stage passes on VALIDATED. It takes
	// nobody away from later stages: they assign its instances the release
	// to apply as if it were not there (see Layout).
	Shadow bool `json:"shadow,omitempty"`
	// Budget, when set, bounds the health its instances report with
	// HEALTHY_ACKED: a report outside it counts as a rejection.
	Budget *Budget `json:"budget,omitempty"`
}

// Budget is a stage's health budget, checked against what an instance
// measured over its health window. A nil limit is no limit.
type Budget struct {
	// MaxErrorRate is the largest error rate allowed, in [0, 1].
	MaxErrorRate *float64 `json:"max_error_rate,omitempty"`
	// MaxP99 is the largest p99 latency allowed; 0 is no limit.
	MaxP99 time.Duration `json:"max_p99,omitempty"`
}

// Check says how a measurement breaks the budget, or "" if it does not.
func (b *Budget) Check(errorRate float64, p99 time.Duration) string {
	if b == nil {
		return ""
	}
	var over []string
	if b.MaxErrorRate != nil && errorRate > *b.MaxErrorRate {
		over = append(over, fmt.Sprintf("error rate %.4g is over the budget of %.4g", errorRate, *b.MaxErrorRate))
	}
	if b.MaxP99 > 0 && p99 > b.MaxP99 {
		over = append(over, fmt.Sprintf("p99 latency %s is over the budget of %s", p99, b.MaxP99))
	}
	return strings.Join(over, "; ")
}

// String renders the budget as the CLI writes it.
func (b *Budget) String() string {
	var parts []string
	if b.MaxErrorRate != nil {
		parts = append(parts, fmt.Sprintf("max-error-rate=%g", *b.MaxErrorRate))
	}
	if b.MaxP99 > 0 {
		parts = append(parts, fmt.Sprintf("max-p99=%s", b.MaxP99))
	}
	return strings.Join(parts, ",")
}

// Release is an immutable generation of a config.
type Release struct {
	Spec
	// Generation is the config's generation, from 1.
	Generation int64 `json:"generation"`
	// Predecessor is the previous generation, 0 for the first.
	Predecessor int64 `json:"predecessor"`
	// ContentDigest is the canonical content digest (docs/CANONICAL.md).
	ContentDigest string `json:"content_digest"`
	// Membership is the snapshot of matching instances frozen at creation.
	// Its members are shared with every release that froze an equal one
	// (see MemberIndex), so, like everything of a release, they must not
	// be modified.
	Membership []*quorum.Member `json:"membership"`
	// Ineligible are the matching live instances left out of the
	// membership because their app version is below MinAppVersion: they
	// are never assigned the release and never counted.
	Ineligible []quorum.Member `json:"ineligible,omitempty"`
	// MembershipEpoch is the registry's membership epoch at the freeze:
	// every instance that registered later has a higher one.
	MembershipEpoch int64 `json:"membership_epoch"`
	// State is CANDIDATE at creation.
	State State `json:"state"`
	// CreatedAt and CreatedBy say when and by whom.
	CreatedAt time.Time `json:"created_at"`
	CreatedBy string    `json:"created_by"`
	// SecretPaths locate the content's secret values, as JSON Pointers:
	// what the validator marked secret when the release was created.
	// ACK reasons are stored with those values redacted.
	SecretPaths []string `json:"secret_paths,omitempty"`
	// Revision is the store revision of the record (not stored in it).
	Revision int64 `json:"-"`
	// byID indexes Membership by identity (see MemberIndex).
	byID memberIndex
}

// RedactSecrets returns text with the release's secret values (its
// SecretPaths in its content) replaced by host.Redacted.
func (r Release) RedactSecrets(text string) string {
	if len(r.SecretPaths) == 0 || text == "" {
		return text
	}
	return host.Redact(text, host.SecretValues(r.Content, r.SecretPaths))
}

// ValidateFunc runs a stored validator on content.
type ValidateFunc func(ctx context.Context, digest string, in host.Input) (host.Result, error)

// MembersFunc returns the live registered instances matching a selector, to
// freeze in the release, and the membership epoch they were read at.
type MembersFunc func(ctx context.Context, selector map[string]string) ([]quorum.Member, int64, error)

// Releases creates and reads releases in a store.
type Releases struct {
	store     store.Store
	validate  ValidateFunc
	members   MembersFunc
	now       func() time.Time
	cacheSize int
	cache     *cache
}

// New returns a Releases over st that validates with validate and freezes
// the membership members returns.
func New(st store.Store, validate ValidateFunc, members MembersFunc, opts ...Option) *Releases {
	r := &Releases{store: st, validate: validate, members: members, now: time.Now, cacheSize: DefaultCacheSize}
	for _, opt := range opts {
		opt(r)
	}
	r.cache = newCache(max(r.cacheSize, 1))
	return r
}

// WithCacheSize sets how many decoded releases are kept (default
// DefaultCacheSize).
func WithCacheSize(n int) Option { return func(r *Releases) { r.cacheSize = n } }

// Option configures New.
type Option func(*Releases)

// WithClock replaces time.Now (the creation time that deadlines count
// from), for tests that move time by hand.
func WithClock(now func() time.Time) Option { return func(r *Releases) { r.now = now } }

var (
	configIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)
	// secretRefPattern is SCHEME://PATH#VERSION: the secret store, the
	// secret's name or ARN in it, and the version the release pins, as in
	// vault://secret/data/payments/db#7 or
	// aws-sm://arn:aws:secretsmanager:eu-west-1:123456789012:secret:db#AWSCURRENT.
	// A literal password has no scheme, and a URL with credentials in it
	// (postgres://admin:hunter2@db/x) holds an "@", which no path may.
	secretRefPattern = regexp.MustCompile(`^[a-z][a-z0-9+.-]{1,31}://[A-Za-z0-9._/:=+,-]{1,512}#[A-Za-z0-9._-]{1,64}$`)
)

// maxCreateAttempts bounds retries when concurrent creators race for a
// config's head; each retry means another creator succeeded.
const maxCreateAttempts = 16

// Create validates spec, runs its validator on the server (a rejected
// config never becomes a release), computes the content digest, freezes the
// membership and stores the next generation as a CANDIDATE. A plan with a
// stage that would assign the release to no member of a non-empty
// membership is refused with ErrInvalid naming the stage (see Layout).
func (r *Releases) Create(ctx context.Context, spec Spec, actor string) (Release, error) {
	if err := checkSpec(spec); err != nil {
		return Release{}, err
	}
	digest, err := canonical.Digest(spec.MediaType, spec.Content)
	if err != nil {
		return Release{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	res, err := r.validate(ctx, spec.ValidatorDigest, host.Input{
		Config: spec.Content, MediaType: spec.MediaType, Name: spec.ConfigID, Params: spec.ValidatorParams,
	})
	if err != nil {
		return Release{}, fmt.Errorf("release: run validator %s: %w", spec.ValidatorDigest, err)
	}
	if !res.Valid {
		// The violations reach the caller and the audit log: the secret
		// values the validator marked must not.
		secrets := host.SecretValues(spec.Content, res.Secrets)
		return Release{}, &RejectedError{Digest: spec.ValidatorDigest, Violations: host.RedactViolations(res.Violations, secrets)}
	}
	if err := r.checkDependencies(ctx, spec); err != nil {
		return Release{}, err
	}
	members, epoch, err := r.members(ctx, spec.Selector)
	if err != nil {
		return Release{}, fmt.Errorf("release: freeze membership: %w", err)
	}
	if len(spec.Selector) > 0 && len(members) == 0 {
		return Release{}, fmt.Errorf("%w: selector %s (membership epoch %d); a release no instance is part of could only fail at promote: "+
			"check the labels (pawl instances) or the --selector", ErrNoTargets, selectorString(spec.Selector), epoch)
	}
	if spec.RequireInstanceCredential {
		members = slices.DeleteFunc(members, func(m quorum.Member) bool { return !m.InstanceCredential })
	}
	members, ineligible := eligible(members, spec.MinAppVersion)
	rel := Release{
		Spec: spec, ContentDigest: digest, Membership: frozen(members), Ineligible: ineligible, MembershipEpoch: epoch, State: StateCandidate,
		CreatedAt: r.now().UTC(), CreatedBy: actor, SecretPaths: res.Secrets,
	}
	rel.compact()
	if err := checkLayout(rel); err != nil {
		return Release{}, err
	}
	for range maxCreateAttempts {
		head, headRev, err := r.head(ctx, spec.ConfigID)
		if err != nil {
			return Release{}, err
		}
		rel.Generation, rel.Predecessor = head+1, head
		record, err := records.Encode(rel)
		if err != nil {
			return Release{}, err
		}
		puts := []store.Put{
			{Key: records.Release(spec.ConfigID, rel.Generation), Value: record},
			{Key: records.Head(spec.ConfigID), Value: []byte(strconv.FormatInt(rel.Generation, 10))},
		}
		if head == 0 {
			puts = append(puts, store.Put{Key: records.Index(spec.ConfigID)})
		}
		result, err := r.store.Txn(ctx, store.Txn{
			Compares: []store.Compare{{Key: records.Head(spec.ConfigID), ModRevision: headRev}},
			Puts:     puts,
		})
		if errors.Is(err, store.ErrRevisionMismatch) {
			continue // another release of this config won; take the next generation
		}
		if err != nil {
			return Release{}, fmt.Errorf("release: store: %w", err)
		}
		rel.Revision = result.Revision - int64(len(puts)) + 1
		return rel, nil
	}
	return Release{}, ErrContended
}

// CheckConfigID refuses a malformed config ID with ErrInvalid.
func CheckConfigID(config string) error {
	if !configIDPattern.MatchString(config) {
		return fmt.Errorf("%w: config ID %q must be 1-128 of a-z 0-9 . _ - and start with a letter or digit", ErrInvalid, config)
	}
	return nil
}

// HeadAt returns the config's newest generation as of a store revision (0:
// current); 0 before its first release.
func (r *Releases) HeadAt(ctx context.Context, config string, revision int64) (int64, error) {
	gen, _, err := r.headAt(ctx, config, revision)
	return gen, err
}

// head returns the config's latest generation and the head key's revision
// (0, 0 before the first release).
func (r *Releases) head(ctx context.Context, config string) (int64, int64, error) {
	return r.headAt(ctx, config, 0)
}

func (r *Releases) headAt(ctx context.Context, config string, revision int64) (int64, int64, error) {
	kv, _, err := r.store.Get(ctx, records.Head(config), revision)
	if errors.Is(err, store.ErrNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("release: read head of %s: %w", config, err)
	}
	gen, err := strconv.ParseInt(string(kv.Value), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("release: head of %s is %q: %w", config, kv.Value, err)
	}
	return gen, kv.ModRevision, nil
}

// Configs lists every config that has a release, in ID order.
func (r *Releases) Configs(ctx context.Context) ([]string, error) {
	var out []string
	err := store.Each(ctx, r.store, records.IndexPrefix, func(kv store.KeyValue) error {
		out = append(out, strings.TrimPrefix(kv.Key, records.IndexPrefix))
		return nil
	})
	return out, err
}

// Latest returns a config's newest release (generation 0 when it has none).
func (r *Releases) Latest(ctx context.Context, config string) (Release, error) {
	head, _, err := r.head(ctx, config)
	if err != nil || head == 0 {
		return Release{}, err
	}
	return r.Get(ctx, config, head)
}

// Get reads one release, decoding it only the first time: releases are
// immutable, and the value returned is shared (its slices and maps too), so
// callers must not modify it.
func (r *Releases) Get(ctx context.Context, config string, gen int64) (Release, error) {
	if !configIDPattern.MatchString(config) || gen <= 0 {
		return Release{}, fmt.Errorf("%w: config %q generation %d", ErrInvalid, config, gen)
	}
	return r.get(ctx, config, gen)
}

// Newest reads a config's newest release; NotFound when it has none.
func (r *Releases) Newest(ctx context.Context, config string) (Release, error) {
	if err := CheckConfigID(config); err != nil {
		return Release{}, err
	}
	head, err := r.HeadAt(ctx, config, 0)
	if err != nil {
		return Release{}, err
	}
	if head == 0 {
		return Release{}, fmt.Errorf("%w: config %s has no release", ErrNotFound, config)
	}
	return r.get(ctx, config, head)
}

func (r *Releases) get(ctx context.Context, config string, gen int64) (Release, error) {
	if rel, ok := r.cache.get(config, gen); ok {
		return rel, nil
	}
	kv, _, err := r.store.Get(ctx, records.Release(config, gen), 0)
	if errors.Is(err, store.ErrNotFound) {
		return Release{}, fmt.Errorf("%w: config %s has no generation %d", ErrNotFound, config, gen)
	}
	if err != nil {
		return Release{}, err
	}
	rel, err := decode(kv)
	if err != nil {
		return Release{}, err
	}
	r.cache.put(rel)
	return rel, nil
}

// List reads a config's releases in generation order.
func (r *Releases) List(ctx context.Context, config string) ([]Release, error) {
	if !configIDPattern.MatchString(config) {
		return nil, fmt.Errorf("%w: config %q", ErrInvalid, config)
	}
	var out []Release
	err := store.Each(ctx, r.store, records.Releases(config), func(kv store.KeyValue) error {
		rel, err := decode(kv)
		if err == nil {
			out = append(out, rel)
		}
		return err
	})
	return out, err
}

// ListPage reads up to limit of a config's releases in generation order,
// after generation after (0: from the first), at revision (0: now), and
// returns the revision read, to read the next pages at, and whether more
// follow. Releases come from the cache when it has them.
func (r *Releases) ListPage(ctx context.Context, config string, revision, after int64, limit int) ([]Release, int64, bool, error) {
	if !configIDPattern.MatchString(config) {
		return nil, 0, false, fmt.Errorf("%w: config %q", ErrInvalid, config)
	}
	start := ""
	if after > 0 {
		start = records.Release(config, after)
	}
	page, err := r.store.List(ctx, records.Releases(config), revision, start, limit)
	if err != nil {
		return nil, 0, false, err
	}
	out := make([]Release, 0, len(page.KVs))
	for _, kv := range page.KVs {
		gen, err := records.ParseGeneration(strings.TrimPrefix(kv.Key, records.Releases(config)))
		if err != nil {
			return nil, 0, false, err
		}
		rel, ok := r.cache.get(config, gen)
		if !ok {
			if rel, err = decode(kv); err != nil {
				return nil, 0, false, err
			}
			r.cache.put(rel)
		}
		out = append(out, rel)
	}
	return out, page.Revision, page.More, nil
}

func decode(kv store.KeyValue) (Release, error) {
	var rel Release
	if err := records.Decode(kv, &rel); err != nil {
		return Release{}, err
	}
	rel.Revision = kv.ModRevision
	rel.compact()
	return rel, nil
}

// Bounds of a release's spec besides the request's size: what a stage
// plan and a validator's parameters need, far below what a request body
// may carry, so that a release stays cheap to store, judge and send to
// every instance.
const (
	// MaxStages is how many stages a release's plan may have.
	MaxStages = 32
	// MaxValidatorParamsBytes is how large a release's validator
	// parameters (JSON) may be.
	MaxValidatorParamsBytes = 64 << 10
)

func checkSpec(s Spec) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	switch {
	case !configIDPattern.MatchString(s.ConfigID):
		return bad("config ID %q must be 1-128 of a-z 0-9 . _ - and start with a letter or digit", s.ConfigID)
	case s.ValidatorDigest == "":
		return bad("a validator digest is required: every release names the validator that passed it")
	case len(s.Stages) == 0:
		return bad("the stage plan is empty")
	case len(s.Stages) > MaxStages:
		return bad("the stage plan has %d stages; the limit is %d", len(s.Stages), MaxStages)
	case len(s.ValidatorParams) > MaxValidatorParamsBytes:
		return bad("validator_params is %d bytes; the limit is %d bytes", len(s.ValidatorParams), MaxValidatorParamsBytes)
	case s.HealthWindow < 0 || s.Deadline <= 0:
		return bad("the health window must be 0 or more and the deadline positive")
	case s.MinCoverage != nil && !(*s.MinCoverage >= 0 && *s.MinCoverage <= 1):
		return bad("min coverage %v must be in [0, 1]: the share of members that must report what they run", *s.MinCoverage)
	}
	if s.MinAppVersion != "" {
		if _, err := appversion.Parse(s.MinAppVersion); err != nil {
			return bad("min app version: %v; use dotted numbers such as 2.1.0", err)
		}
	}
	for config, gen := range s.Dependencies {
		if !configIDPattern.MatchString(config) || config == s.ConfigID || gen <= 0 {
			return bad("dependency %s@%d: name another config and a generation of 1 or more", config, gen)
		}
	}
	for i, ref := range s.SecretRefs {
		if !secretRefPattern.MatchString(ref) {
			return bad("secret reference %d is not a reference: a secret reference is SCHEME://PATH#VERSION, such as "+
				"vault://secret/data/payments/db#7 (a secret's version in a secret store, never a value; a path holds no \"@\", "+
				"spaces or punctuation other than . _ / : = + , -)", i)
		}
	}
	names := map[string]bool{}
	for i, st := range s.Stages {
		if st.Name == "" || names[st.Name] {
			return bad("stage %d needs a unique name", i)
		}
		names[st.Name] = true
		if err := st.Policy.Validate(); err != nil {
			return bad("stage %q: %v", st.Name, err)
		}
		if b := st.Budget; b != nil {
			switch {
			case b.MaxErrorRate == nil && b.MaxP99 <= 0:
				return bad("stage %q: a health budget needs a max error rate or a max p99 latency", st.Name)
			case b.MaxErrorRate != nil && !(*b.MaxErrorRate >= 0 && *b.MaxErrorRate <= 1):
				return bad("stage %q: max error rate %v must be in [0, 1]", st.Name, *b.MaxErrorRate)
			case b.MaxP99 < 0:
				return bad("stage %q: max p99 latency %s is negative", st.Name, b.MaxP99)
			case st.Shadow:
				return bad("stage %q: a shadow stage never applies the release, so it has no health to budget", st.Name)
			}
		}
	}
	return nil
}

// checkDependencies refuses a release that needs a generation of another
// config that does not exist.
func (r *Releases) checkDependencies(ctx context.Context, spec Spec) error {
	for config, gen := range spec.Dependencies {
		if _, err := r.Get(ctx, config, gen); errors.Is(err, ErrNotFound) {
			return fmt.Errorf("%w: dependency %s@%d: config %s has no generation %d", ErrInvalid, config, gen, config, gen)
		} else if err != nil {
			return err
		}
	}
	return nil
}

// eligible splits members into those whose app version is at least min
// and those below it (all are eligible when min is empty).
func eligible(members []quorum.Member, min string) (in, out []quorum.Member) {
	if min == "" {
		return members, nil
	}
	floor, _ := appversion.Parse(min) // checked by checkSpec
	for _, m := range members {
		if appversion.AtLeast(m.AppVersion, floor) {
			in = append(in, m)
		} else {
			out = append(out, m)
		}
	}
	return in, out
}
