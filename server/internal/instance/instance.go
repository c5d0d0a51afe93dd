// Package instance keeps the registry of running SDK clients under
// store.SystemPrefix + "instances/", one record per workload identity, with
// a lease renewed by heartbeats. Expiry is judged when the registry is read
// (no timer deletes anything), so an instance that stopped simply stops
// being live, and its record stays for audit.
package instance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/store"
)

var (
	// ErrInvalid means a malformed instance.
	ErrInvalid = errors.New("instance: invalid")
	// ErrNotFound means the workload identity never registered.
	ErrNotFound = errors.New("instance: not registered")
	// ErrStaleBoot means a heartbeat came from an older boot than the one
	// registered: that process restarted, and its old self does not count.
	ErrStaleBoot = errors.New("instance: heartbeat from a previous boot")
)

// Instance is a registered SDK client.
type Instance struct {
	WorkloadIdentity string            `json:"workload_identity"`
	BootID           string            `json:"boot_id"`
	Zone             string            `json:"zone"`
	Role             string            `json:"role"`
	TrafficWeight    float64           `json:"traffic_weight"`
	AppVersion       string            `json:"app_version"`
	Labels           map[string]string `json:"labels,omitempty"`
}

// Record is an instance with its lease.
type Record struct {
	Instance
	RegisteredAt   time.Time `json:"registered_at"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
}

// Live reports whether the lease is live at now.
func (r Record) Live(now time.Time) bool { return now.Before(r.LeaseExpiresAt) }

// Registry reads and writes instance records.
type Registry struct {
	store store.Store
	lease time.Duration
	now   func() time.Time
}

// New returns a registry whose leases last lease.
func New(st store.Store, lease time.Duration, opts ...Option) *Registry {
	r := &Registry{store: st, lease: lease, now: time.Now}
	for _, opt := range opts {
		opt(r)
	}
	return r
}

// Option configures New.
type Option func(*Registry)

// WithClock replaces time.Now, for tests that move time by hand.
func WithClock(now func() time.Time) Option { return func(r *Registry) { r.now = now } }

// Now is the registry's clock: what leases are judged against.
func (r *Registry) Now() time.Time { return r.now() }

// Lease is how long a registration or heartbeat keeps an instance live.
func (r *Registry) Lease() time.Duration { return r.lease }

var identityPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,254}$`)

func key(identity string) string { return store.SystemPrefix + "instances/" + identity }

// Register records in (replacing an earlier boot's record) and starts its
// lease.
func (r *Registry) Register(ctx context.Context, in Instance) (Record, error) {
	switch {
	case !identityPattern.MatchString(in.WorkloadIdentity):
		return Record{}, fmt.Errorf("%w: workload identity %q must be 1-255 of A-Z a-z 0-9 . _ : @ / -", ErrInvalid, in.WorkloadIdentity)
	case in.BootID == "":
		return Record{}, fmt.Errorf("%w: a boot ID is required (a new one on every process start)", ErrInvalid)
	case in.TrafficWeight < 0:
		return Record{}, fmt.Errorf("%w: traffic weight %v is negative", ErrInvalid, in.TrafficWeight)
	}
	now := r.now().UTC()
	rec := Record{Instance: in, RegisteredAt: now, LeaseExpiresAt: now.Add(r.lease)}
	return rec, r.write(ctx, rec, nil)
}

// Heartbeat renews the lease of the instance's current boot.
func (r *Registry) Heartbeat(ctx context.Context, identity, bootID string) (Record, error) {
	rec, rev, err := r.read(ctx, identity)
	if err != nil {
		return Record{}, err
	}
	if rec.BootID != bootID {
		return Record{}, fmt.Errorf("%w: %s is registered with boot %s, not %s; register again", ErrStaleBoot, identity, rec.BootID, bootID)
	}
	rec.LeaseExpiresAt = r.now().UTC().Add(r.lease)
	return rec, r.write(ctx, rec, &rev)
}

// Get returns one instance's record.
func (r *Registry) Get(ctx context.Context, identity string) (Record, error) {
	rec, _, err := r.read(ctx, identity)
	return rec, err
}

// List returns every record, live or not, by workload identity.
func (r *Registry) List(ctx context.Context) ([]Record, error) {
	var out []Record
	after := ""
	for {
		page, err := r.store.List(ctx, store.SystemPrefix+"instances/", 0, after, 1000)
		if err != nil {
			return nil, err
		}
		for _, kv := range page.KVs {
			var rec Record
			if err := json.Unmarshal(kv.Value, &rec); err != nil {
				return nil, fmt.Errorf("instance: record %s: %w", kv.Key, err)
			}
			out = append(out, rec)
		}
		if !page.More {
			return out, nil
		}
		after = page.KVs[len(page.KVs)-1].Key
	}
}

// Members returns the live instances whose labels include every selector
// label, as quorum members: the membership a release freezes.
func (r *Registry) Members(ctx context.Context, selector map[string]string) ([]quorum.Member, error) {
	recs, err := r.List(ctx)
	if err != nil {
		return nil, err
	}
	now := r.now()
	var out []quorum.Member
	for _, rec := range recs {
		if !rec.Live(now) || !Matches(rec.Labels, selector) {
			continue
		}
		out = append(out, quorum.Member{ID: rec.WorkloadIdentity, Zone: rec.Zone, Role: rec.Role, Weight: rec.TrafficWeight, Labels: rec.Labels})
	}
	return out, nil
}

// Matches reports whether labels include every selector label.
func Matches(labels, selector map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func (r *Registry) read(ctx context.Context, identity string) (Record, int64, error) {
	kv, _, err := r.store.Get(ctx, key(identity), 0)
	if errors.Is(err, store.ErrNotFound) {
		return Record{}, 0, fmt.Errorf("%w: %s; register first", ErrNotFound, identity)
	}
	if err != nil {
		return Record{}, 0, err
	}
	var rec Record
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		return Record{}, 0, fmt.Errorf("instance: record of %s: %w", identity, err)
	}
	return rec, kv.ModRevision, nil
}

// write stores rec; with expect, only if the record is still at that
// revision (a concurrent re-registration wins over a heartbeat).
func (r *Registry) write(ctx context.Context, rec Record, expect *int64) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("instance: encode: %w", err)
	}
	if _, err := r.store.Put(ctx, store.Put{Key: key(rec.WorkloadIdentity), Value: b, ExpectModRevision: expect}); err != nil {
		if errors.Is(err, store.ErrRevisionMismatch) {
			return fmt.Errorf("%w: %s re-registered during the heartbeat", ErrStaleBoot, rec.WorkloadIdentity)
		}
		return fmt.Errorf("instance: store: %w", err)
	}
	return nil
}
