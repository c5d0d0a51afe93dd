package sdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"
)

// Snapshot is one applied generation of a config: verified against its
// digests, validated by its validator, immutable. Every field is read-only;
// Content in particular is shared by every reader and must not be
// modified.
type Snapshot struct {
	// Config is the config's ID.
	Config string
	// Generation is the release's generation.
	Generation int64
	// Epoch is the config pointer's epoch of the assignment.
	Epoch int64
	// Stage is the canary stage that assigned the release, or empty for
	// the active generation.
	Stage string
	// ContentDigest is the canonical content digest, verified.
	ContentDigest string
	// ValidatorDigest is the validator module that passed the content.
	ValidatorDigest string
	// MediaType is the content's media type.
	MediaType string
	// Content is the config content (read-only).
	Content []byte
	// AppliedAt is when this process swapped it in.
	AppliedAt time.Time
	// FromCache says the snapshot was read from the on-disk cache at start,
	// verified by its digest, before the server confirmed it.
	FromCache bool

	typed sync.Map // reflect.Type -> *decoded[T]
}

// ErrNoSnapshot is returned by typed helpers given no snapshot: the config
// was never applied, a pinned request does not read it, or the snapshot
// came from sdk.Pinned on a request that is not pinned (its message says
// how to pin; Client.Pinned falls back to the current snapshot instead).
var ErrNoSnapshot = errors.New("sdk: no snapshot of the config (none applied yet, or sdk.Pinned read a request that is not pinned: " +
	"wrap the handler with client.Middleware or client.Interceptor, or read with client.Pinned)")

type decoded[T any] struct {
	once sync.Once
	v    *T
	err  error
}

// JSON decodes s's content into a T, once per snapshot: every later call
// for the same snapshot and type returns the same *T, which callers must
// treat as read-only. Decoding errors are returned each time.
func JSON[T any](s *Snapshot) (*T, error) {
	if s == nil {
		return nil, ErrNoSnapshot
	}
	key := reflect.TypeFor[T]()
	v, ok := s.typed.Load(key)
	if !ok {
		v, _ = s.typed.LoadOrStore(key, &decoded[T]{})
	}
	d := v.(*decoded[T])
	d.once.Do(func() {
		var out T
		if err := json.Unmarshal(s.Content, &out); err != nil {
			d.err = fmt.Errorf("sdk: decode %s generation %d as %s: %w", s.Config, s.Generation, key, err)
			return
		}
		d.v = &out
	})
	return d.v, d.err
}

// String names the snapshot: "routing@7".
func (s *Snapshot) String() string {
	if s == nil {
		return "<none>"
	}
	return fmt.Sprintf("%s@%d", s.Config, s.Generation)
}
