// Package instance keeps the registry of running SDK clients, one
// registration per workload identity, with a lease renewed by heartbeats.
//
// A registration is a record in the key space (records.Instance): it is
// written only by Register, so its store revision changes only when the
// instance registers, and that revision is the registration's membership
// epoch. A release freezes the registry as one snapshot; an ACK names the
// epoch of the registration it comes from, and one from an older
// registration does not count.
//
// Leases are not history: a heartbeat takes no store revision and writes
// nothing to the change log that watchers resume from. The registry keeps
// every lease in memory, where heartbeats renew it; an instance can also
// hold its lease with an open stream (Hold), as etcd's keep-alive stream
// does, and needs no heartbeat while it is open. Once per checkpoint
// interval the registry writes to the store's records (store.PutRecords),
// beside the key space, the leases whose stored copy would lapse within
// half a term, and the ones that expired: about one write per instance per
// term, whatever the heartbeat rate. A server that restarts loads them and,
// as etcd does for its leases on a leader change, gives every lease that
// was live at its checkpoint a full term from the restart: instances that
// could not reach a stopped server are not declared dead for it. Expiry is
// judged when the registry is read; nothing deletes a registration, which
// stays for audit. A registration is itself a lease of a full term from its
// time: a reader may see it committed before the registering call has
// recorded the lease.
//
// Shared: when several servers share one store (WithShared), an instance
// may register with one, heartbeat to another and hold a stream on a
// third. Each server keeps the leases it renews and checkpoints them as
// above, with an expiry the store honours; until the first checkpoint,
// the registration itself is the lease. Reads that judge liveness (Get,
// List, Members) merge the stored leases of every server with this one's:
// the latest expiry of the current registration wins. No lease is
// extended on restart: the other servers kept serving.
package instance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"sync"
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
	// ErrTakeover means a principal tried to register an identity whose
	// live registration another principal made.
	ErrTakeover = errors.New("instance: identity held by another principal")
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

// Registrant is who made a registration: the authenticated principal, how
// it was authenticated, and whether it holds an instance credential for
// the identity.
type Registrant struct {
	Principal          string `json:"principal,omitempty"`
	AuthMethod         string `json:"auth_method,omitempty"`
	InstanceCredential bool   `json:"instance_credential,omitempty"`
}

// Record is an instance with its lease.
type Record struct {
	Instance
	Registrant
	RegisteredAt time.Time `json:"registered_at"`
	// LeaseExpiresAt comes from the lease (zero: no lease).
	LeaseExpiresAt time.Time `json:"-"`
	// MembershipEpoch is the store revision of the registration.
	MembershipEpoch int64 `json:"-"`
}

// Live reports whether the lease is live at now.
func (r Record) Live(now time.Time) bool { return now.Before(r.LeaseExpiresAt) }

// lease is an instance's lease: which registration it belongs to (its boot
// and epoch), and until when. It is checkpointed as the record of its
// identity in leaseKind, with the time of the checkpoint.
type lease struct {
	BootID         string    `json:"boot_id"`
	Epoch          int64     `json:"epoch"`
	ExpiresAt      time.Time `json:"expires_at"`
	CheckpointedAt time.Time `json:"checkpointed_at,omitempty"`
}

// leaseKind is the store's record kind for leases.
const leaseKind = "leases"

// DefaultCheckpointInterval is how often changed leases are written to the
// store: a crash loses at most this much of heartbeats, which a lease of
// tens of seconds absorbs, and a fleet of 10,000 instances heartbeating
// every 10 s costs one write a second instead of a thousand.
const DefaultCheckpointInterval = time.Second

// Registry reads and writes instance registrations and keeps their leases.
// Its methods are safe for concurrent use; Run checkpoints the leases.
type Registry struct {
	store      store.Store
	lease      time.Duration
	now        func() time.Time
	checkpoint time.Duration

	mu     sync.Mutex
	leases map[string]lease // by identity; guarded by mu
	// stored is each lease as last written to the store; guarded by mu.
	stored map[string]lease
	// holds are the leases held by open streams: live while held, whatever
	// their expiry. Guarded by mu.
	holds map[string]hold
	// regs are the registrations this registry wrote or read, by identity:
	// a heartbeat checks its boot here, without reading the store. Guarded
	// by mu; the store stays the truth, and a boot that does not match is
	// read again from it.
	regs map[string]Record
	// shared says other servers share the store (WithShared).
	shared bool
}

