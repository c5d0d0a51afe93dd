package boltstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// compactTo compacts the log from st.CompactRevision up to target, at most
// maxSteps revisions, and records the new compact revision in st and meta.
//
// For each compacted revision r of key k, the previous entry of k is now
// superseded at the compact revision and is removed; a deletion at r is
// removed too, since reads at or above the compact revision find no entry of
// k and so report it absent. What remains at or below the compact revision is
// the last put of each existing key.
func compactTo(tx *bolt.Tx, st *store.Status, target int64, maxSteps int) error {
	if target > st.Revision {
		target = st.Revision
	}
	if target <= st.CompactRevision {
		return nil
	}
	if maxSteps > 0 && target-st.CompactRevision > int64(maxSteps) {
		target = st.CompactRevision + int64(maxSteps)
	}
	logb, idxb := tx.Bucket(bucketLog), tx.Bucket(bucketIdx)
	idxc := idxb.Cursor()
	for rev := st.CompactRevision + 1; rev <= target; rev++ {
		v := logb.Get(revKey(rev))
		if v == nil {
			return fmt.Errorf("boltstore: revision %d missing from the log: %w", rev, errCorrupt)
		}
		typ, key, err := eventKey(v)
		if err != nil {
			return fmt.Errorf("revision %d: %w", rev, err)
		}
		if prev, ok := lastRevisionOf(idxc, key, rev-1); ok {
			if err := deleteEntry(logb, idxb, key, prev); err != nil {
				return err
			}
		}
		if typ == store.EventDelete {
			if err := deleteEntry(logb, idxb, key, rev); err != nil {
				return err
			}
		}
	}
	st.CompactRevision = target
	return tx.Bucket(bucketMeta).Put(metaCompact, revKey(target))
}

func deleteEntry(logb, idxb *bolt.Bucket, key string, rev int64) error {
	if err := logb.Delete(revKey(rev)); err != nil {
		return err
	}
	return idxb.Delete(idxKey(key, rev))
}

// RevisionAt implements store.Store: the last revision of the log
// committed at or before t.
func (s *Store) RevisionAt(ctx context.Context, t time.Time) (int64, error) {
	var target int64
	err := s.view(ctx, func(tx *bolt.Tx) error {
		st := readStatus(tx)
		target = st.CompactRevision
		c := tx.Bucket(bucketLog).Cursor()
		for k, v := c.Seek(revKey(st.CompactRevision + 1)); k != nil; k, v = c.Next() {
			if len(v) < 2 {
				return errCorrupt
			}
			nanos, n := binary.Varint(v[1:])
			if n <= 0 {
				return errCorrupt
			}
			if time.Unix(0, nanos).After(t) {
				break
			}
			target = decodeRev(k)
		}
		return nil
	})
	return target, err
}
