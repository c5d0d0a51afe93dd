package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pawlcfg/pawl/internal/testkit/redistest"
	"github.com/pawlcfg/pawl/server/internal/records"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/rollout"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/store/boltstore"
	"github.com/pawlcfg/pawl/server/internal/store/redisstore"
)

// batchStore counts the transactions that write ACKs, can hold the first
// one until the test has queued more behind it, and can run a hook before
// each, in the writing goroutine (the batches').
type batchStore struct {
	store.Store
	mu   sync.Mutex
	txns int
	hold chan struct{} // closed to let the held first transaction go
	held chan struct{} // closed when the first transaction is held
	hook func(t store.Txn)
}

func newBatchStore(st store.Store) *batchStore { return &batchStore{Store: st} }

func writesAcks(t store.Txn) bool {
	for _, p := range t.Puts {
		if strings.Contains(p.Key, "/acks/") {
			return true
		}
	}
	return false
}

func (s *batchStore) Txn(ctx context.Context, t store.Txn) (store.Result, error) {
	if writesAcks(t) {
		s.mu.Lock()
		s.txns++
		first, hold, held, hook := s.txns == 1, s.hold, s.held, s.hook
		s.mu.Unlock()
		if first && hold != nil {
			close(held)
			<-hold
		}
		if hook != nil {
			hook(t)
		}
	}
	return s.Store.Txn(ctx, t)
}

// holdFirst makes the first ACK transaction wait; the returned function
// lets it go.
func (s *batchStore) holdFirst() (held <-chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold, s.held = make(chan struct{}), make(chan struct{})
	return s.held, sync.OnceFunc(func() { close(s.hold) })
}

func (s *batchStore) ackTxns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.txns
}

func (s *batchStore) setHook(hook func(t store.Txn)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hook = hook
}

// engine opens a store and, for checks, a second handle on the same data
// (on Redis a store of its own over its own connection; bbolt allows one
// handle, so the same).
type engine func(t *testing.T) (st, fresh store.Store)

var engines = map[string]engine{
	"bolt": func(t *testing.T) (store.Store, store.Store) {
		st, err := boltstore.Open(context.Background(), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st, st
	},
	"redis": func(t *testing.T) (store.Store, store.Store) {
		_, prefix := redistest.Shared(t)
		open := func() store.Store {
			rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr()})
			st, err := redisstore.Open(context.Background(), rdb, prefix)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = st.Close()
				_ = rdb.Close()
			})
			return st
		}
		return open(), open()
	},
}

// queueBehind submits first, waits until its batch is held in its commit,
// submits the rest behind it, and lets the commit go: the rest are queued
// together, as ACKs arriving from many sessions during a commit are.
func queueBehind(t *testing.T, e *env, bs *batchStore, first rollout.Ack, rest []rollout.Ack, ctxs ...context.Context) []<-chan rollout.AckResult {
	t.Helper()
	held, release := bs.holdFirst()
	defer release()
	out := []<-chan rollout.AckResult{e.rollouts.SubmitAck(context.Background(), first)}
	<-held
	for i, a := range rest {
		ctx := context.Background()
		if i < len(ctxs) {
			ctx = ctxs[i]
		}
		out = append(out, e.rollouts.SubmitAck(ctx, a))
	}
	return out
}

