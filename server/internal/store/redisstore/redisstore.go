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

	// who names this replica in the fault it records.
	who string
	// high is the highest revision this replica handed out (delivered
	// to subscribers, acknowledged to a writer, or read at): Redis at a
	// lower head has gone back in time.
	high atomic.Int64
	// incarnation is the identity of the data set this replica follows.
	incarnation atomic.Pointer[string]
	// accepted is what WithAcceptRollback accepted at Open, or nil.
	accepted *Acceptance

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
	incarnation, fault                        string
	// bytes is the store's size (store.Quota), alarm its NOSPACE alarm.
	bytes, alarm string
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
	s.k = keyNames{rev: tag + "rev", compact: tag + "compact", kv: tag + "kv", keys: tag + "keys", idx: tag + "idx", log: tag + "log", channel: tag + "notices",
		incarnation: tag + "incarnation", fault: tag + "rollback", bytes: tag + "bytes", alarm: tag + "alarm"}
	s.who = o.name
	if s.who == "" {
		s.who = newID()
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redisstore: %w", s.wrap(ctx, err))
	}
	if o.waitAOF {
		if err := s.checkWaitAOF(ctx); err != nil {
			return nil, err
		}
	}
	rev, fault, err := s.openIncarnation(ctx)
	if err != nil {
		return nil, err
	}
	if err := seedBytesScript.Run(ctx, rdb, []string{s.k.bytes, s.k.kv, s.k.keys, s.k.log, s.k.idx}).Err(); err != nil && err != redis.Nil {
		return nil, fmt.Errorf("redisstore: count the store's size: %w", s.wrap(ctx, err))
	}
	if fault != nil && o.acceptRollback {
		if s.accepted, err = s.accept(ctx); err != nil {
			return nil, err
		}
		if rev, fault, err = s.openIncarnation(ctx); err != nil {
			return nil, err
		}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.feed = newFeed(s, rev)
	if fault != nil {
		s.feed.fail(fault) // stale from the start, until an operator accepts the fault
	}
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
func (s *Store) mutate(ctx context.Context, single bool, compares []store.Compare, unchanged []store.Unchanged, ops []op) (_ store.Result, err error) {
	if observe := s.opts.observe; observe != nil {
		start := time.Now()
		defer func() { observe(time.Since(start), err) }()
	}
	if err := s.check(ctx); err != nil {
		return store.Result{}, err
	}
	leaseKey, token := s.fence(ctx)
	mode := "txn"
	if single {
		mode = "single"
	}
	var puts []store.Put
	for _, o := range ops {
		if !o.del {
			puts = append(puts, store.Put{Key: o.key, Value: o.value})
		}
	}
	q := s.opts.quota
	reserved := q.MayUseReserve(puts)
	args := []any{s.k.channel, token, mode, s.high.Load(), *s.incarnation.Load(), s.who,
		q.Bytes, q.Reserve, flag(reserved), store.TxnCost(puts), len(compares)}
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
	keys := []string{s.k.rev, s.k.compact, s.k.kv, s.k.keys, s.k.idx, s.k.log, leaseKey, s.k.incarnation, s.k.fault, s.k.bytes, s.k.alarm}
	raw, err := s.runMutation(ctx, keys, args)
	if err != nil {
		return store.Result{}, err
	}
	res := reply(raw)
	switch res.str(0) {
	case "OK":
		rev := res.num(1)
		s.saw(rev)
		result := store.Result{Revision: rev}
		if single {
			if prev := res.str(2); prev != "" {
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
		return store.Result{}, &store.RevisionMismatchError{Key: res.str(1), Expected: res.num(2), Actual: res.num(3)}
	case "CHANGED":
		return store.Result{}, &store.ChangedError{Prefix: res.str(1), Since: res.num(2), Key: res.str(3), Revision: res.num(4)}
	case "NOTFOUND":
		return store.Result{}, &store.NotFoundError{Key: res.str(1), Revision: res.num(2)}
	case "FENCED":
		return store.Result{}, store.ErrFenced
	case "ROLLEDBACK":
		return store.Result{}, s.rolledBack(res[1:])
	case "QUOTA":
		return store.Result{}, s.quotaError(res, reserved)
	}
	return store.Result{}, fmt.Errorf("redisstore: unexpected answer %v", res)
}

// runMutation runs mutateScript and, with WithReplicaAcks or
// WithWaitAOF, Redis WAIT (or WAITAOF) after it in the same pipeline, on
// the connection that wrote (WAIT counts the replicas that have what its
// own connection wrote; on a Cluster, the connection to the primary of
// the store's slot), failing with store.ErrUnavailable when too few
// confirm.
func (s *Store) runMutation(ctx context.Context, keys []string, args []any) ([]any, error) {
	if s.opts.replicaAcks == 0 && !s.opts.waitAOF {
		res, err := mutateScript.Run(ctx, s.rdb, keys, args...).Slice()
		return res, s.wrap(ctx, err)
	}
	var node redis.Cmdable = s.rdb
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		// A keyless WAIT in a cluster pipeline goes to any node: send both
		// to the primary of the store's slot.
		primary, err := cc.MasterForKey(ctx, s.k.rev)
		if err != nil {
			return nil, s.wrap(ctx, err)
		}
		node = primary
	}
	for attempt := 0; ; attempt++ {
		pipe := node.Pipeline()
		run := pipe.EvalSha(ctx, mutateScript.Hash(), keys, args...)
		var wait *redis.Cmd
		if s.opts.waitAOF {
			wait = pipe.Do(ctx, "WAITAOF", 1, s.opts.replicaAcks, s.opts.replicaWait.Milliseconds())
		} else {
			wait = pipe.Do(ctx, "WAIT", s.opts.replicaAcks, s.opts.replicaWait.Milliseconds())
		}
		_, _ = pipe.Exec(ctx)
		res, err := run.Slice()
		if err != nil && attempt == 0 && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			// A new primary (after a failover) has not seen the script.
			if err := mutateScript.Load(ctx, node).Err(); err != nil {
				return nil, s.wrap(ctx, err)
			}
			continue
		}
		if err != nil {
			return nil, s.wrap(ctx, err)
		}
		if reply(res).str(0) != "OK" {
			return res, nil // refused: nothing was written
		}
		local, replicas, err := waitCounts(wait)
		if err != nil {
			return nil, fmt.Errorf("%w: the write is committed on the primary, but waiting for its fsync or replicas failed: %v", store.ErrUnavailable, err)
		}
		if s.opts.waitAOF && local < 1 {
			return nil, fmt.Errorf("%w: Redis did not fsync the write to its append-only file within %s (it is committed in memory, and a crash may lose it)",
				store.ErrUnavailable, s.opts.replicaWait)
		}
		if replicas < int64(s.opts.replicaAcks) {
			return nil, fmt.Errorf("%w: %d of %d replicas confirmed the write within %s (it is committed on the primary, and a failover may lose it)",
				store.ErrUnavailable, replicas, s.opts.replicaAcks, s.opts.replicaWait)
		}
		return res, nil
	}
}

// waitCounts reads WAIT's answer (replicas) or WAITAOF's (local fsyncs,
// replicas).
func waitCounts(cmd *redis.Cmd) (local, replicas int64, err error) {
	v, err := cmd.Result()
	if err != nil {
		return 0, 0, err
	}
	switch v := v.(type) {
	case int64:
		return 0, v, nil
	case []any:
		if len(v) == 2 {
			l, _ := v[0].(int64)
			r, _ := v[1].(int64)
			return l, r, nil
		}
	}
	return 0, 0, fmt.Errorf("unexpected answer %v", v)
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

// reply is a script's answer: strings (numbers in decimal), read by
// position.
type reply []any

// str is the i-th element, or "" when there is none or it is not a string.
func (r reply) str(i int) string {
	if i < len(r) {
		v, _ := r[i].(string)
		return v
	}
	return ""
}

// num is the i-th element as a number, or 0.
func (r reply) num(i int) int64 {
	n, _ := strconv.ParseInt(r.str(i), 10, 64)
	return n
}

// refusal maps a read script's refusal to the contract's errors.
func refusal(r reply) error {
	switch r.str(0) {
	case "COMPACTED":
		return &store.CompactedError{Requested: r.num(1), CompactRevision: r.num(2), Revision: r.num(3)}
	case "FUTURE":
		return &store.FutureRevisionError{Requested: r.num(1), Revision: r.num(2)}
	}
	return fmt.Errorf("redisstore: unexpected answer %v", []any(r))
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
	s.saw(rev)
	return store.Status{Revision: rev, CompactRevision: compact, Incarnation: s.Incarnation()}, nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, key string, revision int64) (store.KeyValue, int64, error) {
	if err := s.check(ctx); err != nil {
		return store.KeyValue{}, 0, err
	}
	raw, err := getScript.Run(ctx, s.rdb, []string{s.k.rev, s.k.compact, s.k.kv, s.k.idx, s.k.log}, key, revision).Slice()
	if err != nil {
		return store.KeyValue{}, 0, s.wrap(ctx, err)
	}
	res := reply(raw)
	if res.str(0) != "OK" {
		return store.KeyValue{}, 0, refusal(res)
	}
	at := res.num(1)
	s.saw(at)
	switch res.str(2) {
	case "R":
		kv, err := decodeRecord(key, []byte(res.str(3)))
		return kv, at, err
	case "E":
		ev, err := decodeEvent([]byte(res.str(3)))
		return ev.KV, at, err
	}
	return store.KeyValue{}, at, &store.NotFoundError{Key: key, Revision: at}
}

// List implements store.Store.
func (s *Store) List(ctx context.Context, prefix string, revision int64, after string, limit int) (store.Page, error) {
	if err := s.check(ctx); err != nil {
		return store.Page{}, err
	}
	raw, err := listScript.Run(ctx, s.rdb, []string{s.k.rev, s.k.compact, s.k.kv, s.k.keys, s.k.idx, s.k.log},
		prefix, after, revision, limit).Slice()
	if err != nil {
		return store.Page{}, s.wrap(ctx, err)
	}
	res := reply(raw)
	if res.str(0) != "OK" {
		return store.Page{}, refusal(res)
	}
	page := store.Page{Revision: res.num(1), More: res.str(2) == "1"}
	s.saw(page.Revision)
	kind := res.str(3)
	for i := 4; i+1 < len(res); i += 2 {
		key, val := res.str(i), res.str(i+1)
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

// Changes implements store.Store. The script reads on past limit to the
// end of a transaction, so a batch never ends inside one.
func (s *Store) Changes(ctx context.Context, from int64, prefix string, limit int) (store.Changes, error) {
	if err := s.check(ctx); err != nil {
		return store.Changes{}, err
	}
	if limit <= 0 {
		limit = 1
	}
	res, err := changesScript.Run(ctx, s.rdb, []string{s.k.rev, s.k.compact, s.k.log}, from, prefix, limit).Slice()
	if err != nil {
		return store.Changes{}, s.wrap(ctx, err)
	}
	return parseChanges(res)
}

// parseChanges reads changesScript's answer.
func parseChanges(res []any) (store.Changes, error) {
	if reply(res).str(0) != "OK" {
		return store.Changes{}, refusal(res)
	}
	ch := store.Changes{Through: reply(res).num(1)}
	if n := len(res) - 2; n > 0 {
		ch.Events = make([]store.Event, 0, n)
	}
	for _, v := range res[2:] {
		ev, err := decodeEvent([]byte(v.(string)))
		if err != nil {
			return store.Changes{}, err
		}
		ch.Events = append(ch.Events, ev)
	}
	return ch, nil
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
		raw, err := compactScript.Run(ctx, s.rdb, []string{s.k.rev, s.k.compact, s.k.idx, s.k.log, leaseKey, s.k.bytes, s.k.alarm},
			revision, compactSteps, token, s.opts.quota.Bytes).Slice()
		if err != nil {
			return s.wrap(ctx, err)
		}
		res := reply(raw)
		switch res.str(0) {
		case "FENCED":
			return store.ErrFenced
		case "OK":
			if res.num(1) >= revision {
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
