package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// Store is the Redis engine. Create one with Open; it is safe for
// concurrent use, and its Close must be called (it does not close the
// Redis client, which the caller owns).
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	k      keyNames
	opts   options
	feed   *feed

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
}

var (
	_ store.Store         = (*Store)(nil)
	_ store.Leaser        = (*Store)(nil)
	_ store.StaleNotifier = (*Store)(nil)
)

// keyNames are the Redis keys of one store. They share the hash tag
// {prefix}, so that they live in one hash slot and every script can touch
// them all: on a Redis Cluster the whole store is one slot (one primary
// takes every write), because its revision counter is store-wide.
type keyNames struct {
	rev, compact, kv, keys, idx, log, channel string
}

// Open returns the store kept in Redis under prefix (many stores can share
// one Redis, each under its own prefix) and starts its feed: a
// subscription to the store's notices and a reader of its change log. It
// fails with store.ErrUnavailable when Redis cannot be reached. rdb should
// not retry commands (MaxRetries -1, as NewClient's): a mutation whose
// connection broke after Redis ran it would otherwise run twice.
func Open(ctx context.Context, rdb redis.UniversalClient, prefix string, opts ...Option) (*Store, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if prefix == "" || strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("redisstore: prefix %q: must be non-empty and without braces", prefix)
	}
	s := &Store{rdb: rdb, prefix: prefix, opts: o}
	tag := "{" + prefix + "}:"
	s.k = keyNames{rev: tag + "rev", compact: tag + "compact", kv: tag + "kv", keys: tag + "keys", idx: tag + "idx", log: tag + "log", channel: tag + "notices"}
	if err := rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redisstore: %w", s.wrap(ctx, err))
	}
	st, err := s.Status(ctx)
	if err != nil {
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.feed = newFeed(s, st.Revision)
	if err := s.feed.subscribe(ctx); err != nil {
		s.cancel()
		return nil, err
	}
	s.wg.Add(1)
	go s.feed.run(s.ctx)
	return s, nil
}

// Close stops the feed. Calls in flight finish; later ones fail with
// store.ErrClosed. Close is idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.cancel()
	s.wg.Wait()
	return nil
}

// Subscribe implements store.Store.
func (s *Store) Subscribe(fn store.CommitFunc) func() { return s.feed.add(fn) }

// NotifyStale implements store.StaleNotifier.
func (s *Store) NotifyStale(fn func(err error)) func() { return s.feed.addStale(fn) }

// FeedError reports why the feed cannot follow the store right now (Redis
// unreachable), or nil when it is current: watchers are told they are
// stale while it is not nil.
func (s *Store) FeedError() error { return s.feed.staleErr() }

// wrap turns a client error into the contract's: a closed store's
// ErrClosed, the caller's context error, a Redis error reply as it is,
// anything else (the connection) ErrUnavailable.
func (s *Store) wrap(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if s.closed.Load() {
		return store.ErrClosed
	}
	if ctxErr := ctx.Err(); ctxErr != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return ctxErr
	}
	var reply redis.Error
	if errors.As(err, &reply) && !strings.HasPrefix(reply.Error(), "LOADING") && !strings.HasPrefix(reply.Error(), "CLUSTERDOWN") &&
		!strings.HasPrefix(reply.Error(), "TRYAGAIN") && !strings.HasPrefix(reply.Error(), "MASTERDOWN") {
		return fmt.Errorf("redisstore: %w", err)
	}
	return fmt.Errorf("%w: redis: %v", store.ErrUnavailable, err)
}

// check fails with ErrClosed after Close, and with ctx's error.
func (s *Store) check(ctx context.Context) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return ctx.Err()
}

func (s *Store) fence(ctx context.Context) (leaseKey, token string) {
	f, ok := store.FenceFrom(ctx)
	if !ok {
		return s.leaseKey("none"), ""
	}
	return s.leaseKey(f.Lease), strconv.FormatInt(f.Token, 10)
}

func (s *Store) leaseKey(name string) string { return "{" + s.prefix + "}:lease:" + name }

// op is one write of a mutation.
type op struct {
	del    bool
	key    string
	value  []byte
	expect *int64
}

