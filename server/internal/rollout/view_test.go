package rollout_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/internal/testkit/testclock"
	"github.com/pawlcfg/pawl/internal/testkit/wasmbuild"
	"github.com/pawlcfg/pawl/server/internal/instance"
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
