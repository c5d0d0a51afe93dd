package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// Blobs of a kind live in three keys: a hash of metadata and a hash of
// data by id, and a sorted set of the ids (for listing in id order).

func (s *Store) blobKeys(kind string) []string {
	tag := "{" + s.prefix + "}:blob:" + kind + ":"
	return []string{tag + "meta", tag + "data", tag + "ids"}
}

// putBlobScript stores a blob unless one with its id exists, if the
// quota admits it (quota_admit), counting its bytes.
//
//	KEYS: meta, data, ids, bytes, alarm
//	ARGV: id, meta, data, quota, cost
//
// It returns 1 (stored), 0 (it existed) or quota_admit's refusal.
var putBlobScript = redis.NewScript(prelude + `
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
local now, quota = now_ms(), tonumber(ARGV[4])
local refused = quota_admit(KEYS[4], KEYS[5], quota, 0, '0', tonumber(ARGV[5]), now)
if refused then return refused end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[3], 0, ARGV[1])
quota_add(KEYS[4], KEYS[5], quota, 3 * #ARGV[1] + #ARGV[2] + #ARGV[3], now)
return 1
`)

// PutBlob implements store.Store.
func (s *Store) PutBlob(ctx context.Context, kind string, b store.Blob) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	keys := append(s.blobKeys(kind), s.k.bytes, s.k.alarm)
	raw, err := putBlobScript.Run(ctx, s.rdb, keys, b.ID, b.Meta, b.Data, s.opts.quota.Bytes, store.BlobCost(b)).Result()
	if err != nil {
		return false, s.wrap(ctx, err)
	}
	if refused, ok := raw.([]any); ok {
		return false, s.quotaError(reply(refused), false)
	}
	n, _ := raw.(int64)
	return n == 1, nil
}

// GetBlob implements store.Store.
func (s *Store) GetBlob(ctx context.Context, kind, id string, withData bool) (store.Blob, error) {
	if err := s.check(ctx); err != nil {
		return store.Blob{}, err
	}
	keys := s.blobKeys(kind)
	pipe := s.rdb.Pipeline()
	meta := pipe.HGet(ctx, keys[0], id)
	var data *redis.StringCmd
	if withData {
		data = pipe.HGet(ctx, keys[1], id)
	}
	_, err := pipe.Exec(ctx)
	if err == redis.Nil || (err == nil && meta.Err() == redis.Nil) {
		return store.Blob{}, &store.NotFoundError{Key: kind + "/" + id}
	}
	if err != nil {
		return store.Blob{}, s.wrap(ctx, err)
	}
	b := store.Blob{ID: id}
	b.Meta, _ = meta.Bytes()
	if data != nil {
		if b.Data, err = data.Bytes(); err != nil {
			return store.Blob{}, s.wrap(ctx, err)
		}
	}
	return b, nil
}

// ListBlobs implements store.Store.
func (s *Store) ListBlobs(ctx context.Context, kind, after string, limit int) ([]store.Blob, bool, error) {
	if err := s.check(ctx); err != nil {
		return nil, false, err
	}
	keys := s.blobKeys(kind)
	ids, more, err := s.rangeIDs(ctx, keys[2], after, limit)
	if err != nil || len(ids) == 0 {
		return nil, false, err
	}
	metas, err := s.rdb.HMGet(ctx, keys[0], ids...).Result()
	if err != nil {
		return nil, false, s.wrap(ctx, err)
	}
	out := make([]store.Blob, 0, len(ids))
	for i, id := range ids {
		m, _ := metas[i].(string)
		out = append(out, store.Blob{ID: id, Meta: []byte(m)})
	}
	return out, more, nil
}

// rangeIDs reads up to limit members of a sorted set of ids (all scored
// 0) after after, and whether more follow.
func (s *Store) rangeIDs(ctx context.Context, key, after string, limit int) ([]string, bool, error) {
	if limit <= 0 {
		return nil, false, nil
	}
	start := "-"
	if after != "" {
		start = "(" + after
	}
	ids, err := s.rdb.ZRangeByLex(ctx, key, &redis.ZRangeBy{Min: start, Max: "+", Count: int64(limit + 1)}).Result()
	if err != nil {
		return nil, false, s.wrap(ctx, err)
	}
	if len(ids) > limit {
		return ids[:limit], true, nil
	}
	return ids, false, nil
}
