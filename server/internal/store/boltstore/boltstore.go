package boltstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// FileName is the name of the database file inside the data directory.
const FileName = "pawl.db"

var (
	bucketMeta = []byte("meta")
	bucketKV   = []byte("kv")
	bucketLog  = []byte("log")
	bucketIdx  = []byte("idx")

	metaRev         = []byte("rev")
	metaCompact     = []byte("compact")
	metaIncarnation = []byte("incarnation")
)

// Store is the bbolt engine. Create one with Open; it is safe for concurrent
// use, and its Close must be called.
type Store struct {
	db   *bolt.DB
	log  *wal
	opts options
	dir  string
	// incarnation names the store's history (store.Status); set at Open.
	incarnation string

	requests chan *request
	ctx      context.Context // cancelled by Close: the writer exits, then the applier
	cancel   context.CancelFunc
	done     chan struct{} // closed when the writer has exited
	wg       sync.WaitGroup
	once     sync.Once

	// pending is the writer's: what the log holds and bbolt not yet.
	pending pending
	// committed is the newest revision in the log, applied the newest in
	// bbolt; reads wait for applied to reach what committed was when they
	// began.
	committed   atomic.Int64
	applied     atomic.Int64
	appliedMu   sync.Mutex
	appliedCh   chan struct{} // closed and replaced when applied moves
	applyQueue  chan []store.Event
	compactions chan compaction
	readWaiting chan struct{} // buffered(1): a read waits for the applier

	failOnce sync.Once
	failed   chan struct{} // closed by fail
	failErr  error

	recovered int // changes Open wrote into bbolt from the log

	// usage is the store's size against its quota.
	usage usage

	subMu  sync.Mutex
	subs   map[int]store.CommitFunc
	nextID int
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the store in dir and starts its writer
// goroutine, which Close stops. A second Open of the same
// directory, from this process or another, fails after a second rather than
// waiting for the lock.
func Open(ctx context.Context, dir string, opts ...Option) (*Store, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("boltstore: create data directory: %w", err)
	}
	path := filepath.Join(dir, FileName)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bolt.FreelistMapType, NoSync: o.noBoltSync})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("boltstore: %s is locked by another process (is another pawld using this data directory?)", path)
		}
		return nil, fmt.Errorf("boltstore: open %s: %w", path, err)
	}
	var incarnation string
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketMeta, bucketKV, bucketLog, bucketIdx} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		var err error
		incarnation, err = ensureIncarnation(tx)
		return err
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("boltstore: initialise %s: %w", path, err)
	}
	if err := removeSnapshotFiles(dir); err != nil {
		_ = db.Close()
		return nil, err
	}
	log, rev, recovered, err := recoverLog(db, o.fs, filepath.Join(dir, WALDir), o.segmentSize)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	s := &Store{
		ctx:         sctx,
		cancel:      cancel,
		db:          db,
		log:         log,
		opts:        o,
		dir:         dir,
		incarnation: incarnation,
		requests:    make(chan *request, o.maxBatch),
		done:        make(chan struct{}),
		subs:        make(map[int]store.CommitFunc),
		appliedCh:   make(chan struct{}),
		applyQueue:  make(chan []store.Event, applyQueueGroups),
		compactions: make(chan compaction),
		readWaiting: make(chan struct{}, 1),
		failed:      make(chan struct{}),
		recovered:   recovered,
	}
	s.usage.quota, s.usage.now, s.usage.pageSize = o.quota, o.clock, int64(db.Info().PageSize)
	s.measure() // a store over its quota raises the alarm again
	s.committed.Store(rev)
	s.applied.Store(rev)
	s.wg.Add(2)
	go s.runWriter()
	go s.runApplier()
	return s, nil
}

// applyQueueGroups bounds how many write groups the log may hold ahead of
// bbolt: past it, the writer waits for the applier.
const applyQueueGroups = 256