// TestBatchedAcksAreDurableBeforeTheirAnswer: ACKs of many instances,
// queued while a commit is under way, are recorded by a few transactions
// (one per batch), each counted, and each readable through another handle
// of the store the moment its answer arrives.
func TestBatchedAcksAreDurableBeforeTheirAnswer(t *testing.T) {
	for name, open := range engines {
		t.Run(name, func(t *testing.T) {
			n := 300 // more than one batch: on Redis, a script of some 800 writes
			if testing.Short() {
				n = 60
			}
			st, fresh := open(t)
			bs := newBatchStore(st)
			e := newEnvOn(t, st, bs, n)
			rel := e.release(t, 50)
			acks := make([]rollout.Ack, n)
			for i := range acks {
				acks[i] = e.ackOf(t, rel, fmt.Sprintf("i%d", i), "boot-1", 1, rollout.Applied)
			}
			results := queueBehind(t, e, bs, acks[0], acks[1:])
			var wg sync.WaitGroup
			for i, ch := range results {
				wg.Go(func() {
					res := <-ch
					if res.Err != nil || !res.Ack.Counted {
						t.Errorf("ACK of i%d = %+v, %v", i, res.Ack, res.Err)
						return
					}
					if _, _, err := fresh.Get(context.Background(), rollout.AckKey(res.Ack), 0); err != nil {
						t.Errorf("ACK of i%d answered, and its record is not in the store: %v", i, err)
					}
				})
			}
			wg.Wait()
			// The first batch (one ACK), then the rest in batches of
			// DefaultAckBatch.
			if want := 1 + (n-1+rollout.DefaultAckBatch-1)/rollout.DefaultAckBatch; bs.ackTxns() > want {
				t.Errorf("%d ACKs took %d transactions; want %d", n, bs.ackTxns(), want)
			}
			stored, err := e.rollouts.Acks(context.Background(), "routing", rel.Generation)
			if err != nil || len(stored) != n {
				t.Fatalf("%d ACKs stored, %v; want %d", len(stored), err, n)
			}
		})
	}
}

// TestAcksOfOneInstanceAreJudgedInOrder: three ACKs of one instance,
// queued together, are judged one after the other, each against the
// records of those before it (the second is out of order, the third a
// duplicate), while another instance's ACK shares their first batch.
func TestAcksOfOneInstanceAreJudgedInOrder(t *testing.T) {
	st, _ := engines["bolt"](t)
	bs := newBatchStore(st)
	e := newEnvOn(t, st, bs, 6)
	rel := e.release(t, 50)
	results := queueBehind(t, e, bs, e.ackOf(t, rel, "i5", "boot-1", 1, rollout.Applied), []rollout.Ack{
		e.ackOf(t, rel, "i0", "boot-1", 2, rollout.Applied),
		e.ackOf(t, rel, "i0", "boot-1", 1, rollout.Applied),
		e.ackOf(t, rel, "i1", "boot-1", 1, rollout.Applied),
		e.ackOf(t, rel, "i0", "boot-1", 2, rollout.Applied),
	})
	var got []rollout.Ack
	for _, ch := range results {
		res := <-ch
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		got = append(got, res.Ack)
	}
	for i, want := range []string{"", "", "out of order: apply sequence 1 after 2", "", "duplicate: APPLIED at apply sequence 2"} {
		if a := got[i]; a.Counted != (want == "") || !strings.Contains(a.Why, want) {
			t.Errorf("ACK %d (%s at %d) = counted %v, %q; want %q", i, a.WorkloadIdentity, a.ApplySequence, a.Counted, a.Why, want)
		}
	}
	// i0's three: three batches after the first; i1's went with the first of them.
	if n := bs.ackTxns(); n != 4 {
		t.Errorf("%d transactions; want 4", n)
	}
}