// Option configures New.
type Option func(*Registry)

// WithClock replaces time.Now, for tests that move time by hand.
func WithClock(now func() time.Time) Option { return func(r *Registry) { r.now = now } }

// WithShared says that other servers share the store, each with a
// registry of its own: liveness is judged from every server's stored
// leases, and none is extended when this one starts.
func WithShared() Option { return func(r *Registry) { r.shared = true } }

// WithCheckpointInterval sets how often Run writes the leases that changed
// (default DefaultCheckpointInterval).
func WithCheckpointInterval(d time.Duration) Option { return func(r *Registry) { r.checkpoint = d } }

// New returns a registry whose leases last term, with the leases
// checkpointed in st loaded: each that was live at its checkpoint is live
// for a full lease from now.
func New(ctx context.Context, st store.Store, term time.Duration, opts ...Option) (*Registry, error) {
	r := &Registry{store: st, lease: term, now: time.Now, checkpoint: DefaultCheckpointInterval,
		leases: map[string]lease{}, stored: map[string]lease{}, holds: map[string]hold{}, regs: map[string]Record{}}
	for _, opt := range opts {
		opt(r)
	}
	switch {
	case term <= 0:
		return nil, fmt.Errorf("instance: lease %s: must be positive", term)
	case r.checkpoint <= 0:
		return nil, fmt.Errorf("instance: WithCheckpointInterval(%s): must be positive", r.checkpoint)
	}
	if r.shared {
		return r, nil
	}
	stored, err := r.storedLeases(ctx)
	if err != nil {
		return nil, err
	}
	now := r.now().UTC()
	for id, l := range stored {
		r.stored[id] = l
		if l.ExpiresAt.After(l.CheckpointedAt) {
			l.ExpiresAt = maxTime(l.ExpiresAt, now.Add(term))
		}
		r.leases[id] = l
	}
	return r, nil
}

// storedLeases reads every lease checkpointed in the store.
func (r *Registry) storedLeases(ctx context.Context) (map[string]lease, error) {
	out := map[string]lease{}
	for after := ""; ; {
		recs, more, err := r.store.ListRecords(ctx, leaseKind, after, 1000)
		if err != nil {
			return nil, fmt.Errorf("instance: load leases: %w", err)
		}
		for _, rec := range recs {
			var l lease
			if err := json.Unmarshal(rec.Value, &l); err != nil {
				return nil, fmt.Errorf("instance: lease of %s: %w", rec.ID, err)
			}
			out[rec.ID] = l
		}
		if !more || len(recs) == 0 {
			return out, nil
		}
		after = recs[len(recs)-1].ID
	}
}

// othersLeases is, with a shared store, every server's stored leases (nil
// otherwise): what withLease merges.
func (r *Registry) othersLeases(ctx context.Context) (map[string]lease, error) {
	if !r.shared {
		return nil, nil
	}
	return r.storedLeases(ctx)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Run writes the leases that changed, every checkpoint interval, until ctx
// is done; then it writes them once more and returns. Errors are logged on
// log and retried at the next interval.
func (r *Registry) Run(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(r.checkpoint)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			// A last checkpoint, with its own short deadline: the server is
			// stopping, and the store closes after this returns.
			final, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := r.Checkpoint(final); err != nil {
				log.Warn("final lease checkpoint failed", "error", err)
			}
			return
		case <-t.C:
			if err := r.Checkpoint(ctx); err != nil && ctx.Err() == nil {
				log.Warn("lease checkpoint failed", "error", err)
			}
		}
	}
}

// hold is a lease held by open streams of one registration.
type hold struct {
	boot    string
	epoch   int64
	streams int
}