// recoverLog opens the write-ahead log in dir and writes into bbolt the
// changes it holds that bbolt does not (those a crash caught between the
// log and bbolt), then lets the log go of them. It returns the log and the
// store's revision and how many changes it wrote into bbolt.
func recoverLog(db *bolt.DB, fsys walFS, dir string, segmentSize int64) (log *wal, rev int64, recovered int, err error) {
	if err := db.View(func(tx *bolt.Tx) error { rev = readStatus(tx).Revision; return nil }); err != nil {
		return nil, 0, 0, fmt.Errorf("boltstore: read the revision: %w", err)
	}
	var replay []store.Event
	log, err = openWAL(fsys, dir, segmentSize, func(events []store.Event) error {
		for _, ev := range events {
			switch next := rev + int64(len(replay)) + 1; {
			case ev.Revision() < next:
				continue // bbolt has it
			case ev.Revision() > next:
				return fmt.Errorf("boltstore: the log jumps from revision %d to %d: %w", next-1, ev.Revision(), errCorrupt)
			}
			replay = append(replay, ev)
		}
		return nil
	})
	if err != nil {
		return nil, 0, 0, err
	}
	recovered = len(replay)
	for len(replay) > 0 {
		n := min(len(replay), maxApplyEvents)
		if err := db.Update(func(tx *bolt.Tx) error { return writeEvents(tx, replay[:n]) }); err != nil {
			_ = log.close()
			return nil, 0, 0, fmt.Errorf("boltstore: apply the log: %w", err)
		}
		rev = replay[n-1].Revision()
		replay = replay[n:]
	}
	if err := log.release(rev); err != nil {
		_ = log.close()
		return nil, 0, 0, err
	}
	return log, rev, recovered, nil
}

// Close stops the writer, answers queued writes with
// store.ErrClosed and closes the file. It is idempotent.
func (s *Store) Close() error {
	var err error
	s.once.Do(func() {
		s.cancel()
		s.wg.Wait() // the writer, then the applier: bbolt holds the log's changes
		if cerr := s.log.close(); cerr != nil {
			err = fmt.Errorf("boltstore: close the log: %w", cerr)
		}
		if cerr := s.db.Close(); cerr != nil {
			err = fmt.Errorf("boltstore: close: %w", cerr)
		}
	})
	return err
}

// Recovered returns how many changes Open found in the write-ahead log
// and not in the database, and wrote there: the writes a crash caught
// between the two.
func (s *Store) Recovered() int { return s.recovered }

// Revision returns the newest revision in the write-ahead log, which every
// read waits for bbolt to reach.
func (s *Store) Revision() int64 { return s.committed.Load() }

// Subscribe registers fn for every batch committed after it returns.
func (s *Store) Subscribe(fn store.CommitFunc) func() {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	id := s.nextID
	s.nextID++
	s.subs[id] = fn
	return func() {
		s.subMu.Lock()
		defer s.subMu.Unlock()
		delete(s.subs, id)
	}
}

// Put implements store.Store.
func (s *Store) Put(ctx context.Context, p store.Put) (store.Result, error) {
	return s.submit(ctx, &request{ctx: ctx, put: &p})
}

// Delete implements store.Store.
func (s *Store) Delete(ctx context.Context, d store.Delete) (store.Result, error) {
	return s.submit(ctx, &request{ctx: ctx, del: &d})
}

// Txn implements store.Store.
func (s *Store) Txn(ctx context.Context, t store.Txn) (store.Result, error) {
	if len(t.Puts) == 0 && len(t.Deletes) == 0 {
		return store.Result{}, fmt.Errorf("boltstore: a transaction needs at least one put or delete")
	}
	return s.submit(ctx, &request{ctx: ctx, txn: &t})
}