// TestAConflictInABatchDelaysNoOther: a batch whose transaction fails
// because one instance registered again meanwhile records every other ACK
// all the same, and judges that one against the new registration; an
// instance whose registration changes before every attempt gets
// ErrContended, and the others of its batch are recorded.
func TestAConflictInABatchDelaysNoOther(t *testing.T) {
	for _, persistent := range []bool{false, true} {
		t.Run(fmt.Sprintf("persistent=%v", persistent), func(t *testing.T) {
			st, _ := engines["bolt"](t)
			bs := newBatchStore(st)
			e := newEnvOn(t, st, bs, 6)
			rel := e.release(t, 50)
			var rest []rollout.Ack
			for i := range 5 {
				rest = append(rest, e.ackOf(t, rel, fmt.Sprintf("i%d", i), "boot-1", 1, rollout.Applied))
			}
			restarts := 0
			bs.setHook(func(txn store.Txn) {
				mine := false
				for _, p := range txn.Puts {
					mine = mine || strings.Contains(p.Key, "/acks/routing/") && strings.Contains(p.Key, "/i0/")
				}
				if mine && (persistent || restarts == 0) && restarts < 40 {
					restarts++
					e.register(t, "i0", fmt.Sprintf("boot-%d", restarts+1), "zone-a")
				}
			})
			results := queueBehind(t, e, bs, e.ackOf(t, rel, "i5", "boot-1", 1, rollout.Applied), rest)
			for i, ch := range results {
				res := <-ch
				switch {
				case i == 1 && persistent:
					if !errors.Is(res.Err, rollout.ErrContended) {
						t.Errorf("i0, its registration changing before every write = %+v, %v; want ErrContended", res.Ack, res.Err)
					}
				case i == 1:
					if res.Err != nil || res.Ack.Counted || !strings.Contains(res.Ack.Why, "stale boot boot-1") {
						t.Errorf("i0, registered again while its batch committed = %+v, %v; want judged against the new registration", res.Ack, res.Err)
					}
				case res.Err != nil || !res.Ack.Counted:
					t.Errorf("ACK %d (%s) = %+v, %v; want counted", i, res.Ack.WorkloadIdentity, res.Ack, res.Err)
				}
			}
			if persistent && restarts != 16 {
				t.Errorf("i0 was judged %d times; want 16 (the bound)", restarts)
			}
		})
	}
}

// TestAWaitingAckEndsWithItsContext: an ACK whose submitter's context
// ends while it waits is answered at once with the context's error and
// never recorded; the ACKs queued beside it are. A full queue refuses
// at once with ErrBusy; a submitter that waits for room is admitted once
// a batch is taken, or answered when its context ends first.
func TestAWaitingAckEndsWithItsContext(t *testing.T) {
	st, _ := engines["bolt"](t)
	bs := newBatchStore(st)
	e := newEnvOn(t, st, bs, 6, rollout.WithAckBatching(0, 0, 3))
	rel := e.release(t, 50)
	ctx, cancel := context.WithCancel(context.Background())
	held, release := bs.holdFirst()
	first := e.rollouts.SubmitAck(context.Background(), e.ackOf(t, rel, "i5", "boot-1", 1, rollout.Applied))
	<-held
	cancelled := e.rollouts.SubmitAck(ctx, e.ackOf(t, rel, "i0", "boot-1", 1, rollout.Applied))
	others := []<-chan rollout.AckResult{first,
		e.rollouts.SubmitAck(context.Background(), e.ackOf(t, rel, "i1", "boot-1", 1, rollout.Applied)),
		e.rollouts.SubmitAck(context.Background(), e.ackOf(t, rel, "i2", "boot-1", 1, rollout.Applied)),
	}
	busy := <-e.rollouts.SubmitAck(context.Background(), e.ackOf(t, rel, "i3", "boot-1", 1, rollout.Applied))
	if !errors.Is(busy.Err, rollout.ErrBusy) {
		t.Errorf("a fourth ACK waiting behind a queue of 3 = %+v, %v; want ErrBusy", busy.Ack, busy.Err)
	}
	// A submitter that waits for room is not refused: its ACK comes in,
	// and the call returns, once the held batch committed; one whose
	// context ends while it waits is answered with the context's error.
	ended, end := context.WithCancel(context.Background())
	gaveUp := make(chan rollout.AckResult, 1)
	go e.rollouts.SubmitAckWaitFunc(ended, e.ackOf(t, rel, "i4", "boot-1", 1, rollout.Applied), func(r rollout.AckResult) { gaveUp <- r })
	end()
	if res := <-gaveUp; !errors.Is(res.Err, context.Canceled) {
		t.Errorf("a waiting ACK whose context ended = %+v, %v", res.Ack, res.Err)
	}
	waited := make(chan rollout.AckResult, 1)
	admitted := make(chan struct{})
	go func() {
		defer close(admitted)
		e.rollouts.SubmitAckWaitFunc(context.Background(), e.ackOf(t, rel, "i3", "boot-1", 1, rollout.Applied), func(r rollout.AckResult) { waited <- r })
	}()
	cancel()
	if res := <-cancelled; !errors.Is(res.Err, context.Canceled) {
		t.Errorf("the cancelled ACK = %+v, %v", res.Ack, res.Err)
	}
	release()
	<-admitted
	others = append(others, waited)
	for _, ch := range others {
		if res := <-ch; res.Err != nil || !res.Ack.Counted {
			t.Errorf("ACK of %s = %+v, %v", res.Ack.WorkloadIdentity, res.Ack, res.Err)
		}
	}
	acks, err := e.rollouts.Acks(context.Background(), "routing", rel.Generation)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range acks {
		if a.WorkloadIdentity == "i0" || a.WorkloadIdentity == "i4" {
			t.Errorf("%s's ACK was recorded: %+v", a.WorkloadIdentity, a)
		}
	}
	if len(acks) != 4 {
		t.Errorf("%d ACKs recorded; want 4", len(acks))
	}
}

