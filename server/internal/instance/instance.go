// Package instance keeps the registry of running SDK clients, one
// registration per workload identity, with a lease renewed by heartbeats.
// Expiry is judged when the registry is read (no timer deletes anything), so
// an instance that stopped simply stops being live, and its record stays for
// audit.
//
// Layout, under store.SystemPrefix:
//
//	instances/<identity>   the registration: written only by Register
//	leases/<identity>      the lease: its boot and expiry, renewed by Heartbeat
//
// Keeping the lease apart means the registration's store revision changes
// only when the instance registers: that revision is the registration's
// membership epoch. A release freezes the highest epoch it saw; an ACK names
// the epoch of the registration it comes from, and one from an older
// registration does not count.
package instance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/records"
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
	RegisteredAt time.Time `json:"registered_at"`
	// LeaseExpiresAt comes from the lease key.
	LeaseExpiresAt time.Time `json:"-"`
	// MembershipEpoch is the store revision of the registration.
	MembershipEpoch int64 `json:"-"`
}

// lease is the record under leases/.
type lease struct {
	BootID    string    `json:"boot_id"`
	ExpiresAt time.Time `json:"expires_at"`
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

const (
	registrationPrefix = records.InstancesPrefix
	leasePrefix        = store.SystemPrefix + "leases/"
)

func key(identity string) string      { return records.Instance(identity) }
func leaseKey(identity string) string { return leasePrefix + identity }

// Register records in (replacing an earlier boot's registration), starts
// its lease, and gives it a new membership epoch.
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
	reg, err := json.Marshal(rec)
	if err != nil {
		return Record{}, fmt.Errorf("instance: encode: %w", err)
	}
	ls, err := json.Marshal(lease{BootID: in.BootID, ExpiresAt: rec.LeaseExpiresAt})
	if err != nil {
		return Record{}, fmt.Errorf("instance: encode lease: %w", err)
	}
	res, err := r.store.Txn(ctx, store.Txn{Puts: []store.Put{
		{Key: key(in.WorkloadIdentity), Value: reg},
		{Key: leaseKey(in.WorkloadIdentity), Value: ls},
	}})
	if err != nil {
		return Record{}, fmt.Errorf("instance: store: %w", err)
	}
	rec.MembershipEpoch = res.Revision - 1 // the registration is the first of the two puts
	return rec, nil
}

// Heartbeat renews the lease of the instance's current boot.
func (r *Registry) Heartbeat(ctx context.Context, identity, bootID string) (Record, error) {
	rec, err := r.Get(ctx, identity)
	if err != nil {
		return Record{}, err
	}
	if rec.BootID != bootID {
		return Record{}, fmt.Errorf("%w: %s is registered with boot %s, not %s; register again", ErrStaleBoot, identity, rec.BootID, bootID)
	}
	rec.LeaseExpiresAt = r.now().UTC().Add(r.lease)
	ls, err := json.Marshal(lease{BootID: bootID, ExpiresAt: rec.LeaseExpiresAt})
	if err != nil {
		return Record{}, fmt.Errorf("instance: encode lease: %w", err)
	}
	// Only while the registration is the one read: a concurrent
	// re-registration wins over a heartbeat.
	_, err = r.store.Txn(ctx, store.Txn{
		Compares: []store.Compare{{Key: key(identity), ModRevision: rec.MembershipEpoch}},
		Puts:     []store.Put{{Key: leaseKey(identity), Value: ls}},
	})
	if errors.Is(err, store.ErrRevisionMismatch) {
		return Record{}, fmt.Errorf("%w: %s re-registered during the heartbeat", ErrStaleBoot, identity)
	}
	if err != nil {
		return Record{}, fmt.Errorf("instance: store: %w", err)
	}
	return rec, nil
}

// RegistrationAt returns one instance's registration (without its lease)
// as of a store revision (0: current). It fails with ErrNotFound when the
// instance had not registered by then.
func (r *Registry) RegistrationAt(ctx context.Context, identity string, revision int64) (Record, error) {
	kv, _, err := r.store.Get(ctx, key(identity), revision)
	if errors.Is(err, store.ErrNotFound) {
		return Record{}, fmt.Errorf("%w: %s; register first", ErrNotFound, identity)
	}
	if err != nil {
		return Record{}, err
	}
	return decode(kv)
}

// RegistrationKey is the key of an instance's registration: a writer that
// decided on it conditions its write on it.
func RegistrationKey(identity string) string { return key(identity) }