// mutate runs mutateScript and, once it committed, waits until this
// store's feed delivered it, so that local subscribers have it before the
// writer is answered.
func (s *Store) mutate(ctx context.Context, single bool, compares []store.Compare, unchanged []store.Unchanged, ops []op) (store.Result, error) {
	if err := s.check(ctx); err != nil {
		return store.Result{}, err
	}
	leaseKey, token := s.fence(ctx)
	mode := "txn"
	if single {
		mode = "single"
	}
	args := []any{s.k.channel, token, mode, len(compares)}
	for _, c := range compares {
		args = append(args, c.Key, c.ModRevision)
	}
	args = append(args, len(unchanged))
	for _, u := range unchanged {
		args = append(args, u.Prefix, u.Since)
	}
	args = append(args, len(ops))
	for _, o := range ops {
		kind, has, expect := "P", "0", int64(0)
		if o.del {
			kind = "D"
		}
		if o.expect != nil {
			has, expect = "1", *o.expect
		}
		args = append(args, kind, o.key, o.value, has, expect)
	}
	keys := []string{s.k.rev, s.k.compact, s.k.kv, s.k.keys, s.k.idx, s.k.log, leaseKey}
	res, err := s.runMutation(ctx, keys, args)
	if err != nil {
		return store.Result{}, err
	}
	str := func(i int) string {
		if i < len(res) {
			if v, ok := res[i].(string); ok {
				return v
			}
		}
		return ""
	}
	num := func(i int) int64 {
		n, _ := strconv.ParseInt(str(i), 10, 64)
		return n
	}
	switch str(0) {
	case "OK":
		rev := num(1)
		result := store.Result{Revision: rev}
		if single {
			if prev := str(2); prev != "" {
				kv, err := decodeRecord(ops[0].key, []byte(prev))
				if err != nil {
					return store.Result{}, err
				}
				result.Prev = &kv
			}
		}
		s.feed.await(ctx, rev)
		return result, nil
	case "MISMATCH":
		return store.Result{}, &store.RevisionMismatchError{Key: str(1), Expected: num(2), Actual: num(3)}
	case "CHANGED":
		return store.Result{}, &store.ChangedError{Prefix: str(1), Since: num(2), Key: str(3), Revision: num(4)}
	case "NOTFOUND":
		return store.Result{}, &store.NotFoundError{Key: str(1), Revision: num(2)}
	case "FENCED":
		return store.Result{}, store.ErrFenced
	}
	return store.Result{}, fmt.Errorf("redisstore: unexpected answer %v", res)
}

// runMutation runs mutateScript and, with WithReplicaAcks, Redis WAIT
// after it on the same connection (WAIT counts the replicas that have
// what its own connection wrote), failing with store.ErrUnavailable when
// too few confirm.
func (s *Store) runMutation(ctx context.Context, keys []string, args []any) ([]any, error) {
	if s.opts.replicaAcks == 0 {
		res, err := mutateScript.Run(ctx, s.rdb, keys, args...).Slice()
		return res, s.wrap(ctx, err)
	}
	for attempt := 0; ; attempt++ {
		pipe := s.rdb.Pipeline()
		run := pipe.EvalSha(ctx, mutateScript.Hash(), keys, args...)
		wait := pipe.Do(ctx, "WAIT", s.opts.replicaAcks, s.opts.replicaWait.Milliseconds())
		_, _ = pipe.Exec(ctx)
		res, err := run.Slice()
		if err != nil && attempt == 0 && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			// A new primary (after a failover) has not seen the script.
			if err := mutateScript.Load(ctx, s.rdb).Err(); err != nil {
				return nil, s.wrap(ctx, err)
			}
			continue
		}
		if err != nil {
			return nil, s.wrap(ctx, err)
		}
		if v, _ := res[0].(string); v != "OK" {
			return res, nil // refused: nothing was written
		}
		n, err := wait.Int64()
		if err != nil {
			return nil, fmt.Errorf("%w: the write is committed on the primary, but waiting for replicas failed: %v", store.ErrUnavailable, err)
		}
		if int(n) < s.opts.replicaAcks {
			return nil, fmt.Errorf("%w: %d of %d replicas confirmed the write within %s (it is committed on the primary, and a failover may lose it)",
				store.ErrUnavailable, n, s.opts.replicaAcks, s.opts.replicaWait)
		}
		return res, nil
	}
}