// TestAReportSentAgainGetsTheFirstAnswer: a report sent again with its
// report ID is answered with the ACK stored the first time, and stored
// once; an ID reused for another report is refused; another boot's
// reports are its own; and a report whose first send was replaced (see
// MaxAcksPerInstance) is judged anew.
func TestAReportSentAgainGetsTheFirstAnswer(t *testing.T) {
	for name, open := range engines {
		t.Run(name, func(t *testing.T) {
			st, _ := open(t)
			e := newEnvOn(t, st, st, 6)
			rel := e.release(t, 50)
			ctx := context.Background()
			withID := func(id uint64) func(*rollout.Ack) { return func(a *rollout.Ack) { a.ReportID = id } }
			first := e.ack(t, rel, "i0", "boot-1", 1, rollout.Applied, withID(7))
			e.clock.Advance(time.Second)
			// Sent again twice, one behind the other in the queue.
			again := e.rollouts.SubmitAck(ctx, e.ackOf(t, rel, "i0", "boot-1", 1, rollout.Applied, withID(7)))
			third := e.rollouts.SubmitAck(ctx, e.ackOf(t, rel, "i0", "boot-1", 1, rollout.Applied, withID(7)))
			for _, ch := range []<-chan rollout.AckResult{again, third} {
				res := <-ch
				if res.Err != nil || !res.Ack.Counted || !res.Ack.ReceivedAt.Equal(first.ReceivedAt) || res.Ack.ReportID != 7 || rollout.AckKey(res.Ack) != rollout.AckKey(first) {
					t.Fatalf("report 7 sent again = %+v, %v; want the first answer %+v", res.Ack, res.Err, first)
				}
			}
			if acks, _ := e.rollouts.Acks(ctx, "routing", rel.Generation); len(acks) != 1 {
				t.Fatalf("%d ACKs stored after one report sent three times", len(acks))
			}
			if _, err := e.rollouts.RecordAck(ctx, e.ackOf(t, rel, "i0", "boot-1", 2, rollout.Applied, withID(7))); !errors.Is(err, rollout.ErrInvalid) ||
				!strings.Contains(err.Error(), "report_id 7") {
				t.Fatalf("report ID 7 for another report = %v; want refused", err)
			}
			// Without an ID the same report is a duplicate.
			if a := e.ack(t, rel, "i0", "boot-1", 1, rollout.Applied); a.Counted || !strings.Contains(a.Why, "duplicate") {
				t.Fatalf("the report without its ID = %+v", a)
			}
			// Another boot numbers its reports anew.
			e.register(t, "i1", "boot-2", "zone-b")
			e.ack(t, rel, "i1", "boot-1", 1, rollout.Applied, withID(7))
			if a := e.ack(t, rel, "i1", "boot-2", 1, rollout.Applied, withID(7)); !a.Counted {
				t.Fatalf("boot-2's report 7 = %+v; want judged as its own", a)
			}
			// Once MaxAcksPerInstance newer reports replaced the first send, the
			// same report is judged anew.
			for seq := int64(2); seq <= rollout.MaxAcksPerInstance+1; seq++ {
				e.ack(t, rel, "i0", "boot-1", seq, rollout.Applied, withID(uint64(100+seq)))
			}
			if a := e.ack(t, rel, "i0", "boot-1", 1, rollout.Applied, withID(7)); a.Counted || !strings.Contains(a.Why, "out of order") || a.ReceivedAt.Equal(first.ReceivedAt) {
				t.Fatalf("report 7 sent again after it was replaced = %+v; want judged anew", a)
			}
		})
	}
}

