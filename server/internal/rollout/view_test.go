package rollout_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pawlcfg/pawl/internal/testkit/testclock"
	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/records"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/retention"
	"github.com/pawlcfg/pawl/server/internal/rollout"
	"github.com/pawlcfg/pawl/server/internal/store"
	"github.com/pawlcfg/pawl/server/internal/store/boltstore"
	"github.com/pawlcfg/pawl/validators/host"
)

// blockingGet blocks, once armed, the first Get of a key with the suffix
// until released: the views' writer reads the release a new head names
// before it applies the event, and waits there.
type blockingGet struct {
	store.Store
	mu      sync.Mutex
	suffix  string
	blocked chan struct{} // closed when a Get is held
	release chan struct{}
}

func (s *blockingGet) Get(ctx context.Context, key string, rev int64) (store.KeyValue, int64, error) {
	s.mu.Lock()
	hold := s.suffix != "" && strings.HasSuffix(key, s.suffix)
	if hold {
		s.suffix = ""
	}
	s.mu.Unlock()
	if hold {
		close(s.blocked)
		<-s.release
	}
	return s.Store.Get(ctx, key, rev)
}

type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestViewsThatFallBehindACompactionReadASnapshot holds the views' writer
// while the store moves past its watch ring and compacts the change log the
// views would resume from: released, the views read a fresh snapshot, and
// answer with everything that happened meanwhile.
func TestViewsThatFallBehindACompactionReadASnapshot(t *testing.T) {
	ctx := context.Background()
	bolt, err := boltstore.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bolt.Close() })
	st := &blockingGet{Store: bolt, blocked: make(chan struct{}), release: make(chan struct{})}
	clock := testclock.New(time.Now())
	registry, err := instance.New(ctx, st, time.Hour, instance.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	v := wasmbuild.Load(t, "routing")
	releases := release.New(st, func(ctx context.Context, _ string, in host.Input) (host.Result, error) { return v.Validate(ctx, in) },
		registry.Members, release.WithClock(clock.Now), release.WithCacheSize(1))
	logs := &syncLog{}
	rollouts := run(t, rollout.New(st, releases, registry, rollout.WithClock(clock.Now), rollout.WithLogger(slog.New(slog.NewTextHandler(logs, nil)))))
	e := &env{clock: clock, store: st, registry: registry, releases: releases, rollouts: rollouts, digest: v.Info().Digest}
	for i := range 6 {
		e.register(t, fmt.Sprintf("i%d", i), "boot-1", fmt.Sprintf("zone-%c", 'a'+i%3))
	}
	g1 := e.promoted(t, 10)

	st.mu.Lock()
	st.suffix = "/releases/00000000000000000002"
	st.mu.Unlock()
	g2 := e.release(t, 20) // the views' writer reads it, and is held there
	<-st.blocked
	// Meanwhile: far more changes than the views' watch ring holds, under
	// the prefix the views follow, and the change log compacted past them.
	for i := range 5000 {
		if _, err := registry.Register(ctx, instance.Instance{WorkloadIdentity: fmt.Sprintf("late-%04d", i), BootID: "1"}); err != nil {
			t.Fatal(err)
		}
	}
	e.register(t, "i0", "boot-2", "zone-a") // a restart the views must see
	if _, err := retention.Apply(ctx, bolt, retention.Policy{Revisions: 200}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if status, _ := bolt.Status(ctx); status.CompactRevision < 1000 {
		t.Fatalf("the log was not compacted (compact revision %d): the test proves nothing", status.CompactRevision)
	}
	close(st.release)

	s, err := rollouts.Status(ctx, "routing", 2)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "rollout views read again from a snapshot") {
		t.Fatalf("the views did not read a snapshot again; log:\n%s", logs.String())
	}
	if s.Release.Generation != 2 || s.Pointer.Generation != 1 {
		t.Fatalf("status after the snapshot = release %d, pointer %d", s.Release.Generation, s.Pointer.Generation)
	}
	// i0 restarted while the views were held: its new boot is what counts.
	a := e.ack(t, g2, "i0", "boot-2", 1, rollout.HealthyAcked)
	if !a.Counted {
		t.Fatalf("the restarted instance's ACK = %+v", a)
	}
	if late := e.ack(t, g1, "i1", "boot-1", 5, rollout.HealthyAcked); !late.Counted {
		t.Fatalf("an ACK of the active release after the snapshot = %+v", late)
	}
}