// Get returns one instance's record.
func (r *Registry) Get(ctx context.Context, identity string) (Record, error) {
	kv, _, err := r.store.Get(ctx, key(identity), 0)
	if errors.Is(err, store.ErrNotFound) {
		return Record{}, fmt.Errorf("%w: %s; register first", ErrNotFound, identity)
	}
	if err != nil {
		return Record{}, err
	}
	rec, err := decode(kv)
	if err != nil {
		return Record{}, err
	}
	lkv, _, err := r.store.Get(ctx, leaseKey(identity), 0)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return rec, nil // no lease: not live
	case err != nil:
		return Record{}, err
	}
	l, err := decodeLease(lkv)
	if err != nil {
		return Record{}, err
	}
	if l.BootID == rec.BootID {
		rec.LeaseExpiresAt = l.ExpiresAt
	}
	return rec, nil
}

// List returns every record, live or not, by workload identity.
func (r *Registry) List(ctx context.Context) ([]Record, error) {
	recs, _, err := r.ListAt(ctx, 0)
	return recs, err
}

// ListAt returns every record, live or not, by workload identity, as of
// one store revision (0: the current one), and that revision: however many
// pages the registrations and leases take, they are one snapshot.
func (r *Registry) ListAt(ctx context.Context, revision int64) ([]Record, int64, error) {
	var out []Record
	rev, err := store.EachAt(ctx, r.store, registrationPrefix, revision, func(kv store.KeyValue) error {
		rec, err := decode(kv)
		out = append(out, rec)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	leases := map[string]lease{}
	_, err = store.EachAt(ctx, r.store, leasePrefix, rev, func(kv store.KeyValue) error {
		l, err := decodeLease(kv)
		leases[strings.TrimPrefix(kv.Key, leasePrefix)] = l
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	for i, rec := range out {
		if l, ok := leases[rec.WorkloadIdentity]; ok && l.BootID == rec.BootID {
			out[i].LeaseExpiresAt = l.ExpiresAt
		}
	}
	return out, rev, nil
}

// Registrations returns every registration (without its lease) as of
// revision (0: current), by identity: the boot and membership epoch that
// an instance's ACKs must come from to count.
func (r *Registry) Registrations(ctx context.Context, revision int64) (map[string]Record, error) {
	out := map[string]Record{}
	_, err := store.EachAt(ctx, r.store, registrationPrefix, revision, func(kv store.KeyValue) error {
		rec, err := decode(kv)
		out[rec.WorkloadIdentity] = rec
		return err
	})
	return out, err
}

// RegistrationPrefix is where registrations live: a writer that decided on
// them conditions its write on nothing under it having changed.
const RegistrationPrefix = registrationPrefix

func decode(kv store.KeyValue) (Record, error) {
	var rec Record
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		return Record{}, fmt.Errorf("instance: record %s: %w", kv.Key, err)
	}
	rec.MembershipEpoch = kv.ModRevision
	return rec, nil
}

func decodeLease(kv store.KeyValue) (lease, error) {
	var l lease
	if err := json.Unmarshal(kv.Value, &l); err != nil {
		return lease{}, fmt.Errorf("instance: lease %s: %w", kv.Key, err)
	}
	return l, nil
}

// Members returns the live instances whose labels include every selector
// label, as quorum members: the membership a release freezes. They are read
// as one snapshot, at one store revision, which is the epoch returned: every
// instance that registers later has a higher one, and every instance
// registered at or before it is in the snapshot.
func (r *Registry) Members(ctx context.Context, selector map[string]string) ([]quorum.Member, int64, error) {
	recs, epoch, err := r.ListAt(ctx, 0)
	if err != nil {
		return nil, 0, err
	}
	now := r.now()
	var out []quorum.Member
	for _, rec := range recs {
		m := quorum.Member{ID: rec.WorkloadIdentity, Zone: rec.Zone, Role: rec.Role, Weight: rec.TrafficWeight, Labels: rec.Labels, AppVersion: rec.AppVersion}
		if !rec.Live(now) || !Matches(m, selector) {
			continue
		}
		out = append(out, m)
	}
	return out, epoch, nil
}

// Matches reports whether the member has every selector label. The keys
// "zone" and "role", when the member has no label of that name, match its
// zone and role: a plan can go zone by zone without labelling anything.
func Matches(m quorum.Member, selector map[string]string) bool {
	for k, v := range selector {
		got, ok := m.Labels[k]
		switch {
		case ok:
		case k == "zone":
			got = m.Zone
		case k == "role":
			got = m.Role
		}
		if got != v {
			return false
		}
	}
	return true
}
