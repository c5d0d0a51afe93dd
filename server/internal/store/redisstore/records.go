package redisstore

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// Records of a kind live in a hash of values by id, a sorted set of the
// ids (for listing in id order) and a sorted set of the ids by expiry
// time: Redis keeps them outside the revision log, and a listing first
// drops those that expired.

func (s *Store) recordKeys(kind string) []string {
	tag := "{" + s.prefix + "}:rec:" + kind + ":"
	return []string{tag + "values", tag + "ids", tag + "expiry", s.k.bytes, s.k.alarm}
}

// putRecordsScript stores records, if the quota admits them with its
// reserve (records are instance leases: quota_admit), counting their
// bytes.
//
//	KEYS: values, ids, expiry, bytes, alarm
//	ARGV: quota, reserve, cost, (id, value, expires at in milliseconds)...
//
// It returns the number of records, or quota_admit's refusal.
var putRecordsScript = redis.NewScript(prelude + `
local now, quota = now_ms(), tonumber(ARGV[1])
local refused = quota_admit(KEYS[4], KEYS[5], quota, tonumber(ARGV[2]), '1', tonumber(ARGV[3]), now)
if refused then return refused end
local delta = 0
for i = 4, #ARGV, 3 do
  local old = redis.call('HSTRLEN', KEYS[1], ARGV[i])
  if old == 0 and redis.call('HEXISTS', KEYS[1], ARGV[i]) == 0 then delta = delta + 3 * #ARGV[i] end
  delta = delta + #ARGV[i + 1] - old
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  redis.call('ZADD', KEYS[2], 0, ARGV[i])
  redis.call('ZADD', KEYS[3], ARGV[i + 2], ARGV[i])
end
quota_add(KEYS[4], KEYS[5], quota, delta, now)
return (#ARGV - 3) / 3
`)

// expireRecordsScript drops up to max records whose expiry passed,
// counting off their bytes.
//
//	KEYS: values, ids, expiry, bytes, alarm
//	ARGV: now in milliseconds, max, quota
var expireRecordsScript = redis.NewScript(prelude + `
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #gone == 0 then return 0 end
local freed = 0
for _, id in ipairs(gone) do freed = freed + 3 * #id + redis.call('HSTRLEN', KEYS[1], id) end
quota_add(KEYS[4], KEYS[5], tonumber(ARGV[3]), -freed, tonumber(ARGV[1]))
redis.call('HDEL', KEYS[1], unpack(gone))
redis.call('ZREM', KEYS[2], unpack(gone))
redis.call('ZREM', KEYS[3], unpack(gone))
return #gone
`)

// PutRecords implements store.Store; up to 500 records are written
// atomically, more in several steps. A record without ExpiresAt expires
// after the record age (WithRecordAge) from its last write.
func (s *Store) PutRecords(ctx context.Context, kind string, recs []store.Record) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if len(recs) == 0 {
		return nil
	}
	const perScript = 500
	keys := s.recordKeys(kind)
	for start := 0; start < len(recs); start += perScript {
		end := min(start+perScript, len(recs))
		args := make([]any, 0, 3+3*(end-start))
		args = append(args, s.opts.quota.Bytes, s.opts.quota.Reserve, store.RecordsCost(recs[start:end]))
		for _, r := range recs[start:end] {
			exp := r.ExpiresAt
			if exp.IsZero() {
				exp = time.Now().Add(s.opts.recordAge)
			}
			args = append(args, r.ID, r.Value, exp.UnixMilli())
		}
		raw, err := putRecordsScript.Run(ctx, s.rdb, keys, args...).Result()
		if err != nil {
			return s.wrap(ctx, err)
		}
		if refused, ok := raw.([]any); ok {
			return s.quotaError(reply(refused), true)
		}
	}
	return nil
}

// ListRecords implements store.Store; it never returns expired records.
func (s *Store) ListRecords(ctx context.Context, kind, after string, limit int) ([]store.Record, bool, error) {
	if err := s.check(ctx); err != nil {
		return nil, false, err
	}
	keys := s.recordKeys(kind)
	now := time.Now().UnixMilli()
	// A listing's first page drops what expired; every page leaves out
	// what it finds expired, so a listing of many pages cleans up once.
	for after == "" {
		n, err := expireRecordsScript.Run(ctx, s.rdb, keys, now, 1000, s.opts.quota.Bytes).Int()
		if err != nil {
			return nil, false, s.wrap(ctx, err)
		}
		if n < 1000 {
			break
		}
	}
	// A page whose records all expired is skipped, so that a page is
	// empty only at the end.
	for {
		ids, more, err := s.rangeIDs(ctx, keys[1], after, limit)
		if err != nil || len(ids) == 0 {
			return nil, false, err
		}
		pipe := s.rdb.Pipeline()
		vals := pipe.HMGet(ctx, keys[0], ids...)
		exps := pipe.ZMScore(ctx, keys[2], ids...)
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return nil, false, s.wrap(ctx, err)
		}
		out := make([]store.Record, 0, len(ids))
		for i, id := range ids {
			v, ok := vals.Val()[i].(string)
			if !ok {
				continue // expired between the two reads
			}
			r := store.Record{ID: id, Value: []byte(v)}
			if ms := exps.Val(); i < len(ms) && ms[i] > 0 {
				if int64(ms[i]) <= now {
					continue // expired, not dropped yet
				}
				r.ExpiresAt = time.UnixMilli(int64(ms[i]))
			}
			out = append(out, r)
		}
		if len(out) > 0 || !more {
			return out, more, nil
		}
		after = ids[len(ids)-1]
	}
}
