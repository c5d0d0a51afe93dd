package redisstore

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pawlcfg/pawl/server/internal/store"
)

// feedBatch is how many revisions one read of the change log covers.
const feedBatch = 1000

// feed follows the store for the local subscribers: one per Store, so one
// per server. A pub/sub notice is only a doorbell; the change log is the
// truth. On a notice newer than what it delivered, on a local write, and
// every head-check interval, its one goroutine reads the log from the
// last delivered revision on and hands the new changes to the
// subscribers. A lost notice, a dropped subscription or an unreachable
// Redis therefore cost latency, never events: the next read repairs it,
// once for the whole server.
type feed struct {
	s      *Store
	pubsub *redis.PubSub
	kick   chan struct{}

	// deliverMu serialises delivery with registration, so that a new
	// subscriber gets every batch after the one being delivered.
	deliverMu sync.Mutex
	subs      map[int]store.CommitFunc
	stales    map[int]func(error)
	nextID    int

	mu        sync.Mutex
	delivered int64         // last revision handed to the subscribers
	progress  chan struct{} // closed and replaced when delivered or failures change
	failures  int64         // failed reads so far
	stale     error         // why the last read failed; nil when it did not
}

func newFeed(s *Store, start int64) *feed {
	return &feed{
		s:         s,
		kick:      make(chan struct{}, 1),
		subs:      make(map[int]store.CommitFunc),
		stales:    make(map[int]func(error)),
		delivered: start,
		progress:  make(chan struct{}),
	}
}

// subscribe subscribes to the store's notices and waits for Redis to
// confirm it.
func (f *feed) subscribe(ctx context.Context) error {
	f.pubsub = f.s.rdb.Subscribe(ctx, f.s.k.channel)
	if _, err := f.pubsub.Receive(ctx); err != nil {
		_ = f.pubsub.Close()
		return f.s.wrap(ctx, err)
	}
	return nil
}

// add registers fn and returns its unregistration.
func (f *feed) add(fn store.CommitFunc) func() { return register(f, f.subs, fn) }

// addStale registers fn to learn when the feed stops following the store
// (with the reason) and when it follows again (with nil). Registered
// while the feed is stale, fn hears the reason at once.
func (f *feed) addStale(fn func(error)) func() {
	stop := register(f, f.stales, fn)
	f.deliverMu.Lock()
	defer f.deliverMu.Unlock()
	if err := f.staleErr(); err != nil {
		fn(err)
	}
	return stop
}

// register puts fn in m, one of the feed's maps of callbacks, under
// deliverMu, and returns its removal.
func register[T any](f *feed, m map[int]T, fn T) func() {
	f.deliverMu.Lock()
	defer f.deliverMu.Unlock()
	id := f.nextID
	f.nextID++
	m[id] = fn
	return func() {
		f.deliverMu.Lock()
		defer f.deliverMu.Unlock()
		delete(m, id)
	}
}

// staleErr returns why the feed's last read failed, or nil.
func (f *feed) staleErr() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stale
}

// poke asks the feed goroutine to read the log now.
func (f *feed) poke() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// await returns once revision rev was delivered to the local subscribers,
// or a read of the log that started after await was called failed (the
// write is committed; the subscribers will get it when Redis answers
// again), or a read found that Redis went back in time, or ctx ends, or the store closes.
func (f *feed) await(ctx context.Context, rev int64) {
	f.mu.Lock()
	failures := f.failures
	f.mu.Unlock()
	f.poke()
	for {
		f.mu.Lock()
		done := f.delivered >= rev || f.failures > failures+1 || (f.failures > failures && errors.Is(f.stale, store.ErrRolledBack))
		progress := f.progress
		f.mu.Unlock()
		if done {
			return
		}
		select {
		case <-progress:
		case <-ctx.Done():
			return
		case <-f.s.ctx.Done():
			return
		}
	}
}

// run is the feed goroutine; it ends with ctx (the store's).
func (f *feed) run(ctx context.Context) {
	defer f.s.wg.Done()
	notices := f.pubsub.Channel(redis.WithChannelHealthCheckInterval(f.s.opts.headCheck * 3))
	tick := time.NewTicker(f.s.opts.headCheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			// go-redis's reader may be blocked handing over a notice (it
			// waits a minute before dropping one): read until it closes
			// the channel, so that it ends with the store.
			_ = f.pubsub.Close()
			for range notices {
			}
			return
		case msg := <-notices:
			rev, err := strconv.ParseInt(msg.Payload, 10, 64)
			if err != nil {
				continue
			}
			if f.s.opts.dropHook != nil && f.s.opts.dropHook(rev) {
				continue
			}
			f.mu.Lock()
			behind := rev > f.delivered
			f.mu.Unlock()
			if behind {
				f.catchUp(ctx)
			}
		case <-f.kick:
			f.catchUp(ctx)
		case <-tick.C:
			f.catchUp(ctx)
		}
	}
}

// catchUp reads the log from the last delivered revision to its head and
// delivers it, a transaction never split across two batches (Changes
// never ends inside one). A compacted stretch (Redis was unreachable
// longer than the log was kept) is skipped: the next batch starts after
// it, as the contract says.
func (f *feed) catchUp(ctx context.Context) {
	f.mu.Lock()
	from := f.delivered + 1
	f.mu.Unlock()
	for {
		ch, err := f.s.feedChanges(ctx, from, feedBatch)
		var compacted *store.CompactedError
		switch {
		case errors.As(err, &compacted):
			f.advance(nil, compacted.CompactRevision)
			from = compacted.CompactRevision + 1
			continue
		case err != nil:
			if ctx.Err() == nil {
				f.fail(err)
			}
			return
		}
		f.s.saw(ch.Through)
		f.advance(ch.Events, ch.Through)
		from = ch.Through + 1
		if len(ch.Events) < feedBatch {
			return
		}
	}
}

// advance delivers events and records through as delivered.
func (f *feed) advance(events []store.Event, through int64) {
	f.deliverMu.Lock()
	if len(events) > 0 {
		for _, fn := range f.subs {
			fn(events)
		}
	}
	f.mu.Lock()
	wasStale := f.stale != nil
	f.stale = nil
	moved := through > f.delivered
	if moved {
		f.delivered = through
	}
	if moved || wasStale {
		close(f.progress)
		f.progress = make(chan struct{})
	}
	f.mu.Unlock()
	if wasStale {
		for _, fn := range f.stales {
			fn(nil)
		}
	}
	f.deliverMu.Unlock()
}

// fail records a failed read, and tells the NotifyStale callbacks when
// the feed was following (or only unreachable, and err is a rollback).
func (f *feed) fail(err error) {
	f.deliverMu.Lock()
	defer f.deliverMu.Unlock()
	f.mu.Lock()
	// A feed stale because Redis was unreachable that finds, once Redis
	// answers, that it went back in time says so too.
	tell := f.stale == nil || (errors.Is(err, store.ErrRolledBack) && !errors.Is(f.stale, store.ErrRolledBack))
	f.stale = err
	f.failures++
	close(f.progress)
	f.progress = make(chan struct{})
	f.mu.Unlock()
	if tell {
		for _, fn := range f.stales {
			fn(err)
		}
	}
}
