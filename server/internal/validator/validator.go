// Package validator keeps the validators a server knows: WebAssembly
// modules stored as immutable blobs beside the key space, addressed by the
// sha256 digest of their bytes, checked at upload for the ABI they claim and
// run by validators/host. Loaded modules are kept for reuse; Close releases
// them.
package validator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/pawlcfg/pawl/server/internal/metrics"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/validators/host"
)

// blobKind is the store's blob kind for validator modules.
const blobKind = "validators"

var (
	// ErrInvalid means a malformed digest or request.
	ErrInvalid = errors.New("validator: invalid request")
	// ErrNotFound means no validator has the digest.
	ErrNotFound = errors.New("validator: not found")
	// ErrTooLarge means a module over the size limit.
	ErrTooLarge = errors.New("validator: module too large")
)

// kindError is an error whose message reaches clients as it is, and that
// matches its kind (one of the sentinels above).
type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string { return e.msg }

// Is reports whether target is the error's kind.
func (e *kindError) Is(target error) bool { return target == e.kind }

func errorf(kind error, format string, args ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

var digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Info describes a stored validator.
type Info struct {
	Digest     string
	Name       string
	ABIVersion int
	Size       int
	UploadedAt time.Time
	Uploader   string
}

// meta is what the store keeps beside a module.
type meta struct {
	Name       string    `json:"name"`
	ABIVersion int       `json:"abi_version"`
	Size       int       `json:"size"`
	UploadedAt time.Time `json:"uploaded_at"`
	Uploader   string    `json:"uploader"`
}

// Validators stores, loads and runs validators.
type Validators struct {
	store    store.Store
	runtime  *host.Runtime
	maxBytes int
	now      func() time.Time

	// metrics counts loads and runs (nil: none).
	metrics *metrics.Metrics

	mu     sync.Mutex
	loaded map[string]*host.Validator // by digest
}

// Option configures New.
type Option func(*Validators)

// WithMetrics counts and times every module load (a compilation, or a
// hit of the compilation cache) and every validation in m.
func WithMetrics(m *metrics.Metrics) Option { return func(v *Validators) { v.metrics = m } }

// New returns Validators over st, run in rt, refusing modules over
// maxBytes.
func New(st store.Store, rt *host.Runtime, maxBytes int, opts ...Option) *Validators {
	v := &Validators{store: st, runtime: rt, maxBytes: maxBytes, now: time.Now, loaded: map[string]*host.Validator{}}
	for _, opt := range opts {
		opt(v)
	}
	return v
}

// compile loads wasm in the runtime, timed.
func (v *Validators) compile(ctx context.Context, digest string, wasm []byte) (*host.Validator, error) {
	start := time.Now()
	m, err := v.runtime.Load(ctx, digest, wasm)
	v.metrics.ValidatorLoaded(time.Since(start), err)
	return m, err
}

// Close releases every loaded validator. Safe to call concurrently with
// nothing else; the runtime stays open.
func (v *Validators) Close(ctx context.Context) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for digest, m := range v.loaded {
		_ = m.Close(ctx)
		delete(v.loaded, digest)
	}
}

// Upload checks wasm (its ABI, its imports) and stores it under its digest
// unless a module with that digest exists: modules are immutable, and an
// upload is idempotent. created says whether this call stored it.
func (v *Validators) Upload(ctx context.Context, wasm []byte, name, uploader string) (info Info, created bool, err error) {
	if len(wasm) > v.maxBytes {
		return Info{}, false, &TooLargeError{Size: len(wasm), Max: v.maxBytes}
	}
	digest := host.Digest(wasm)
	if existing, err := v.store.GetBlob(ctx, blobKind, digest, false); err == nil {
		info, err := toInfo(existing)
		return info, false, err
	} else if !errors.Is(err, store.ErrNotFound) {
		return Info{}, false, err
	}
	m, err := v.compile(ctx, digest, wasm)
	if err != nil {
		return Info{}, false, withFlag(err)
	}
	encoded, err := json.Marshal(meta{Name: name, ABIVersion: m.Info().ABIVersion, Size: len(wasm), UploadedAt: v.now().UTC(), Uploader: uploader})
	if err != nil {
		_ = m.Close(ctx)
		return Info{}, false, fmt.Errorf("validator: encode metadata: %w", err)
	}
	if created, err = v.store.PutBlob(ctx, blobKind, store.Blob{ID: digest, Meta: encoded, Data: wasm}); err != nil {
		_ = m.Close(ctx)
		return Info{}, false, err
	}
	v.keep(ctx, digest, m)
	stored, err := v.store.GetBlob(ctx, blobKind, digest, false) // a concurrent upload may have won
	if err != nil {
		return Info{}, false, err
	}
	info, err = toInfo(stored)
	return info, created, err
}

// Get returns a validator's metadata.
func (v *Validators) Get(ctx context.Context, digest string) (Info, error) {
	b, err := v.blob(ctx, digest, false)
	if err != nil {
		return Info{}, err
	}
	return toInfo(b)
}

