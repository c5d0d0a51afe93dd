package boltstore

import (
	"bytes"
	"context"

	bolt "go.etcd.io/bbolt"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// Records of a kind live in the bucket "record/<kind>", outside the key
// space's buckets: they take no revision and enter no change log.

func recordBucket(kind string) []byte { return []byte("record/" + kind) }

// PutRecords implements store.Store. It commits in its own transaction,
// apart from the key-space writer.
func (s *Store) PutRecords(ctx context.Context, kind string, recs []store.Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(recs) == 0 {
		return nil
	}
	// Records are instance leases: they may use the quota's reserve.
	cost := pageFactor * store.RecordsCost(recs)
	if err := s.usage.admit(cost, true); err != nil {
		return err
	}
	defer s.usage.unapplied.Add(-cost)
	defer s.measure()
	return s.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(recordBucket(kind))
		if err != nil {
			return err
		}
		for _, r := range recs {
			if err := b.Put([]byte(r.ID), r.Value); err != nil {
				return err
			}
		}
		return nil
	})
}

// ListRecords implements store.Store.
func (s *Store) ListRecords(ctx context.Context, kind, after string, limit int) ([]store.Record, bool, error) {
	var out []store.Record
	var more bool
	err := s.view(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(recordBucket(kind))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		k, v := c.First()
		if after != "" {
			k, v = c.Seek([]byte(after))
			if k != nil && string(k) == after {
				k, v = c.Next()
			}
		}
		for ; k != nil; k, v = c.Next() {
			if len(out) == limit {
				more = true
				return nil
			}
			out = append(out, store.Record{ID: string(k), Value: bytes.Clone(v)})
		}
		return nil
	})
	return out, more, err
}