// TestRecordAckSettlesOncePerBatch: HEALTHY_ACKED reports of every
// member, queued together, pass the stage (settled after their batch),
// and each answer comes after it.
func TestRecordAckSettlesOncePerBatch(t *testing.T) {
	st, _ := engines["bolt"](t)
	bs := newBatchStore(st)
	e := newEnvOn(t, st, bs, 6)
	rel := e.releaseWith(t, 50, func(s *release.Spec) {})
	var rest []rollout.Ack
	for i := range 5 {
		rest = append(rest, e.ackOf(t, rel, fmt.Sprintf("i%d", i), "boot-1", 1, rollout.HealthyAcked))
	}
	results := queueBehind(t, e, bs, e.ackOf(t, rel, "i5", "boot-1", 1, rollout.HealthyAcked), rest)
	for _, ch := range results {
		if res := <-ch; res.Err != nil || !res.Ack.Counted {
			t.Fatalf("ACK = %+v, %v", res.Ack, res.Err)
		}
	}
	// Answered after settling: the stage passed before the last answer.
	st2 := e.status(t, rel.Generation)
	if len(st2.Stages) != 1 || st2.Stages[0].PassedAt.IsZero() {
		t.Fatalf("after every member's HEALTHY_ACKED was answered, stage = %+v", st2.Stages)
	}
}

// TestSubmitAckFuncCallsBackOnce: SubmitAckFunc answers a malformed ACK
// before it returns, and a recorded one once, from the batches, when its
// record is readable through another handle of the store; the answers of
// a batch come in the order submitted.
func TestSubmitAckFuncCallsBackOnce(t *testing.T) {
	st, fresh := engines["bolt"](t)
	bs := newBatchStore(st)
	e := newEnvOn(t, st, bs, 4)
	rel := e.release(t, 50)
	var malformed []rollout.AckResult
	e.rollouts.SubmitAckFunc(context.Background(), rollout.Ack{}, func(r rollout.AckResult) { malformed = append(malformed, r) })
	if len(malformed) != 1 || malformed[0].Err == nil {
		t.Fatalf("a malformed ACK, as SubmitAckFunc returns: %+v", malformed)
	}
	type answer struct {
		id      string
		res     rollout.AckResult
		durable error
	}
	answers := make(chan answer, 8)
	held, release := bs.holdFirst()
	submit := func(id string) {
		e.rollouts.SubmitAckFunc(context.Background(), e.ackOf(t, rel, id, "boot-1", 1, rollout.Applied), func(r rollout.AckResult) {
			var err error
			if r.Err == nil {
				_, _, err = fresh.Get(context.Background(), rollout.AckKey(r.Ack), 0)
			}
			answers <- answer{id, r, err}
		})
	}
	submit("i0")
	<-held
	for _, id := range []string{"i1", "i2", "i3"} {
		submit(id) // one batch, behind i0's
	}
	release()
	for _, want := range []string{"i0", "i1", "i2", "i3"} {
		a := <-answers
		if a.id != want || a.res.Err != nil || !a.res.Ack.Counted || a.durable != nil {
			t.Fatalf("answer %+v, want %s counted and its record in the store when answered", a, want)
		}
	}
	select {
	case a := <-answers:
		t.Fatalf("an ACK answered twice: %+v", a)
	default:
	}
}

// pastReads counts reads at a past revision (a Get or a List at one) of
// the keys or prefixes that of says (nil: all): an ACK judged on the
// views makes none, and a late ACK's judgement that reads its release's
// snapshot reads its pointer.
type pastReads struct {
	store.Store
	of func(keyOrPrefix string) bool
	n  atomic.Int64
}

func (s *pastReads) count(keyOrPrefix string, rev int64) {
	if rev != 0 && (s.of == nil || s.of(keyOrPrefix)) {
		s.n.Add(1)
	}
}

func (s *pastReads) Get(ctx context.Context, key string, rev int64) (store.KeyValue, int64, error) {
	s.count(key, rev)
	return s.Store.Get(ctx, key, rev)
}

