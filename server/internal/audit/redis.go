package audit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pawlcfg/pawl/sdk/auditchain"
)

// Redis is the audit log of a store kept in Redis, shared by every replica
// of it. Create it with OpenRedis.
type Redis struct {
	rdb        redis.UniversalClient
	list, head string
	w          *writer
	// seen is the head this replica last saw; only the writer's goroutine
	// reads or writes it after OpenRedis.
	seen auditchain.Chain
}

var _ Log = (*Redis)(nil)

// appendScript appends lines to the log only if the head is still the
// one they were chained onto. KEYS: list, head. ARGV: the expected head
// ("" for none), the new head, the lines. It returns {1} when it appended,
// or {0, head} with the head it found.
var appendScript = redis.NewScript(`
local head = redis.call('GET', KEYS[2]) or ''
if head ~= ARGV[1] then
  return {0, head}
end
redis.call('RPUSH', KEYS[1], unpack(ARGV, 3))
redis.call('SET', KEYS[2], ARGV[2])
return {1}
`)

// maxAppendAttempts bounds how often a batch is chained again onto a head
// another replica moved: every failed attempt is another replica's
// success, so this many in a row means the replicas append far faster
// than this one can follow.
const maxAppendAttempts = 100

// retryPause is how long a batch waits after Redis could not be reached
// before it tries again, within commitTimeout.
const retryPause = 100 * time.Millisecond

// commitTimeout bounds one batch's time in Redis, retries included.
const commitTimeout = 10 * time.Second

// OpenRedis opens the audit log of the Redis store under prefix (the
// store's prefix: its keys share the store's hash tag, {prefix}:audit and
// {prefix}:audit:head, and compaction never touches them). rdb stays the
// caller's to close, after Close.
func OpenRedis(ctx context.Context, rdb redis.UniversalClient, prefix string, opts ...Option) (*Redis, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if prefix == "" || strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("audit: prefix %q: must be non-empty and without braces", prefix)
	}
	tag := "{" + prefix + "}:"
	l := &Redis{rdb: rdb, list: tag + "audit", head: tag + "audit:head"}
	h, err := rdb.Get(ctx, l.head).Result()
	if err != nil && err != redis.Nil {
		return nil, fmt.Errorf("audit: read the head of the log in Redis: %w", err)
	}
	if l.seen, err = parseHead(h); err != nil {
		return nil, err
	}
	l.w = startWriter(o.maxBatch, l.commit)
	return l, nil
}

func formatHead(c auditchain.Chain) string {
	if c.Sequence == 0 {
		return ""
	}
	return strconv.FormatInt(c.Sequence, 10) + " " + c.Hash
}

func parseHead(s string) (auditchain.Chain, error) {
	if s == "" {
		return auditchain.Chain{}, nil
	}
	seq, hash, ok := strings.Cut(s, " ")
	n, err := strconv.ParseInt(seq, 10, 64)
	if !ok || err != nil || n <= 0 {
		return auditchain.Chain{}, fmt.Errorf("audit: the head of the log in Redis is %q, not SEQUENCE HASH", s)
	}
	return auditchain.Chain{Sequence: n, Hash: hash}, nil
}

// Append implements Log.
func (l *Redis) Append(ctx context.Context, r auditchain.Record) (auditchain.Record, error) {
	return l.w.append(ctx, r)
}

// AppendAsync implements Log.
func (l *Redis) AppendAsync(ctx context.Context, r auditchain.Record, done func(auditchain.Record, error)) {
	l.w.appendAsync(ctx, r, done)
}

// commit chains the batch onto the head last seen and appends it; when
// another replica moved the head, it chains the batch again onto the head
// found. It runs on the writer's goroutine.
func (l *Redis) commit(ctx context.Context, batch []*pending) error {
	ctx, cancel := context.WithTimeout(ctx, commitTimeout)
	defer cancel()
	for range maxAppendAttempts {
		lines, head := chain(l.seen, batch)
		args := make([]any, 0, 2+len(lines))
		args = append(args, formatHead(l.seen), formatHead(head))
		for _, b := range lines {
			args = append(args, b)
		}
		res, err := appendScript.Run(ctx, l.rdb, []string{l.list, l.head}, args...).Slice()
		if err != nil {
			// The script may have run before the connection broke: the
			// next attempt finds the head there, and knows.
			select {
			case <-ctx.Done():
				return fmt.Errorf("audit: append to the log in Redis: %w", err)
			case <-time.After(retryPause):
				continue
			}
		}
		if n, _ := res[0].(int64); n == 1 {
			l.seen = head
			return nil
		}
		found, _ := res[1].(string)
		if found == formatHead(head) {
			l.seen = head // this batch, appended by an attempt whose answer was lost
			return nil
		}
		if l.seen, err = parseHead(found); err != nil {
			return err
		}
	}
	return fmt.Errorf("audit: append to the log in Redis: the head moved %d times in a row", maxAppendAttempts)
}

// Read implements Log.
func (l *Redis) Read(ctx context.Context, after Cursor, limit int) ([]Entry, error) {
	if after.Position < 0 || after.Offset != 0 || limit <= 0 {
		return nil, ErrCursor
	}
	vals, err := l.rdb.LRange(ctx, l.list, after.Position, after.Position+int64(limit)-1).Result()
	if err != nil {
		return nil, fmt.Errorf("audit: read the log in Redis: %w", err)
	}
	out := make([]Entry, len(vals))
	for i, v := range vals {
		pos := after.Position + int64(i) + 1
		out[i] = Entry{Stored: auditchain.ParseLine(pos, []byte(v)), Next: Cursor{Position: pos}}
	}
	return out, nil
}

// Close implements Log. It leaves the Redis client open.
func (l *Redis) Close() error {
	l.w.stop()
	return nil
}