// Checkpoint writes the leases whose stored copy would lapse within half a
// term (a live lease is written about once per term, however often it is
// renewed), and the expired ones whose stored copy says they were live (so
// that a restart does not revive them). On failure the next checkpoint
// writes them.
func (r *Registry) Checkpoint(ctx context.Context) error {
	now := r.now().UTC()
	soon := now.Add(r.lease / 2)
	r.mu.Lock()
	var recs []store.Record
	var written []lease
	for id, l := range r.leases {
		if h, ok := r.holds[id]; ok && h.boot == l.BootID && h.epoch == l.Epoch {
			l.ExpiresAt = maxTime(l.ExpiresAt, now.Add(r.lease))
		}
		st, ok := r.stored[id]
		live := l.ExpiresAt.After(now)
		switch {
		case live && (!ok || st.BootID != l.BootID || st.Epoch != l.Epoch || (st.ExpiresAt.Before(soon) && l.ExpiresAt.After(st.ExpiresAt))):
		case !live && ok && st.ExpiresAt.After(st.CheckpointedAt) && !r.shared:
		default:
			continue
		}
		l.CheckpointedAt = now
		b, err := json.Marshal(l)
		if err != nil {
			r.mu.Unlock()
			return fmt.Errorf("instance: encode lease of %s: %w", id, err)
		}
		// A shared store drops the record a term after the lease ends.
		recs = append(recs, store.Record{ID: id, Value: b, ExpiresAt: l.ExpiresAt.Add(r.lease)})
		written = append(written, l)
	}
	r.mu.Unlock()
	if err := r.store.PutRecords(ctx, leaseKind, recs); err != nil {
		return fmt.Errorf("instance: checkpoint %d leases: %w", len(recs), err)
	}
	r.mu.Lock()
	for i, rec := range recs {
		r.stored[rec.ID] = written[i]
	}
	r.mu.Unlock()
	return nil
}

// Hold keeps the lease of the instance's current registration, which must
// be of boot, live until the returned release is called (an open stream of
// the instance calls it when it ends): the instance needs no heartbeat
// meanwhile. Released, the lease runs a full term from then, so that the
// instance has that long to come back.
func (r *Registry) Hold(ctx context.Context, identity, boot string) (release func(), err error) {
	rec, err := r.registrationOf(ctx, identity, boot)
	if err != nil {
		return nil, err
	}
	if rec.BootID != boot {
		return nil, fmt.Errorf("%w: %s is registered with boot %s, not %s; register again", ErrStaleBoot, identity, rec.BootID, boot)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.holds[identity]
	switch {
	case ok && h.epoch > rec.MembershipEpoch:
		return nil, fmt.Errorf("%w: %s re-registered", ErrStaleBoot, identity)
	case ok && h.epoch == rec.MembershipEpoch:
		h.streams++
	default:
		h = hold{boot: boot, epoch: rec.MembershipEpoch, streams: 1}
	}
	r.holds[identity] = h
	r.renewLocked(identity, boot, rec.MembershipEpoch)
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			h, ok := r.holds[identity]
			if !ok || h.epoch != rec.MembershipEpoch {
				return
			}
			if h.streams--; h.streams == 0 {
				delete(r.holds, identity)
			} else {
				r.holds[identity] = h
			}
			r.renewLocked(identity, boot, rec.MembershipEpoch)
		})
	}, nil
}

// Now is the registry's clock: what leases are judged against.
func (r *Registry) Now() time.Time { return r.now() }

// Lease is how long a registration or heartbeat keeps an instance live.
func (r *Registry) Lease() time.Duration { return r.lease }

var identityPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,254}$`)

// RegistrationPrefix is where registrations live: a writer that decided on
// them conditions its write on nothing under it having changed.
const RegistrationPrefix = records.InstancesPrefix

// RegistrationKey is the key of an instance's registration: a writer that
// decided on it conditions its write on it.
func RegistrationKey(identity string) string { return records.Instance(identity) }

// Register records in (replacing an earlier boot's registration), starts
// its lease, and gives it a new membership epoch.
func (r *Registry) Register(ctx context.Context, in Instance) (Record, error) {
	return r.RegisterAs(ctx, in, Registrant{}, false)
}

// maxRegisterAttempts bounds the retries of an exclusive registration that
// raced with another registration of the identity.
const maxRegisterAttempts = 8

// RegisterAs is Register, recording who registers. With exclusive, a
// principal other than the one that made the identity's live registration
// is refused with ErrTakeover (the registration it would replace is
// compared in the same write, so a race cannot slip one in); once that
// registration's lease has expired, anyone may register the identity.
func (r *Registry) RegisterAs(ctx context.Context, in Instance, by Registrant, exclusive bool) (Record, error) {
	switch {
	case !identityPattern.MatchString(in.WorkloadIdentity):
		return Record{}, fmt.Errorf("%w: workload identity %q must be 1-255 of A-Z a-z 0-9 . _ : @ / -", ErrInvalid, in.WorkloadIdentity)
	case in.BootID == "":
		return Record{}, fmt.Errorf("%w: a boot ID is required (a new one on every process start)", ErrInvalid)
	}
	if err := checkTrafficWeight(in.TrafficWeight); err != nil {
		return Record{}, err
	}
	rec := Record{Instance: in, Registrant: by, RegisteredAt: r.now().UTC()}
	b, err := records.Encode(rec)
	if err != nil {
		return Record{}, err
	}
	put := store.Put{Key: records.Instance(in.WorkloadIdentity), Value: b}
	var res store.Result
	for attempt := 0; ; attempt++ {
		if exclusive {
			expect, err := r.checkTakeover(ctx, in.WorkloadIdentity, by.Principal)
			if err != nil {
				return Record{}, err
			}
			put.ExpectModRevision = &expect
		}
		res, err = r.store.Put(ctx, put)
		if exclusive && errors.Is(err, store.ErrRevisionMismatch) && attempt < maxRegisterAttempts {
			continue // another registration landed since the check: check again
		}
		if err != nil {
			return Record{}, fmt.Errorf("instance: store: %w", err)
		}
		break
	}
	rec.MembershipEpoch = res.Revision
	r.remember(rec)
	rec.LeaseExpiresAt = r.renew(in.WorkloadIdentity, in.BootID, rec.MembershipEpoch)
	return rec, nil
}

// checkTakeover refuses a registration of identity by principal when the
// identity's live registration was made by another principal, and returns
// the revision of the registration it checked (0: none), for the write to
// compare.
func (r *Registry) checkTakeover(ctx context.Context, identity, principal string) (int64, error) {
	cur, err := r.Get(ctx, identity)
	switch {
	case errors.Is(err, ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, err
	case cur.Principal != principal && cur.Live(r.now()):
		return 0, fmt.Errorf("%w: %s is registered by another principal, whose lease runs until %s; "+
			"an identity's live registration can be replaced only by the principal that made it",
			ErrTakeover, identity, cur.LeaseExpiresAt.UTC().Format(time.RFC3339))
	}
	return cur.MembershipEpoch, nil
}

// Registration is the identity's current registration (without its
// lease): the one the registry holds, read again from the store when it
// holds none or one of another boot than boot. It fails with ErrNotFound
// when the identity never registered.
func (r *Registry) Registration(ctx context.Context, identity, boot string) (Record, error) {
	return r.registrationOf(ctx, identity, boot)
}

// MaxTrafficWeight bounds an instance's traffic weight. A weight is a
// share, not a count of requests; the bound keeps the sum of a
// membership's weights (what a traffic-weight quorum compares with) exact
// and finite whatever the fleet's size.
const MaxTrafficWeight = 1e9

// checkTrafficWeight refuses a weight no quorum can add up: NaN, an
// infinity, a negative number, or one above MaxTrafficWeight. A NaN would
// also fail to encode as the registration's JSON.
func checkTrafficWeight(w float64) error {
	if math.IsNaN(w) || math.IsInf(w, 0) || w < 0 || w > MaxTrafficWeight {
		return fmt.Errorf("%w: traffic weight %v must be a finite number from 0 to %g", ErrInvalid, w, float64(MaxTrafficWeight))
	}
	return nil
}

// remember keeps rec as the identity's registration, unless a later one is
// kept already.
func (r *Registry) remember(rec Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, ok := r.regs[rec.WorkloadIdentity]; !ok || cur.MembershipEpoch < rec.MembershipEpoch {
		rec.LeaseExpiresAt = time.Time{}
		r.regs[rec.WorkloadIdentity] = rec
	}
}

// renew gives the lease of the registration (boot, epoch) a full term,
// unless a later registration's lease is there already, and returns its
// expiry (zero when it was not renewed).
func (r *Registry) renew(identity, boot string, epoch int64) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.renewLocked(identity, boot, epoch)
}

func (r *Registry) renewLocked(identity, boot string, epoch int64) time.Time {
	if cur, ok := r.leases[identity]; ok && cur.Epoch > epoch {
		return time.Time{}
	}
	l := lease{BootID: boot, Epoch: epoch, ExpiresAt: r.now().UTC().Add(r.lease)}
	r.leases[identity] = l
	return l.ExpiresAt
}

// registrationOf is the identity's registration as the registry holds it,
// read from the store when it holds none or one of another boot.
func (r *Registry) registrationOf(ctx context.Context, identity, boot string) (Record, error) {
	r.mu.Lock()
	rec, ok := r.regs[identity]
	r.mu.Unlock()
	if ok && rec.BootID == boot {
		return rec, nil
	}
	rec, err := r.RegistrationAt(ctx, identity, 0)
	if err != nil {
		return Record{}, err
	}
	r.remember(rec)
	return rec, nil
}

// Heartbeat renews the lease of the instance's current boot. It writes
// nothing to the key space, and reads the store only for a registration it
// does not hold, or one whose boot is not the heartbeat's.
func (r *Registry) Heartbeat(ctx context.Context, identity, bootID string) (Record, error) {
	rec, err := r.registrationOf(ctx, identity, bootID)
	if err != nil {
		return Record{}, err
	}
	if rec.BootID != bootID {
		return Record{}, fmt.Errorf("%w: %s is registered with boot %s, not %s; register again", ErrStaleBoot, identity, rec.BootID, bootID)
	}
	if rec.LeaseExpiresAt = r.renew(identity, bootID, rec.MembershipEpoch); rec.LeaseExpiresAt.IsZero() {
		// A registration landed between the read and the renewal: it wins.
		return Record{}, fmt.Errorf("%w: %s re-registered during the heartbeat", ErrStaleBoot, identity)
	}
	return rec, nil
}

// withLease fills in rec's lease expiry, when the lease is its
// registration's; a lease held by a stream runs a full term from now.
// others are the other servers' stored leases (nil when the store is not
// shared): the latest expiry wins.
func (r *Registry) withLease(rec Record, others map[string]lease) Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	// A registration starts a full lease: a reader that sees it before
	// the registering call has recorded the lease (the store commits
	// first) must not judge it expired.
	rec.LeaseExpiresAt = rec.RegisteredAt.Add(r.lease)
	if l, ok := others[rec.WorkloadIdentity]; ok && l.BootID == rec.BootID && l.Epoch == rec.MembershipEpoch {
		rec.LeaseExpiresAt = maxTime(rec.LeaseExpiresAt, l.ExpiresAt)
	}
	if l, ok := r.leases[rec.WorkloadIdentity]; ok && l.BootID == rec.BootID && l.Epoch == rec.MembershipEpoch {
		rec.LeaseExpiresAt = maxTime(rec.LeaseExpiresAt, l.ExpiresAt)
		if h, held := r.holds[rec.WorkloadIdentity]; held && h.boot == l.BootID && h.epoch == l.Epoch {
			rec.LeaseExpiresAt = maxTime(rec.LeaseExpiresAt, r.now().UTC().Add(r.lease))
		}
	}
	return rec
}

// Get returns one instance's record, with its lease.
func (r *Registry) Get(ctx context.Context, identity string) (Record, error) {
	rec, err := r.RegistrationAt(ctx, identity, 0)
	if err != nil {
		return Record{}, err
	}
	others, err := r.othersLeases(ctx)
	if err != nil {
		return Record{}, err
	}
	return r.withLease(rec, others), nil
}

// RegistrationAt returns one instance's registration (without its lease)
// as of a store revision (0: current). It fails with ErrNotFound when the
// instance had not registered by then.
func (r *Registry) RegistrationAt(ctx context.Context, identity string, revision int64) (Record, error) {
	kv, _, err := r.store.Get(ctx, records.Instance(identity), revision)
	if errors.Is(err, store.ErrNotFound) {
		return Record{}, fmt.Errorf("%w: %s; register first", ErrNotFound, identity)
	}
	if err != nil {
		return Record{}, err
	}
	return decode(kv)
}

// List returns every record, live or not, by workload identity.
func (r *Registry) List(ctx context.Context) ([]Record, error) {
	recs, _, err := r.ListAt(ctx, 0)
	return recs, err
}

// ListAt returns every registration, live or not, by workload identity, as
// of one store revision (0: the current one), and that revision: however
// many pages the registrations take, they are one snapshot. Leases are as
// they are now.
func (r *Registry) ListAt(ctx context.Context, revision int64) ([]Record, int64, error) {
	var out []Record
	rev, err := store.EachAt(ctx, r.store, records.InstancesPrefix, revision, func(kv store.KeyValue) error {
		rec, err := decode(kv)
		out = append(out, rec)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	others, err := r.othersLeases(ctx)
	if err != nil {
		return nil, 0, err
	}
	for i := range out {
		out[i] = r.withLease(out[i], others)
	}
	return out, rev, nil
}

// RecordPage is one page of the registry.
type RecordPage struct {
	// Records are the page's registrations, by workload identity.
	Records []Record
	// Revision is the store revision every page of the listing is read at.
	Revision int64
	// More says whether registrations follow the last one.
	More bool
}

// ListPage returns up to limit registrations, live or not, after the
// workload identity after ("" for the first page), as of one store revision
// (0: the current one), so that every page of a listing is one snapshot.
// Leases are as they are now.
func (r *Registry) ListPage(ctx context.Context, revision int64, after string, limit int) (RecordPage, error) {
	start := ""
	if after != "" {
		start = records.Instance(after)
	}
	page, err := r.store.List(ctx, records.InstancesPrefix, revision, start, limit)
	if err != nil {
		return RecordPage{}, fmt.Errorf("instance: list registrations: %w", err)
	}
	others, err := r.othersLeases(ctx)
	if err != nil {
		return RecordPage{}, err
	}
	out := RecordPage{Revision: page.Revision, More: page.More}
	for _, kv := range page.KVs {
		rec, err := decode(kv)
		if err != nil {
			return RecordPage{}, err
		}
		out.Records = append(out.Records, r.withLease(rec, others))
	}
	return out, nil
}

// Registrations returns every registration (without its lease) as of
// revision (0: current), by identity: the boot and membership epoch that
// an instance's ACKs must come from to count.
func (r *Registry) Registrations(ctx context.Context, revision int64) (map[string]Record, error) {
	out := map[string]Record{}
	_, err := store.EachAt(ctx, r.store, records.InstancesPrefix, revision, func(kv store.KeyValue) error {
		rec, err := decode(kv)
		out[rec.WorkloadIdentity] = rec
		return err
	})
	return out, err
}

// DecodeRegistration reads a registration record (without its lease), as
// stored at records.Instance: for readers of the change feed.
func DecodeRegistration(kv store.KeyValue) (Record, error) { return decode(kv) }

func decode(kv store.KeyValue) (Record, error) {
	var rec Record
	if err := records.Decode(kv, &rec); err != nil {
		return Record{}, err
	}
	rec.MembershipEpoch = kv.ModRevision
	return rec, nil
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
		m := quorum.Member{ID: rec.WorkloadIdentity, Zone: rec.Zone, Role: rec.Role, Weight: rec.TrafficWeight, Labels: rec.Labels, AppVersion: rec.AppVersion,
			InstanceCredential: rec.InstanceCredential}
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