func (s *pastReads) List(ctx context.Context, prefix string, rev int64, after string, limit int) (store.Page, error) {
	s.count(prefix, rev)
	return s.Store.List(ctx, prefix, rev, after, limit)
}

// TestALateAckIsJudgedOnItsReleaseAsItIsNow: the batches keep the
// snapshot of a release the views do not keep (a superseded candidate)
// from one batch to the next, and read it again once its config's records
// changed: after a newer release, a late report names that one. The
// views are made current before each report, so that the report is
// judged on them and not retried on a conflict.
func TestALateAckIsJudgedOnItsReleaseAsItIsNow(t *testing.T) {
	st, _ := engines["bolt"](t)
	reads := &pastReads{Store: st, of: func(key string) bool { return key == records.Pointer("routing") }}
	e := newEnvOn(t, st, reads, 6)
	ctx := context.Background()
	e.promoted(t, 10)
	g2 := e.release(t, 20)
	e.status(t, e.release(t, 30).Generation)
	submit := func(seq int64) (rollout.Ack, int64) {
		t.Helper()
		before := reads.n.Load()
		res := <-e.rollouts.SubmitAck(ctx, e.ackOf(t, g2, "i0", "boot-1", seq, rollout.Stale))
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		return res.Ack, reads.n.Load() - before
	}
	for seq := range int64(3) {
		a, n := submit(seq + 1)
		if a.Counted || !strings.Contains(a.Why, "superseded by generation 3") {
			t.Fatalf("late ACK %d of a superseded candidate = %+v", seq+1, a)
		}
		if seq > 0 && n != 0 {
			t.Fatalf("late ACK %d read the release's records again (%d reads of its pointer); want the kept snapshot", seq+1, n)
		}
	}
	e.status(t, e.release(t, 40).Generation)
	if a, _ := submit(4); a.Counted || !strings.Contains(a.Why, "superseded by generation 4") {
		t.Fatalf("late ACK after a newer release = %+v; want it superseded by generation 4", a)
	}
}

