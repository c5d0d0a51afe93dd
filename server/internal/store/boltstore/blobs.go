package boltstore

import (
	"bytes"
	"context"
	"errors"

	bolt "go.etcd.io/bbolt"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// Blobs live in two buckets per kind, "blob/<kind>/meta" and
// "blob/<kind>/data", written in one transaction.

func blobBuckets(kind string) (meta, data []byte) {
	return []byte("blob/" + kind + "/meta"), []byte("blob/" + kind + "/data")
}

// PutBlob implements store.Store. It commits in its own transaction, apart
// from the key-space writer: blobs take no revision.
func (s *Store) PutBlob(ctx context.Context, kind string, b store.Blob) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	cost := pageFactor * store.BlobCost(b)
	if err := s.usage.admit(cost, false); err != nil {
		return false, err
	}
	defer s.usage.unapplied.Add(-cost)
	defer s.measure()
	var created bool
	err := s.update(func(tx *bolt.Tx) error {
		metaName, dataName := blobBuckets(kind)
		meta, err := tx.CreateBucketIfNotExists(metaName)
		if err != nil {
			return err
		}
		data, err := tx.CreateBucketIfNotExists(dataName)
		if err != nil {
			return err
		}
		if meta.Get([]byte(b.ID)) != nil {
			return nil
		}
		created = true
		if err := meta.Put([]byte(b.ID), b.Meta); err != nil {
			return err
		}
		return data.Put([]byte(b.ID), b.Data)
	})
	return created, err
}

// GetBlob implements store.Store.
func (s *Store) GetBlob(ctx context.Context, kind, id string, withData bool) (store.Blob, error) {
	b := store.Blob{ID: id}
	err := s.view(ctx, func(tx *bolt.Tx) error {
		metaName, dataName := blobBuckets(kind)
		meta := tx.Bucket(metaName)
		if meta == nil || meta.Get([]byte(id)) == nil {
			return &store.NotFoundError{Key: id}
		}
		b.Meta = bytes.Clone(meta.Get([]byte(id)))
		if withData {
			b.Data = bytes.Clone(tx.Bucket(dataName).Get([]byte(id)))
		}
		return nil
	})
	return b, err
}

// ListBlobs implements store.Store.
func (s *Store) ListBlobs(ctx context.Context, kind, after string, limit int) ([]store.Blob, bool, error) {
	var out []store.Blob
	var more bool
	err := s.view(ctx, func(tx *bolt.Tx) error {
		metaName, _ := blobBuckets(kind)
		meta := tx.Bucket(metaName)
		if meta == nil {
			return nil
		}
		c := meta.Cursor()
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
			out = append(out, store.Blob{ID: string(k), Meta: bytes.Clone(v)})
		}
		return nil
	})
	return out, more, err
}

// update runs fn in a write transaction, mapping a closed database to
// store.ErrClosed.
func (s *Store) update(fn func(tx *bolt.Tx) error) error {
	select {
	case <-s.ctx.Done():
		return store.ErrClosed
	default:
	}
	err := s.db.Update(fn)
	if errors.Is(err, bolt.ErrDatabaseNotOpen) {
		return store.ErrClosed
	}
	return err
}
