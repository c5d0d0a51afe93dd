package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// MarkerKey is the key that accepting a rollback puts (WithAcceptRollback):
// its value records the acceptance, and its event, after the jump of the
// revision counter, is what makes every replica's watchers take a
// snapshot.
const MarkerKey = store.SystemPrefix + "store/rollback"

// remedy is what a RolledBackError tells the operator to do.
const remedy = "writes are refused until an operator accepts what Redis holds (pawld --redis-accept-rollback)"

// Acceptance is what WithAcceptRollback accepted when the store opened.
type Acceptance struct {
	// Head is the revision Redis held when the fault was found.
	Head int64
	// Highest is the highest revision a replica reported handing out.
	Highest int64
	// ContinuedAt is where the revision counter jumped to: the compact
	// revision, one past Highest; the marker put took the next one.
	ContinuedAt int64
	// Incarnation is the data set the replicas knew, Found the one Redis
	// held ("" for none).
	Incarnation, Found string
}

// Accepted returns what WithAcceptRollback accepted when the store
// opened, or nil when there was no fault to accept (or the option was not
// given).
func (s *Store) Accepted() *Acceptance { return s.accepted }

// Incarnation returns the identity of the data set the store follows:
// "id:revision", written once per data set (revision is where it began).
func (s *Store) Incarnation() string { return *s.incarnation.Load() }

// saw records that this replica handed out revision rev.
func (s *Store) saw(rev int64) {
	for {
		cur := s.high.Load()
		if rev <= cur || s.high.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// newID returns a random identifier.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// safeName keeps what a replica name may carry into a JSON record.
func safeName(name string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x80 && (r == '.' || r == '/' || r == ':' || r == '-' || r == '_' ||
			(r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')) {
			return r
		}
		return '_'
	}, name)
}

// openIncarnation gives the data set its incarnation if it has none,
// adopts it, and returns the head revision and the fault recorded, if any.
func (s *Store) openIncarnation(ctx context.Context) (int64, *store.RolledBackError, error) {
	raw, err := openScript.Run(ctx, s.rdb, []string{s.k.rev, s.k.compact, s.k.incarnation, s.k.fault}, newID()).Slice()
	if err != nil {
		return 0, nil, s.wrap(ctx, err)
	}
	res := reply(raw)
	inc := res.str(2)
	s.incarnation.Store(&inc)
	s.high.Store(res.num(0))
	if res.str(3) == "" {
		return res.num(0), nil, nil
	}
	return res.num(0), s.rolledBack(raw[3:]), nil
}

// rolledBack turns a script's fault {head, highest, expected, found} into
// the error.
func (s *Store) rolledBack(fault []any) *store.RolledBackError {
	r := reply(fault)
	return &store.RolledBackError{Head: r.num(0), Delivered: r.num(1), Incarnation: r.str(2), Found: r.str(3), Remedy: remedy}
}

// accept accepts the recorded fault (acceptScript), after compacting the
// log up to what Redis holds.
func (s *Store) accept(ctx context.Context) (*Acceptance, error) {
	st, err := s.Status(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.Compact(ctx, st.Revision); err != nil {
		return nil, fmt.Errorf("redisstore: accept the rollback: compact to revision %d: %w", st.Revision, err)
	}
	raw, err := acceptScript.Run(ctx, s.rdb, []string{s.k.rev, s.k.compact, s.k.incarnation, s.k.fault, s.k.kv, s.k.keys, s.k.idx, s.k.log, s.k.channel},
		newID(), MarkerKey, safeName(s.who)).Slice()
	if err != nil {
		return nil, fmt.Errorf("redisstore: accept the rollback: %w", s.wrap(ctx, err))
	}
	res := reply(raw)
	if res.str(0) != "OK" {
		return nil, nil // accepted by another replica meanwhile
	}
	return &Acceptance{Head: res.num(1), Highest: res.num(2), ContinuedAt: res.num(3), Incarnation: res.str(4), Found: res.str(5)}, nil
}

// feedChanges is the feed's read of the log: Changes from a revision,
// after the check that Redis did not go back in time for this replica
// (then it fails with a *store.RolledBackError). A new incarnation that
// began at or above what this replica handed out (an accepted rollback)
// is adopted.
func (s *Store) feedChanges(ctx context.Context, from int64, limit int) (store.Changes, error) {
	if err := s.check(ctx); err != nil {
		return store.Changes{}, err
	}
	raw, err := feedScript.Run(ctx, s.rdb, []string{s.k.rev, s.k.compact, s.k.log, s.k.incarnation, s.k.fault},
		from, "", limit, s.high.Load(), s.Incarnation(), s.who).Slice()
	if err != nil {
		return store.Changes{}, s.wrap(ctx, err)
	}
	res := reply(raw)
	if res.str(0) == "ROLLEDBACK" {
		return store.Changes{}, s.rolledBack(raw[1:])
	}
	if found := res.str(0); found != s.Incarnation() {
		s.incarnation.Store(&found)
	}
	return parseChanges(raw[1:])
}