// Put implements store.Store.
func (s *Store) Put(ctx context.Context, p store.Put) (store.Result, error) {
	return s.mutate(ctx, true, nil, nil, []op{{key: p.Key, value: p.Value, expect: p.ExpectModRevision}})
}

// Delete implements store.Store.
func (s *Store) Delete(ctx context.Context, d store.Delete) (store.Result, error) {
	return s.mutate(ctx, true, nil, nil, []op{{del: true, key: d.Key, expect: d.ExpectModRevision}})
}

// Txn implements store.Store.
func (s *Store) Txn(ctx context.Context, t store.Txn) (store.Result, error) {
	if len(t.Puts) == 0 && len(t.Deletes) == 0 {
		return store.Result{}, errors.New("redisstore: a transaction needs at least one put or delete")
	}
	ops := make([]op, 0, len(t.Puts)+len(t.Deletes))
	for _, p := range t.Puts {
		ops = append(ops, op{key: p.Key, value: p.Value})
	}
	for _, key := range t.Deletes {
		ops = append(ops, op{del: true, key: key})
	}
	return s.mutate(ctx, false, t.Compares, t.Unchanged, ops)
}

// refusal maps a read script's refusal to the contract's errors.
func refusal(res []any) error {
	str := func(i int) string {
		if i < len(res) {
			v, _ := res[i].(string)
			return v
		}
		return ""
	}
	num := func(i int) int64 {
		n, _ := strconv.ParseInt(str(i), 10, 64)
		return n
	}
	switch str(0) {
	case "COMPACTED":
		return &store.CompactedError{Requested: num(1), CompactRevision: num(2), Revision: num(3)}
	case "FUTURE":
		return &store.FutureRevisionError{Requested: num(1), Revision: num(2)}
	}
	return fmt.Errorf("redisstore: unexpected answer %v", res)
}

// Status implements store.Store.
func (s *Store) Status(ctx context.Context) (store.Status, error) {
	if err := s.check(ctx); err != nil {
		return store.Status{}, err
	}
	res, err := statusScript.Run(ctx, s.rdb, []string{s.k.rev, s.k.compact}).StringSlice()
	if err != nil {
		return store.Status{}, s.wrap(ctx, err)
	}
	rev, _ := strconv.ParseInt(res[0], 10, 64)
	compact, _ := strconv.ParseInt(res[1], 10, 64)
	return store.Status{Revision: rev, CompactRevision: compact}, nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, key string, revision int64) (store.KeyValue, int64, error) {
	if err := s.check(ctx); err != nil {
		return store.KeyValue{}, 0, err
	}
	res, err := getScript.Run(ctx, s.rdb, []string{s.k.rev, s.k.compact, s.k.kv, s.k.idx, s.k.log}, key, revision).Slice()
	if err != nil {
		return store.KeyValue{}, 0, s.wrap(ctx, err)
	}
	if v, _ := res[0].(string); v != "OK" {
		return store.KeyValue{}, 0, refusal(res)
	}
	at, _ := strconv.ParseInt(res[1].(string), 10, 64)
	switch res[2].(string) {
	case "R":
		kv, err := decodeRecord(key, []byte(res[3].(string)))
		return kv, at, err
	case "E":
		ev, err := decodeEvent([]byte(res[3].(string)))
		return ev.KV, at, err
	}
	return store.KeyValue{}, at, &store.NotFoundError{Key: key, Revision: at}
}