// TestViewsHoldABatchsACKsAsTheStoreDoes: the views take the ACKs and
// applied records a batch wrote as the batch judged them, without
// decoding them (writtenRecords); they must hold exactly what views that
// read the same records from the store hold. The ACKs carry what JSON
// writes otherwise than as read (<, &, U+2028, a health measure,
// violations), and are recorded concurrently, so that
// they share batches.
func TestViewsHoldABatchsACKsAsTheStoreDoes(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rel := e.release(t, 50)
	var wg sync.WaitGroup
	for i := range 6 {
		id := fmt.Sprintf("i%d", i)
		wg.Go(func() {
			steps := []rollout.Ack{
				e.ackOf(t, rel, id, "boot-1", 1, rollout.Discovered, func(a *rollout.Ack) { a.Reason = "a <b> & c\u2028 d ☃" }),
				e.ackOf(t, rel, id, "boot-1", 1, rollout.Applied, func(a *rollout.Ack) { a.AppVersion = "1.2.3"; a.ReportID = 9 }),
				e.ackOf(t, rel, id, "boot-1", 1, rollout.HealthyAcked, func(a *rollout.Ack) {
					a.Health = &rollout.Health{ErrorRate: 0.1 + 0.2, P99: 1234567 * time.Nanosecond}
				}),
			}
			for _, a := range steps {
				if _, err := e.rollouts.RecordAck(ctx, a); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// Last, after every other report (a counted rejection stops the rollout).
	e.ack(t, rel, "i0", "boot-1", 2, rollout.Rejected, func(a *rollout.Ack) {
		a.HealthOK, a.RejectCode = false, "INVALID_CONTENT"
		a.Violations = []host.Violation{{Path: "/upstreams/0", Message: "weight < 0 & \"x\"", Severity: "error"}}
	})
	took, tookApplied, read, readApplied := viewedAndRead(t, e, rel)
	if len(read) != 6 || len(read["i0"]) != 4 || len(read["i1"]) != 3 {
		t.Fatalf("the views read from the store hold %d members, i0 and i1 with %d and %d counted ACKs; want 6, 4, 3", len(read), len(read["i0"]), len(read["i1"]))
	}
	if !reflect.DeepEqual(took, read) || !reflect.DeepEqual(tookApplied, readApplied) {
		t.Fatalf("the views that took the batches' records hold\n%+v\n%+v\nthe views that read them from the store\n%+v\n%+v", took, tookApplied, read, readApplied)
	}
	if got := read["i0"][0].Reason; got != "a <b> & c\u2028 d ☃" {
		t.Fatalf("the stored reason is %q; want it as sent", got)
	}
	if n := e.rollouts.NotedRecords(); n != 0 {
		t.Fatalf("%d records of the batches are still noted after the views passed them", n)
	}
}

// TestAnACKWithInvalidUTF8IsRefused: every ACK from the wire is valid
// UTF-8 (protobuf refuses the rest); one handed in otherwise is refused,
// and nothing is stored, rather than stored as JSON would rewrite it.
func TestAnACKWithInvalidUTF8IsRefused(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rel := e.release(t, 50)
	for name, edit := range map[string]func(*rollout.Ack){
		"reason": func(a *rollout.Ack) { a.Reason = "bad \xff byte" },
		"violation": func(a *rollout.Ack) {
			a.State, a.Violations = rollout.Rejected, []host.Violation{{Path: "/a", Message: "\xc3", Severity: "error"}}
		},
	} {
		if got, err := e.rollouts.RecordAck(ctx, e.ackOf(t, rel, "i0", "boot-1", 1, rollout.Applied, edit)); !errors.Is(err, rollout.ErrInvalid) {
			t.Fatalf("%s: RecordAck = %+v, %v; want ErrInvalid", name, got, err)
		}
	}
	if acks, err := e.rollouts.Acks(ctx, rel.ConfigID, rel.Generation); err != nil || len(acks) != 0 {
		t.Fatalf("stored %v, %v; want nothing", acks, err)
	}
}

// TestViewsHoldARedactedReasonAsStored: redaction may cut a secret in
// the middle of a character and leave invalid UTF-8, which JSON stores as
// U+FFFD; the views must hold the reason as stored, not as redacted.
func TestViewsHoldARedactedReasonAsStored(t *testing.T) {
	e := newEnv(t)
	rel := e.releaseWith(t, 50, func(s *release.Spec) {
		// The validator marks every token secret.
		s.Content = []byte(`{"upstreams":[{"host":"a","weight":50,"token":"パスワードパスワード"},{"host":"b","weight":50}]}`)
	})
	// The secret's first 13 bytes, then another character: the redacted
	// reason keeps the last two bytes of a cut character.
	got := e.ack(t, rel, "i0", "boot-1", 1, rollout.Discovered, func(a *rollout.Ack) { a.Reason = "x パスワーク y" })
	if !got.Counted || utf8.ValidString(got.Reason) {
		t.Fatalf("judged %+v; want it counted, its redacted reason cut inside a character", got)
	}
	took, _, read, _ := viewedAndRead(t, e, rel)
	if len(read["i0"]) != 1 || !utf8.ValidString(read["i0"][0].Reason) || !reflect.DeepEqual(took, read) {
		t.Fatalf("the views hold %+v; views that read the store %+v", took, read)
	}
}

// viewedAndRead are the counted ACKs and applied records of rel that e's
// views hold, and those that fresh views, reading them from e's store,
// hold; both at the store's head.
func viewedAndRead(t *testing.T, e *env, rel release.Release) (took map[string][]rollout.Ack, tookApplied map[string]rollout.AppliedRecord,
	read map[string][]rollout.Ack, readApplied map[string]rollout.AppliedRecord) {
	t.Helper()
	fresh := run(t, rollout.New(e.store, e.releases, e.registry, rollout.WithClock(e.clock.Now)))
	for _, r := range []*rollout.Rollouts{e.rollouts, fresh} {
		if _, err := r.Status(context.Background(), rel.ConfigID, rel.Generation); err != nil { // the views at the store's head
			t.Fatal(err)
		}
	}
	took, tookApplied = e.rollouts.ViewedAcks(rel.ConfigID, rel.Generation)
	read, readApplied = fresh.ViewedAcks(rel.ConfigID, rel.Generation)
	return took, tookApplied, read, readApplied
}

// warnings is a slog handler that sends each warning's message and
// keeps when each was logged.
type warnings struct {
	ch    chan string
	mu    sync.Mutex
	times []time.Time
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler           { return w }
func (w *warnings) WithGroup(string) slog.Handler                { return w }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	w.times = append(w.times, r.Time)
	w.mu.Unlock()
	select {
	case w.ch <- r.Message:
	default:
	}
	return nil
}

// logged returns the times of the warnings so far.
func (w *warnings) logged() []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.times)
}

// TestAnEventTheViewsCannotApplyIsNotHeldApplied: one transaction puts a
// record the views pass over (evidence) and an applied record that
// cannot be decoded. The views apply the first and fail on the second:
// their revision stays at the first, so a reader waiting for the second
// is not told the views hold it. A snapshot, which cannot read that
// record either, is tried again after pauses, not in a loop.
func TestAnEventTheViewsCannotApplyIsNotHeldApplied(t *testing.T) {
	ctx := context.Background()
	warned := &warnings{ch: make(chan string, 1)}
	e := newEnv(t, rollout.WithLogger(slog.New(warned)))
	// The views hold the registration before the transaction: their
	// first snapshot must not be the one that fails.
	if _, _, err := e.rollouts.Assignments(ctx, "i0"); err != nil {
		t.Fatal(err)
	}
	before := e.rollouts.ViewsRevision()
	res, err := e.store.Txn(ctx, store.Txn{Puts: []store.Put{
		{Key: records.EvidenceOf("routing", 1) + "i0", Value: []byte(`{}`)},
		{Key: records.Applied("routing", "i0"), Value: []byte(`not a record`)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	next := func() string {
		t.Helper()
		select {
		case msg := <-warned.ch:
			return msg
		case <-time.After(time.Minute):
			t.Fatal("the views logged no failure")
			return ""
		}
	}
	if msg := next(); msg != "rollout views read again from a snapshot" {
		t.Fatalf("warning %q", msg)
	}
	if got, want := e.rollouts.ViewsRevision(), res.Revision-1; got != want {
		t.Fatalf("the views hold revision %d after failing on %d (they held %d before); want %d, the last event they applied",
			got, res.Revision, before, want)
	}
	// The snapshots keep failing: the fourth failure comes at least
	// 10+20+40 ms of pauses after the first; in a loop, at once.
	for len(warned.logged()) < 4 {
		next()
	}
	if times := warned.logged(); times[3].Sub(times[0]) < 70*time.Millisecond {
		t.Fatalf("three more snapshots failed within %s of the first failure: no pause between them", times[3].Sub(times[0]))
	}
}