// Compact implements store.Store. It returns when the compaction is durable.
func (s *Store) Compact(ctx context.Context, revision int64) error {
	st, err := s.Status(ctx)
	if err != nil {
		return err
	}
	if revision > st.Revision {
		return &store.FutureRevisionError{Requested: revision, Revision: st.Revision}
	}
	// Each request compacts at most compactStepsPerTx entries, so that
	// changes queued behind a long compaction are not held up.
	for st.CompactRevision < revision {
		c := compaction{to: revision, res: make(chan error, 1)}
		select {
		case s.compactions <- c:
		case <-s.done: // the applier may be gone too
			return store.ErrClosed
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := <-c.res; err != nil {
			return err
		}
		if st, err = s.Status(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Status implements store.Store.
func (s *Store) Status(ctx context.Context) (store.Status, error) {
	var st store.Status
	err := s.view(ctx, func(tx *bolt.Tx) error {
		st = readStatus(tx)
		return nil
	})
	st.Incarnation = s.incarnation
	return st, err
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, key string, revision int64) (store.KeyValue, int64, error) {
	var kv store.KeyValue
	var at int64
	err := s.view(ctx, func(tx *bolt.Tx) error {
		st := readStatus(tx)
		var err error
		if at, err = readRevision(st, revision); err != nil {
			return err
		}
		if at == st.Revision {
			v := tx.Bucket(bucketKV).Get([]byte(key))
			if v == nil {
				return &store.NotFoundError{Key: key, Revision: at}
			}
			kv, err = decodeRecord(key, v)
			return err
		}
		var ok bool
		kv, ok, err = keyAt(tx, key, at)
		if err == nil && !ok {
			return &store.NotFoundError{Key: key, Revision: at}
		}
		return err
	})
	return kv, at, err
}

// List implements store.Store.
func (s *Store) List(ctx context.Context, prefix string, revision int64, after string, limit int) (store.Page, error) {
	var page store.Page
	err := s.view(ctx, func(tx *bolt.Tx) error {
		st := readStatus(tx)
		var err error
		if page.Revision, err = readRevision(st, revision); err != nil {
			return err
		}
		if page.Revision == st.Revision {
			return listCurrent(tx, prefix, after, limit, &page)
		}
		return listAt(tx, prefix, after, limit, &page)
	})
	return page, err
}

// Changes implements store.Store.
func (s *Store) Changes(ctx context.Context, from int64, prefix string, limit int) (store.Changes, error) {
	ch := store.Changes{Through: from - 1}
	err := s.view(ctx, func(tx *bolt.Tx) error {
		st := readStatus(tx)
		if from <= st.CompactRevision {
			return &store.CompactedError{Requested: from, CompactRevision: st.CompactRevision, Revision: st.Revision}
		}
		c := tx.Bucket(bucketLog).Cursor()
		n := 0
		inTxn := false // the last entry examined has more of its transaction after it
		for k, v := c.Seek(revKey(from)); k != nil && (n < limit || inTxn); k, v = c.Next() {
			rev := decodeRev(k)
			n++
			ch.Through = rev
			inTxn = eventMore(v)
			_, key, err := eventKey(v)
			if err != nil {
				return fmt.Errorf("revision %d: %w", rev, err)
			}
			if !strings.HasPrefix(key, prefix) {
				continue
			}
			ev, err := decodeEvent(rev, v)
			if err != nil {
				return err
			}
			ch.Events = append(ch.Events, ev)
		}
		return nil
	})
	return ch, err
}

// view runs fn in a read transaction, mapping a closed database to
// store.ErrClosed.
func (s *Store) view(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-s.ctx.Done():
		return store.ErrClosed
	default:
	}
	if err := s.waitApplied(ctx, s.committed.Load()); err != nil {
		return err
	}
	err := s.db.View(fn)
	if errors.Is(err, bolt.ErrDatabaseNotOpen) {
		return store.ErrClosed
	}
	return err
}

func readStatus(tx *bolt.Tx) store.Status {
	m := tx.Bucket(bucketMeta)
	var st store.Status
	if v := m.Get(metaRev); v != nil {
		st.Revision = decodeRev(v)
	}
	if v := m.Get(metaCompact); v != nil {
		st.CompactRevision = decodeRev(v)
	}
	return st
}

// readRevision resolves the revision a read asks for (0: current) and checks
// that it is retained.
func readRevision(st store.Status, revision int64) (int64, error) {
	switch {
	case revision == 0:
		return st.Revision, nil
	case revision > st.Revision:
		return 0, &store.FutureRevisionError{Requested: revision, Revision: st.Revision}
	case revision < st.CompactRevision:
		return 0, &store.CompactedError{Requested: revision, CompactRevision: st.CompactRevision, Revision: st.Revision}
	}
	return revision, nil
}

// lastRevisionOf returns the last revision of key at or below rev, from the
// idx bucket.
func lastRevisionOf(c *bolt.Cursor, key string, rev int64) (int64, bool) {
	k, _ := c.Seek(idxKey(key, rev+1))
	if k == nil {
		k, _ = c.Last()
	} else {
		k, _ = c.Prev()
	}
	if k == nil {
		return 0, false
	}
	got, r, ok := splitIdxKey(k)
	if !ok || got != key {
		return 0, false
	}
	return r, true
}

// keyAt reads key as of revision at from the log.
func keyAt(tx *bolt.Tx, key string, at int64) (store.KeyValue, bool, error) {
	rev, ok := lastRevisionOf(tx.Bucket(bucketIdx).Cursor(), key, at)
	if !ok {
		return store.KeyValue{}, false, nil
	}
	return logPutAt(tx, rev)
}

// logPutAt returns the key written at rev, or false if rev is a delete.
func logPutAt(tx *bolt.Tx, rev int64) (store.KeyValue, bool, error) {
	v := tx.Bucket(bucketLog).Get(revKey(rev))
	if v == nil {
		return store.KeyValue{}, false, fmt.Errorf("boltstore: idx names revision %d, missing from the log: %w", rev, errCorrupt)
	}
	ev, err := decodeEvent(rev, v)
	if err != nil || ev.Type != store.EventPut {
		return store.KeyValue{}, false, err
	}
	return ev.KV, true, nil
}

func listCurrent(tx *bolt.Tx, prefix, after string, limit int, page *store.Page) error {
	c := tx.Bucket(bucketKV).Cursor()
	start := []byte(prefix)
	if after != "" {
		start = []byte(after + "\x00")
	}
	for k, v := c.Seek(start); k != nil && bytes.HasPrefix(k, []byte(prefix)); k, v = c.Next() {
		if len(page.KVs) == limit {
			page.More = true
			return nil
		}
		kv, err := decodeRecord(string(k), v)
		if err != nil {
			return err
		}
		page.KVs = append(page.KVs, kv)
	}
	return nil
}

// listAt lists from the idx bucket: for each key under prefix, the last
// revision at or below the page's revision, if it is a put.
func listAt(tx *bolt.Tx, prefix, after string, limit int, page *store.Page) error {
	c := tx.Bucket(bucketIdx).Cursor()
	start := []byte(prefix)
	if after != "" {
		// after's own entries are after\x00...; every later key sorts at or
		// above after\x01 because keys hold no NUL.
		start = []byte(after + "\x01")
	}
	var cur string
	var curRev int64
	flush := func() (bool, error) {
		if curRev == 0 {
			return false, nil
		}
		kv, ok, err := logPutAt(tx, curRev)
		if err != nil || !ok {
			return false, err
		}
		if len(page.KVs) == limit {
			page.More = true
			return true, nil
		}
		page.KVs = append(page.KVs, kv)
		return false, nil
	}
	for k, _ := c.Seek(start); k != nil && bytes.HasPrefix(k, []byte(prefix)); k, _ = c.Next() {
		key, rev, ok := splitIdxKey(k)
		if !ok {
			return fmt.Errorf("boltstore: idx entry %q: %w", k, errCorrupt)
		}
		if key != cur {
			if full, err := flush(); err != nil || full {
				return err
			}
			cur, curRev = key, 0
		}
		if rev <= page.Revision {
			curRev = rev
		}
	}
	_, err := flush()
	return err
}