// List implements store.Store.
func (s *Store) List(ctx context.Context, prefix string, revision int64, after string, limit int) (store.Page, error) {
	if err := s.check(ctx); err != nil {
		return store.Page{}, err
	}
	res, err := listScript.Run(ctx, s.rdb, []string{s.k.rev, s.k.compact, s.k.kv, s.k.keys, s.k.idx, s.k.log},
		prefix, after, revision, limit).Slice()
	if err != nil {
		return store.Page{}, s.wrap(ctx, err)
	}
	if v, _ := res[0].(string); v != "OK" {
		return store.Page{}, refusal(res)
	}
	var page store.Page
	page.Revision, _ = strconv.ParseInt(res[1].(string), 10, 64)
	page.More = res[2].(string) == "1"
	kind, _ := res[3].(string)
	for i := 4; i+1 < len(res); i += 2 {
		key := res[i].(string)
		val, _ := res[i+1].(string)
		if kind == "R" {
			kv, err := decodeRecord(key, []byte(val))
			if err != nil {
				return store.Page{}, err
			}
			page.KVs = append(page.KVs, kv)
			continue
		}
		ev, err := decodeEvent([]byte(val))
		if err != nil {
			return store.Page{}, err
		}
		page.KVs = append(page.KVs, ev.KV)
	}
	return page, nil
}

// Changes implements store.Store.
func (s *Store) Changes(ctx context.Context, from int64, prefix string, limit int) (store.Changes, error) {
	ch, _, err := s.readLog(ctx, from, prefix, limit)
	return ch, err
}

// readLog reads the change log as Changes does, and reports whether more
// changes of the last event's transaction follow it.
func (s *Store) readLog(ctx context.Context, from int64, prefix string, limit int) (store.Changes, bool, error) {
	if err := s.check(ctx); err != nil {
		return store.Changes{}, false, err
	}
	if limit <= 0 {
		limit = 1
	}
	res, err := changesScript.Run(ctx, s.rdb, []string{s.k.rev, s.k.compact, s.k.log}, from, prefix, limit).Slice()
	if err != nil {
		return store.Changes{}, false, s.wrap(ctx, err)
	}
	if v, _ := res[0].(string); v != "OK" {
		return store.Changes{}, false, refusal(res)
	}
	ch := store.Changes{}
	ch.Through, _ = strconv.ParseInt(res[1].(string), 10, 64)
	var open bool
	if n := len(res) - 2; n > 0 {
		ch.Events = make([]store.Event, 0, n)
	}
	for _, v := range res[2:] {
		ev, more, err := decodeLogEvent([]byte(v.(string)))
		if err != nil {
			return store.Changes{}, false, err
		}
		ch.Events = append(ch.Events, ev)
		open = more
	}
	return ch, open, nil
}

// compactSteps bounds how many revisions one script compacts, so that
// Redis is never held for long: a long backlog takes several calls.
const compactSteps = 2048

// Compact implements store.Store. A fence in ctx guards it.
func (s *Store) Compact(ctx context.Context, revision int64) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	leaseKey, token := s.fence(ctx)
	for {
		res, err := compactScript.Run(ctx, s.rdb, []string{s.k.rev, s.k.compact, s.k.idx, s.k.log, leaseKey}, revision, compactSteps, token).Slice()
		if err != nil {
			return s.wrap(ctx, err)
		}
		switch v, _ := res[0].(string); v {
		case "FENCED":
			return store.ErrFenced
		case "OK":
			done, _ := strconv.ParseInt(res[1].(string), 10, 64)
			if done >= revision {
				return nil
			}
		default:
			return refusal(res)
		}
	}
}

// RevisionAt implements store.Store.
func (s *Store) RevisionAt(ctx context.Context, t time.Time) (int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	res, err := revisionAtScript.Run(ctx, s.rdb, []string{s.k.rev, s.k.compact, s.k.log}, t.UnixMilli()).Text()
	if err != nil {
		return 0, s.wrap(ctx, err)
	}
	return strconv.ParseInt(res, 10, 64)
}

// AcquireLease implements store.Leaser.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (int64, bool, error) {
	if err := s.check(ctx); err != nil {
		return 0, false, err
	}
	res, err := leaseScript.Run(ctx, s.rdb, []string{s.leaseKey(name)}, holder, ttl.Milliseconds()).StringSlice()
	if err != nil {
		return 0, false, s.wrap(ctx, err)
	}
	token, _ := strconv.ParseInt(res[1], 10, 64)
	return token, res[0] == "1", nil
}

// ReleaseLease implements store.Leaser.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	return s.wrap(ctx, releaseLeaseScript.Run(ctx, s.rdb, []string{s.leaseKey(name)}, holder).Err())
}