// List returns up to limit validators in digest order after the digest
// after ("" for the first), and whether more follow.
func (v *Validators) List(ctx context.Context, after string, limit int) ([]Info, bool, error) {
	if after != "" && !digestPattern.MatchString(after) {
		return nil, false, errorf(ErrInvalid, "%q is not a digest", after)
	}
	blobs, more, err := v.store.ListBlobs(ctx, blobKind, after, limit)
	if err != nil {
		return nil, false, err
	}
	out := make([]Info, 0, len(blobs))
	for _, b := range blobs {
		info, err := toInfo(b)
		if err != nil {
			return nil, false, err
		}
		out = append(out, info)
	}
	return out, more, nil
}

// Module returns a validator's metadata and bytes.
func (v *Validators) Module(ctx context.Context, digest string) (Info, []byte, error) {
	b, err := v.blob(ctx, digest, true)
	if err != nil {
		return Info{}, nil, err
	}
	info, err := toInfo(b)
	return info, b.Data, err
}

// Run validates in with the stored validator digest, loading it on first
// use: what the Validate dry run and the server-side check of a release do.
func (v *Validators) Run(ctx context.Context, digest string, in host.Input) (host.Result, error) {
	m, err := v.load(ctx, digest)
	if err != nil {
		return host.Result{}, withFlag(err)
	}
	start := time.Now()
	res, err := m.Validate(ctx, in)
	result := metrics.RunAccepted
	switch {
	case err != nil:
		result = metrics.RunError
	case !res.Valid:
		result = metrics.RunRejected
	}
	v.metrics.ValidatorRan(time.Since(start), result)
	return res, withFlag(err)
}

// limitFlags are the pawld flags that change each of the host's limits.
var limitFlags = map[host.Limit]string{
	host.LimitFunctions:      "--validator-max-functions",
	host.LimitFunctionLocals: "--validator-max-function-locals",
	host.LimitLocals:         "--validator-max-locals",
	host.LimitFunctionBytes:  "--validator-max-function-bytes",
	host.LimitCodeBytes:      "--validator-max-code-bytes",
	host.LimitLoopDepth:      "--validator-max-loop-depth",
	host.LimitLoopJoins:      "--validator-max-loop-joins",
	host.LimitBlocks:         "--validator-max-blocks",
	host.LimitBlockJoins:     "--validator-max-block-joins",
	host.LimitCompileTime:    "--validator-compile-timeout",
	host.LimitCompiles:       "--validator-max-compiles",
	host.LimitMemoryBudget:   "--validator-memory-budget",
	host.LimitMemory:         "--validator-memory-bytes",
}

// LimitName names one of the host's limits for a client: the pawld flag
// that changes it, or, for a limit no flag sets, "validator " and the
// limit's name.
func LimitName(l host.Limit) string {
	if flag, ok := limitFlags[l]; ok {
		return flag
	}
	return "validator " + string(l)
}

// withFlag names, in a limit error, the pawld flag that changes the limit.
func withFlag(err error) error {
	var limit *host.LimitError
	if errors.As(err, &limit) {
		if flag, ok := limitFlags[limit.Limit]; ok {
			return fmt.Errorf("%w (pawld %s)", err, flag)
		}
	}
	return err
}

// TooLargeError is a module over the size limit (pawld
// --max-validator-bytes). It matches ErrTooLarge.
type TooLargeError struct {
	// Size is the module's size and Max the limit, in bytes.
	Size, Max int
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("the module is %d bytes; the limit is %d bytes (pawld --max-validator-bytes)", e.Size, e.Max)
}

// Is reports whether target is ErrTooLarge.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// blob reads a stored module by digest.
func (v *Validators) blob(ctx context.Context, digest string, withData bool) (store.Blob, error) {
	if !digestPattern.MatchString(digest) {
		return store.Blob{}, errorf(ErrInvalid, "digest %q is not of the form sha256:<64 lowercase hex digits>", digest)
	}
	b, err := v.store.GetBlob(ctx, blobKind, digest, withData)
	if errors.Is(err, store.ErrNotFound) {
		return store.Blob{}, errorf(ErrNotFound, "no validator has digest %s; upload it first (pawl validator upload)", digest)
	}
	return b, err
}

// load returns the loaded module for digest, loading it from the store
// (which verifies its digest) on first use.
func (v *Validators) load(ctx context.Context, digest string) (*host.Validator, error) {
	v.mu.Lock()
	m := v.loaded[digest]
	v.mu.Unlock()
	if m != nil {
		return m, nil
	}
	b, err := v.blob(ctx, digest, true)
	if err != nil {
		return nil, err
	}
	if m, err = v.compile(ctx, digest, b.Data); err != nil {
		return nil, fmt.Errorf("load stored validator %s: %w", digest, err)
	}
	return v.keep(ctx, digest, m), nil
}

// keep caches m unless another goroutine loaded the same digest first, and
// returns the cached one.
func (v *Validators) keep(ctx context.Context, digest string, m *host.Validator) *host.Validator {
	v.mu.Lock()
	defer v.mu.Unlock()
	if have := v.loaded[digest]; have != nil {
		_ = m.Close(ctx)
		return have
	}
	v.loaded[digest] = m
	return m
}

func toInfo(b store.Blob) (Info, error) {
	var m meta
	if err := json.Unmarshal(b.Meta, &m); err != nil {
		return Info{}, fmt.Errorf("validator: metadata of %s: %w", b.ID, err)
	}
	return Info{Digest: b.ID, Name: m.Name, ABIVersion: m.ABIVersion, Size: m.Size, UploadedAt: m.UploadedAt, Uploader: m.Uploader}, nil
}
