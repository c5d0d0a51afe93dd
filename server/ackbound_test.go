package server_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testclock"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/server"
	"github.com/pawlcfg/pawl/server/internal/records"
	"github.com/pawlcfg/pawl/server/internal/rollout"
)

// TestDuplicateAcksAreBounded: an instance that sends the same ACK 10,000
// times leaves at most rollout.MaxAcksPerInstance of its ACKs in the
// store, whose size (once compacted) stays where it was after the first
// few; its counted APPLIED stays, so its HEALTHY_ACKED after the health
// window counts and passes the stage.
func TestDuplicateAcksAreBounded(t *testing.T) {
	const duplicates, warmUp = 10_000, 100
	clock := testclock.New(time.Now())
	srv := testserver.Start(t, server.WithClock(clock.Now), server.WithLogRetention(500))
	client := testserver.HTTPClient(t)
	is := pawlv1connect.NewInstanceServiceClient(client, srv.URL)
	ro := pawlv1connect.NewRolloutServiceClient(client, srv.URL)
	kv := pawlv1connect.NewKVServiceClient(client, srv.URL)
	ctx := context.Background()
	register(t, is, "pay-1", "boot-a", "zone-a", map[string]string{"env": "prod"})
	rel := windowRelease(t, srv, nil)
	if got, err := reportTo(t, ro, is, rel, "pay-1", pawlv1.InstanceState_INSTANCE_STATE_APPLIED, nil); err != nil || !got.GetCounted() {
		t.Fatalf("APPLIED = %v, %v", got, err)
	}
	ack := &pawlv1.Ack{
		ConfigId: rel.GetSpec().GetConfigId(), Generation: rel.GetGeneration(), WorkloadIdentity: "pay-1", BootId: "boot-a",
		MembershipEpoch: epochOf(t, is, "pay-1"), ContentDigest: rel.GetContentDigest(), ValidatorDigest: rel.GetSpec().GetValidatorDigest(),
		ApplySequence: 1, State: pawlv1.InstanceState_INSTANCE_STATE_APPLIED, HealthOk: true,
	}
	compactedSize := func() int64 {
		t.Helper()
		if _, err := srv.Server.ApplyRetention(ctx); err != nil {
			t.Fatal(err)
		}
		u, err := srv.Server.StorageUsage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return u.UsedBytes
	}
	duplicate := func(i int) error {
		resp, err := ro.Ack(ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: ack}))
		if err != nil {
			return fmt.Errorf("duplicate %d: %w", i+1, err)
		}
		if got := resp.Msg.GetAck(); got.GetCounted() || !strings.HasPrefix(got.GetNotCountedReason(), "duplicate:") {
			return fmt.Errorf("duplicate %d judged %v", i+1, got)
		}
		return nil
	}
	for i := range warmUp {
		if err := duplicate(i); err != nil {
			t.Fatal(err)
		}
	}
	base := compactedSize()
	// The rest from 16 callers at once, as a retrying fleet would send
	// them (and in batches: one at a time took 37 s under -race).
	next := make(chan int)
	errs := make(chan error, 16)
	var callers sync.WaitGroup
	for range 16 {
		callers.Go(func() {
			for i := range next {
				if err := duplicate(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
send:
	for i := warmUp; i < duplicates; i++ {
		select {
		case next <- i:
		case err := <-errs:
			t.Error(err)
			break send
		}
	}
	close(next)
	callers.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	list, err := kv.List(ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: records.AcksOf(ack.ConfigId, ack.Generation, "pay-1"), PageSize: 1000}))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.Msg.GetKvs()); n > rollout.MaxAcksPerInstance {
		t.Errorf("after %d duplicate ACKs the store holds %d ACKs of the instance; the bound is %d", duplicates, n, rollout.MaxAcksPerInstance)
	}
	// The warm-up already held the bound's worth of ACKs and as much
	// history: what 9,900 more ACKs may add is a few pages, far from the
	// megabytes they would take stored.
	size := compactedSize()
	t.Logf("store size after %d duplicate ACKs: %d bytes; after %d: %d bytes", warmUp, base, duplicates, size)
	if size > base+512<<10 {
		t.Errorf("after %d duplicate ACKs the store holds %d bytes, %d after %d: it grows with the duplicates", duplicates, size, base, warmUp)
	}

	clock.Advance(time.Minute)
	got, err := reportTo(t, ro, is, rel, "pay-1", pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, durationpb.New(time.Minute))
	if err != nil || !got.GetCounted() {
		t.Fatalf("HEALTHY_ACKED after the window, behind %d duplicates of APPLIED = %v, %v: want it counted", duplicates, got, err)
	}
}