// TestLateAcksWhileReleasesAreCutNameTheNewest: six instances report a
// superseded candidate STALE while twenty newer releases are cut; each
// report submitted after generation N was created is stored superseded
// by N or a later one, never by one the kept snapshot knew before (or,
// when the head moved under each of its judgements, refused with
// ErrContended).
func TestLateAcksWhileReleasesAreCutNameTheNewest(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.promoted(t, 10)
	g2 := e.release(t, 20)
	var head atomic.Int64
	head.Store(e.release(t, 30).Generation)
	stop := make(chan struct{})
	errs := make(chan error, 6)
	for i := range 6 {
		id := fmt.Sprintf("i%d", i)
		go func() {
			for seq := int64(1); ; seq++ {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				newest := head.Load()
				res := <-e.rollouts.SubmitAck(ctx, e.ackOf(t, g2, id, "boot-1", seq, rollout.Stale))
				if errors.Is(res.Err, rollout.ErrContended) {
					continue // the head moved under every judgement: refused, not stored
				}
				if res.Err != nil {
					errs <- res.Err
					return
				}
				var by int64
				_, after, _ := strings.Cut(res.Ack.Why, "superseded by generation ")
				if _, err := fmt.Sscanf(after, "%d", &by); err != nil || by < newest {
					errs <- fmt.Errorf("%s's report %d, submitted after generation %d was created: %q", id, seq, newest, res.Ack.Why)
					return
				}
			}
		}()
	}
	for content := 40; content < 60; content++ {
		head.Store(e.release(t, content).Generation)
	}
	close(stop)
	for range 6 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestStaleReportsOfTheReleaseAPromotionSupersededAreJudgedOnTheViews:
// after a promotion every instance reports the release it ran STALE; the
// views keep that release, so judging those reports (a report sent again
// among them, but for the stored answer it returns) reads nothing from
// the store. They keep none of its tallies: its status, and a rollback to
// it, read it whole from the store. Once a newer release is cut they no
// longer keep it, and a report of it is judged from the store.
func TestStaleReportsOfTheReleaseAPromotionSupersededAreJudgedOnTheViews(t *testing.T) {
	st, _ := engines["bolt"](t)
	reads := &pastReads{Store: st}
	e := newEnvOn(t, st, reads, 6)
	g1 := e.promoted(t, 10)
	g2 := e.promoted(t, 20)
	e.status(t, g2.Generation) // the views are current
	before := reads.n.Load()
	withID := func(a *rollout.Ack) { a.ReportID = 7 }
	var first rollout.Ack
	for i := range 6 {
		id := fmt.Sprintf("i%d", i)
		a := e.ack(t, g1, id, "boot-1", g2.Generation, rollout.Stale, withID)
		if a.Counted || !strings.Contains(a.Why, "generation 1 is no longer active") {
			t.Fatalf("%s's STALE report of the superseded release = %+v", id, a)
		}
		if i == 0 {
			first = a
		}
	}
	if n := reads.n.Load() - before; n != 0 {
		t.Fatalf("judging the STALE reports of the release the promotion superseded made %d reads at a past revision; want none", n)
	}
	// The views know of the stored report; the answer is read from its record.
	if again := e.ack(t, g1, "i0", "boot-1", g2.Generation, rollout.Stale, withID); !again.ReceivedAt.Equal(first.ReceivedAt) {
		t.Fatalf("i0's report sent again = %+v; want the stored one, received at %s", again, first.ReceivedAt)
	}
	// The views let go of its tallies: its status, and a rollback to it,
	// read it whole from the store.
	if kept, counted := e.rollouts.KeptCountedAcks("routing", g1.Generation); !kept || counted != 0 {
		t.Fatalf("the views keep the superseded release: %t, with %d counted ACKs; want it kept with none", kept, counted)
	}
	if st := e.status(t, g1.Generation).Stages[0]; st.States["STALE"] != 6 || st.Evaluation.Healthy != 6 {
		t.Fatalf("the superseded release's status: states %v, %+v; want its six healthy members, every one STALE", st.States, st.Evaluation)
	}
	ctx := context.Background()
	ptr, err := e.rollouts.Pointer(ctx, "routing")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.rollouts.Rollback(ctx, rollout.Move{ConfigID: "routing", ExpectedGeneration: ptr.Generation, ExpectedEpoch: ptr.Epoch, IdempotencyKey: "rb"}); err != nil {
		t.Fatal(err)
	}
	if st := e.status(t, g1.Generation).Stages[0]; st.Evaluation.Healthy != 6 {
		t.Fatalf("after the rollback to it: %v, %+v; want its six healthy members", st.States, st.Evaluation)
	}
	if a := e.ack(t, g1, "i2", "boot-1", g2.Generation+2, rollout.HealthyAcked); !a.Counted {
		t.Fatalf("a report of the release rolled back to = %+v; want it counted", a)
	}
	e.status(t, g1.Generation) // the views are current
	if kept, counted := e.rollouts.KeptCountedAcks("routing", g1.Generation); !kept || counted != 7 {
		t.Fatalf("the views keep the release rolled back to: %t, with %d counted ACKs; want it whole, with 7", kept, counted)
	}
	g3 := e.promoted(t, 25) // superseding generation 1 again
	e.status(t, e.release(t, 30).Generation)
	before = reads.n.Load()
	if a := e.ack(t, g1, "i1", "boot-1", g3.Generation+1, rollout.Stale); a.Counted || !strings.Contains(a.Why, "generation 1 is no longer active") {
		t.Fatalf("a STALE report of generation 1 after generation 4 was cut = %+v", a)
	}
	if reads.n.Load() == before {
		t.Fatal("a report of a release two promotions old was judged without reading it: the views still keep it")
	}
}

// TestAChainJudgesNothingAfterAReportNotRecorded: the ACKs of one message
// (an AckChain) are judged only while each one before them of the same
// config was recorded: after one the rollout refuses (its release does
// not exist), the next two, queued behind it, are answered
// ErrEarlierNotRecorded unjudged and not stored, the second within the
// same pass as the first; after one its submitter refused (Refused), the
// next is too; sent again alone, in order, they count. An ACK that waits
// for room and whose context ends leaves the waiting list.
func TestAChainJudgesNothingAfterAReportNotRecorded(t *testing.T) {
	st, _ := engines["bolt"](t)
	bs := newBatchStore(st)
	e := newEnvOn(t, st, bs, 6, rollout.WithAckBatching(0, 0, 2))
	rel := e.release(t, 50)
	ctx := context.Background()
	held, release := bs.holdFirst()
	first := e.rollouts.SubmitAck(ctx, e.ackOf(t, rel, "i5", "boot-1", 1, rollout.Applied))
	<-held
	answers := make([]chan rollout.AckResult, 4)
	submit := func(c *rollout.AckChain, i int, a rollout.Ack) {
		answers[i] = make(chan rollout.AckResult, 1)
		c.SubmitFunc(ctx, a, func(r rollout.AckResult) { answers[i] <- r })
	}
	chain := e.rollouts.NewAckChain()
	unknown := e.ackOf(t, rel, "i0", "boot-1", 1, rollout.Discovered)
	unknown.Generation = 99
	submit(chain, 0, unknown)
	submit(chain, 1, e.ackOf(t, rel, "i0", "boot-1", 1, rollout.Downloaded))
	// The queue holds 2: the third waits for room, and its context
	// ends there.
	gone, end := context.WithCancel(ctx)
	cancelled := make(chan rollout.AckResult, 1)
	go e.rollouts.SubmitAckWaitFunc(gone, e.ackOf(t, rel, "i4", "boot-1", 1, rollout.Applied), func(r rollout.AckResult) { cancelled <- r })
	awaitWaiting(t, e, 1)
	end()
	if res := <-cancelled; !errors.Is(res.Err, context.Canceled) {
		t.Fatalf("a waiting ACK whose context ended = %+v, %v", res.Ack, res.Err)
	}
	awaitWaiting(t, e, 0) // it leaves the list right after its answer
	// A third of the chain waits for room behind the two queued.
	go submit(chain, 2, e.ackOf(t, rel, "i0", "boot-1", 1, rollout.Validated))
	awaitWaiting(t, e, 1)
	release()
	if res := <-first; res.Err != nil {
		t.Fatal(res.Err)
	}
	if res := <-answers[0]; res.Err == nil || errors.Is(res.Err, rollout.ErrEarlierNotRecorded) {
		t.Fatalf("the ACK of a release that does not exist = %+v, %v", res.Ack, res.Err)
	}
	for i := 1; i <= 2; i++ {
		if res := <-answers[i]; !errors.Is(res.Err, rollout.ErrEarlierNotRecorded) {
			t.Fatalf("chained ACK %d after one not recorded = %+v, %v; want ErrEarlierNotRecorded", i, res.Ack, res.Err)
		}
	}
	refused := e.rollouts.NewAckChain()
	refused.Refused("routing")
	submit(refused, 3, e.ackOf(t, rel, "i0", "boot-1", 1, rollout.Discovered))
	if res := <-answers[3]; !errors.Is(res.Err, rollout.ErrEarlierNotRecorded) {
		t.Fatalf("a chained ACK after one its submitter refused = %+v, %v", res.Ack, res.Err)
	}
	if acks, err := e.rollouts.Acks(ctx, "routing", rel.Generation); err != nil || len(acks) != 1 {
		t.Fatalf("stored %+v, %v; want i5's only", acks, err)
	}
	for _, s := range []rollout.AckState{rollout.Discovered, rollout.Downloaded, rollout.Validated} {
		if res := <-e.rollouts.SubmitAck(ctx, e.ackOf(t, rel, "i0", "boot-1", 1, s)); res.Err != nil || !res.Ack.Counted {
			t.Fatalf("%s sent again alone = %+v, %v", s, res.Ack, res.Err)
		}
	}
}

// awaitWaiting waits until n ACKs wait for room in e's queue.
func awaitWaiting(t *testing.T, e *env, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !e.rollouts.AwaitWaitingAcks(ctx, n) {
		t.Fatalf("%d ACKs never waited for room", n)
	}
}
