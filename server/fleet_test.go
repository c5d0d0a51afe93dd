package server_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testclock"
	"github.com/pawlcfg/pawl/internal/testserver"
	"github.com/pawlcfg/pawl/server"
)

// fleet is a simulated fleet of instances talking to a real server over
// loopback with real gRPC clients.
type fleet struct {
	t         *testing.T
	srv       *testserver.Server
	clock     *testclock.Clock
	instances pawlv1connect.InstanceServiceClient
	releases  pawlv1connect.ReleaseServiceClient
	rollouts  pawlv1connect.RolloutServiceClient
	kv        pawlv1connect.KVServiceClient
	validator string
	boots     map[string]string
	zones     map[string]string
	mu        sync.Mutex
	epochs    map[string]int64 // each instance's membership epoch, from Register
}

// healthWindow is the fleet releases' health window; the fleet's clock
// moves past it instead of waiting.
const healthWindow = time.Minute

// newFleet starts a server on a clock the test moves, and registers size
// instances in three zones.
func newFleet(t *testing.T, size int) *fleet {
	clock := testclock.New(time.Now())
	// Leases outlast the simulated minutes: these instances do not heartbeat.
	srv := testserver.Start(t, server.WithClock(clock.Now), server.WithRolloutCheckInterval(10*time.Millisecond), server.WithInstanceLease(24*time.Hour))
	client := testserver.HTTPClient(t)
	f := &fleet{
		t:         t,
		srv:       srv,
		clock:     clock,
		instances: pawlv1connect.NewInstanceServiceClient(client, srv.URL, connect.WithGRPC()),
		releases:  pawlv1connect.NewReleaseServiceClient(client, srv.URL, connect.WithGRPC()),
		rollouts:  pawlv1connect.NewRolloutServiceClient(client, srv.URL, connect.WithGRPC()),
		kv:        pawlv1connect.NewKVServiceClient(client, srv.URL, connect.WithGRPC()),
		validator: upload(t, newValidators(t, srv), "routing"),
		boots:     map[string]string{},
		zones:     map[string]string{},
		epochs:    map[string]int64{},
	}
	var ids []string
	for i := range size {
		id := fmt.Sprintf("pay-%03d", i)
		ids = append(ids, id)
		f.boots[id] = "boot-1"
		f.zones[id] = fmt.Sprintf("zone-%c", 'a'+i%3)
	}
	f.parallel(ids, func(id string) error { return f.register(id) })
	return f
}

func (f *fleet) register(id string) error {
	f.mu.Lock()
	boot, zone := f.boots[id], f.zones[id]
	f.mu.Unlock()
	resp, err := f.instances.Register(context.Background(), connect.NewRequest(&pawlv1.RegisterRequest{Instance: &pawlv1.Instance{
		WorkloadIdentity: id, BootId: boot, Zone: zone, Role: "worker", TrafficWeight: 1, AppVersion: "2.1.0",
	}}))
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.epochs[id] = resp.Msg.GetRecord().GetMembershipEpoch()
	return nil
}

// parallel runs fn for every id on 16 workers and fails on any error.
func (f *fleet) parallel(ids []string, fn func(id string) error) {
	f.t.Helper()
	work := make(chan string)
	errs := make(chan error, len(ids))
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				if err := fn(id); err != nil {
					errs <- fmt.Errorf("%s: %w", id, err)
				}
			}
		}()
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		f.t.Fatal(err)
	}
}

func (f *fleet) create(weight int) *pawlv1.Release {
	f.t.Helper()
	spec := &pawlv1.ReleaseSpec{
		ConfigId: "checkout", MediaType: "application/json", ValidatorDigest: f.validator,
		Content: []byte(fmt.Sprintf(`{"upstreams":[{"host":"a","weight":%d},{"host":"b","weight":%d}]}`, weight, 100-weight)),
		Stages: []*pawlv1.Stage{
			{Name: "canary", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_FRACTION, Fraction: 0.01}},
			{Name: "zones", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ZONE_QUORUM, Fraction: 0.9, MaxRejected: 5}},
		},
		HealthWindow: durationpb.New(healthWindow), Deadline: durationpb.New(time.Hour),
	}
	resp, err := f.releases.CreateRelease(context.Background(), connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: spec}))
	if err != nil {
		f.t.Fatal(err)
	}
	return resp.Msg.GetRelease()
}

type ackOpt func(*pawlv1.Ack)

func (f *fleet) ack(rel *pawlv1.Release, id string, state pawlv1.InstanceState, opts ...ackOpt) (*pawlv1.Ack, error) {
	f.mu.Lock()
	boot, epoch := f.boots[id], f.epochs[id]
	f.mu.Unlock()
	a := &pawlv1.Ack{
		ConfigId: "checkout", Generation: rel.GetGeneration(), WorkloadIdentity: id, BootId: boot, MembershipEpoch: epoch,
		ApplySequence: rel.GetGeneration(), ContentDigest: rel.GetContentDigest(), ValidatorDigest: rel.GetSpec().GetValidatorDigest(),
		AppArtifact: "checkout@2.1.0", State: state, HealthOk: true,
		Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}
	for _, o := range opts {
		o(a)
	}
	resp, err := f.rollouts.Ack(context.Background(), connect.NewRequest(&pawlv1.AckRequest{Ack: a}))
	if err != nil {
		return nil, err
	}
	return resp.Msg.GetAck(), nil
}

// healthy has every instance report APPLIED, lets the health window pass,
// and has each report HEALTHY_ACKED; every ACK must count.
func (f *fleet) healthy(rel *pawlv1.Release, ids []string) {
	f.t.Helper()
	f.ackAll(rel, ids, pawlv1.InstanceState_INSTANCE_STATE_APPLIED)
	f.clock.Advance(healthWindow)
	f.ackAll(rel, ids, pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED)
}

func (f *fleet) ackAll(rel *pawlv1.Release, ids []string, state pawlv1.InstanceState) {
	f.t.Helper()
	f.parallel(ids, func(id string) error {
		a, err := f.ack(rel, id, state)
		if err == nil && !a.GetCounted() {
			err = fmt.Errorf("%s not counted: %s", state, a.GetNotCountedReason())
		}
		return err
	})
}

func (f *fleet) status(gen int64) *pawlv1.GetRolloutStatusResponse {
	f.t.Helper()
	resp, err := f.rollouts.GetRolloutStatus(context.Background(), connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: "checkout", Generation: gen}))
	if err != nil {
		f.t.Fatal(err)
	}
	return resp.Msg
}

func (f *fleet) promote(gen, expected, epoch int64, key string) (*pawlv1.Receipt, error) {
	resp, err := f.rollouts.Promote(context.Background(), connect.NewRequest(&pawlv1.PromoteRequest{
		ConfigId: "checkout", Generation: gen, ExpectedGeneration: expected, ExpectedEpoch: epoch, IdempotencyKey: key,
	}))
	if err != nil {
		return nil, err
	}
	return resp.Msg.GetReceipt(), nil
}

// assignmentWatcher is one instance's assignment stream, read at
// checkpoints; it records every assignment of the config it receives.
type assignmentWatcher struct {
	id     string
	stream *connect.ServerStreamForClient[pawlv1.WatchAssignmentsResponse]
	seen   []*pawlv1.Assignment
	revs   []int64
}

func (f *fleet) watchAssignments(ctx context.Context, id string) *assignmentWatcher {
	f.t.Helper()
	stream, err := f.instances.WatchAssignments(ctx, connect.NewRequest(&pawlv1.WatchAssignmentsRequest{WorkloadIdentity: id}))
	if err != nil {
		f.t.Fatal(err)
	}
	w := &assignmentWatcher{id: id, stream: stream}
	f.t.Cleanup(func() { _ = w.stream.Close() })
	return w
}

// next reads one assignment set and returns the config's assignment (nil
// for none).
func (w *assignmentWatcher) next(t *testing.T) *pawlv1.Assignment {
	t.Helper()
	if !w.stream.Receive() {
		t.Fatalf("%s: assignment stream ended: %v", w.id, w.stream.Err())
	}
	w.revs = append(w.revs, w.stream.Msg().GetRevision())
	for _, a := range w.stream.Msg().GetAssignments() {
		if a.GetConfigId() == "checkout" {
			w.seen = append(w.seen, a)
			return a
		}
	}
	return nil
}

// until reads until the instance is assigned the active generation gen at
// epoch.
func (w *assignmentWatcher) until(t *testing.T, gen, epoch int64) {
	t.Helper()
	for {
		if a := w.next(t); a != nil && a.GetGeneration() == gen && a.GetEpoch() == epoch && a.GetStage() == "" {
			return
		}
	}
}

// checkOrder asserts what an instance may rely on, however its events were
// timed: revisions only grow, the epoch never goes back, and after the
// rollback's epoch the rolled-back generation never returns.
func (w *assignmentWatcher) checkOrder(t *testing.T, rolledBack int64) {
	t.Helper()
	for i := 1; i < len(w.revs); i++ {
		if w.revs[i] <= w.revs[i-1] {
			t.Fatalf("%s: revisions went %d then %d", w.id, w.revs[i-1], w.revs[i])
		}
	}
	epoch := int64(0)
	for _, a := range w.seen {
		if a.GetEpoch() < epoch {
			t.Fatalf("%s: epoch went back from %d to %d", w.id, epoch, a.GetEpoch())
		}
		epoch = a.GetEpoch()
		if epoch > 0 && a.GetGeneration() == rolledBack {
			t.Fatalf("%s: assigned rolled-back generation %d at epoch %d", w.id, rolledBack, epoch)
		}
	}
}

// zoneIDs returns the fleet's instances (not the racers) in the zones.
func zoneIDs(f *fleet, zones ...string) []string {
	var ids []string
	for id, z := range f.zones {
		if !strings.HasPrefix(id, "pay-") {
			continue
		}
		for _, want := range zones {
			if z == want {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// TestSimulatedFleetFaults runs 300 instances in 3 zones through a release,
// a promotion and a rollback, with the faults of issue 5 on the way, and
// checks that each ends as DESIGN.md promises and the audit trail keeps
// everything.
func TestSimulatedFleetFaults(t *testing.T) {
	f := newFleet(t, 300)
	ctx := context.Background()

	// The pointer key is watched as an instance's assignment would be: the
	// watcher must see every move in order.
	watchCtx, cancelWatch := context.WithCancel(ctx)
	defer cancelWatch()
	pointerWatch, err := f.kv.Watch(watchCtx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/_pawl/configs/checkout/active"}))
	if err != nil {
		t.Fatal(err)
	}
	defer pointerWatch.Close()
	if !pointerWatch.Receive() {
		t.Fatal(pointerWatch.Err())
	}

	// Six instances, two per zone, follow their assignments throughout.
	var watchers []*assignmentWatcher
	for i := range 6 {
		w := f.watchAssignments(watchCtx, fmt.Sprintf("pay-%03d", i))
		if a := w.next(t); a != nil {
			t.Fatalf("%s assigned %v before any release", w.id, a)
		}
		watchers = append(watchers, w)
	}

	// Membership race during the freeze: instances register while the
	// release is created; each is either in the snapshot or not, and those
	// that are not never count.
	var racers []string
	for i := range 20 {
		id := fmt.Sprintf("racer-%02d", i)
		racers = append(racers, id)
		f.boots[id], f.zones[id] = "boot-1", "zone-a"
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, id := range racers {
			if err := f.register(id); err != nil {
				t.Error(err)
			}
		}
	}()
	rel1 := f.create(50)
	wg.Wait()
	members := map[string]bool{}
	for _, m := range rel1.GetMembership() {
		members[m.GetWorkloadIdentity()] = true
	}
	for i := range 300 {
		if !members[fmt.Sprintf("pay-%03d", i)] {
			t.Fatalf("pay-%03d, registered before the release, is not a member", i)
		}
	}
	// The release's membership epoch splits the racers: those registered
	// at or before it were frozen, the later ones were not.
	for _, id := range racers {
		if frozen := f.epochs[id] <= rel1.GetMembershipEpoch(); frozen != members[id] {
			t.Fatalf("racer %s: epoch %d, release epoch %d, member %v", id, f.epochs[id], rel1.GetMembershipEpoch(), members[id])
		}
	}
	for _, id := range racers {
		if _, err := f.ack(rel1, id, pawlv1.InstanceState_INSTANCE_STATE_APPLIED); err != nil {
			t.Fatal(err)
		}
	}
	f.clock.Advance(healthWindow)
	for _, id := range racers {
		a, err := f.ack(rel1, id, pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED)
		if err != nil {
			t.Fatal(err)
		}
		if a.GetCounted() != members[id] {
			t.Fatalf("racer %s: member=%v counted=%v (%s)", id, members[id], a.GetCounted(), a.GetNotCountedReason())
		}
	}

	// Zone partition: zone-c never ACKs; the stage blocks on it.
	f.healthy(rel1, zoneIDs(f, "zone-a", "zone-b"))
	st := f.status(1)
	if st.GetStages()[1].GetOutcome() != "waiting" || !strings.Contains(st.GetStages()[1].GetReason(), `zone "zone-c" has 0 of 100 healthy, needs 90`) {
		t.Fatalf("zones stage during the partition: %v", st.GetStages()[1])
	}
	if _, err := f.promote(1, 0, 0, "p1"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("promote during the partition = %v", err)
	}

	zoneC := zoneIDs(f, "zone-c")
	// A partial download: the instance computed another content digest.
	partial := zoneC[0]
	if a, _ := f.ack(rel1, partial, pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, func(a *pawlv1.Ack) {
		a.ContentDigest = "sha256:" + strings.Repeat("0", 64)
	}); a.GetCounted() || !strings.Contains(a.GetNotCountedReason(), "content digest") {
		t.Fatalf("partial download ACK = %v", a)
	}
	// A digest with the wrong validator.
	if a, _ := f.ack(rel1, zoneC[1], pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, func(a *pawlv1.Ack) {
		a.ValidatorDigest = "sha256:" + strings.Repeat("1", 64)
	}); a.GetCounted() || !strings.Contains(a.GetNotCountedReason(), "validator digest") {
		t.Fatalf("wrong validator ACK = %v", a)
	}
	// A restart after ACK: the new boot re-registers; the old boot's ACKs
	// no longer count, the new boot must ACK again.
	restarted := zoneC[2]
	f.healthy(rel1, []string{restarted})
	f.boots[restarted] = "boot-2"
	if err := f.register(restarted); err != nil {
		t.Fatal(err)
	}
	if a, _ := f.ack(rel1, restarted, pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, func(a *pawlv1.Ack) { a.BootId = "boot-1"; a.ApplySequence = 5 }); a.GetCounted() ||
		!strings.Contains(a.GetNotCountedReason(), "stale boot boot-1") {
		t.Fatalf("ACK of the old boot = %v", a)
	}
	// The partition heals: zone-c ACKs (the partial download retried).
	f.healthy(rel1, zoneC)

	// A lost promote response: the client resolves it by its key.
	if _, err := f.promote(1, 0, 0, "p1"); err != nil {
		t.Fatal(err) // the response is "lost": the client ignores it
	}
	got, err := f.rollouts.GetPromotion(ctx, connect.NewRequest(&pawlv1.GetPromotionRequest{ConfigId: "checkout", IdempotencyKey: "p1"}))
	if err != nil || got.Msg.GetReceipt().GetToGeneration() != 1 {
		t.Fatalf("GetPromotion after a lost response = %v, %v", got, err)
	}
	again, err := f.promote(1, 0, 0, "p1") // a retry with the same key
	if err != nil || again.GetRevision() != got.Msg.GetReceipt().GetRevision() {
		t.Fatalf("retried promote = %v, %v; want the same receipt", again, err)
	}
	if _, err := f.rollouts.GetPromotion(ctx, connect.NewRequest(&pawlv1.GetPromotionRequest{ConfigId: "checkout", IdempotencyKey: "never-sent"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("GetPromotion of a key never used = %v", err)
	}

	for _, w := range watchers {
		w.until(t, 1, 0)
	}
	// A missed watch event: pay-000's stream breaks and stays away while
	// generation 2 goes out and is promoted. When it comes back, the first
	// set it gets is the current one: nothing it missed matters.
	_ = watchers[0].stream.Close()

	// Generation 2 goes out everywhere and is promoted.
	// Generation 2 freezes the racers too: they registered before it.
	rel2 := f.create(70)
	if n := len(rel2.GetMembership()); n != 320 {
		t.Fatalf("generation 2 froze %d members, want 320", n)
	}
	all := append(zoneIDs(f, "zone-a", "zone-b"), zoneC...)
	f.healthy(rel2, append(all, racers...))
	if _, err := f.promote(2, 1, 0, "p2"); err != nil {
		t.Fatal(err)
	}
	back := f.watchAssignments(watchCtx, "pay-000")
	if a := back.next(t); a.GetGeneration() != 2 || a.GetStage() != "" || a.GetEpoch() != 0 {
		t.Fatalf("pay-000 reconnected to %v, want generation 2 active", a)
	}
	watchers[0] = back
	// Late ACKs of generation 1 after generation 2 was promoted: kept, not counted.
	if a, _ := f.ack(rel1, all[0], pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, func(a *pawlv1.Ack) { a.ApplySequence = 9 }); a.GetCounted() ||
		!strings.Contains(a.GetNotCountedReason(), "late") {
		t.Fatalf("late ACK = %v", a)
	}
	// An error spike after the health window: instances of generation 2
	// report unhealthy; the stage fails and the operator rolls back.
	f.parallel(zoneIDs(f, "zone-b")[:10], func(id string) error {
		_, err := f.ack(rel2, id, pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, func(a *pawlv1.Ack) { a.HealthOk = false; a.ApplySequence = 3 })
		return err
	})
	if st := f.status(2); st.GetStages()[1].GetOutcome() != "failed" || !strings.Contains(st.GetStages()[1].GetReason(), "10 members rejected; the stage tolerates 5") {
		t.Fatalf("status after the error spike: %v", st.GetStages()[1])
	}
	rb, err := f.rollouts.Rollback(ctx, connect.NewRequest(&pawlv1.RollbackRequest{ConfigId: "checkout", ExpectedGeneration: 2, IdempotencyKey: "rb"}))
	if err != nil || rb.Msg.GetReceipt().GetToGeneration() != 1 || rb.Msg.GetReceipt().GetEpoch() != 1 {
		t.Fatalf("rollback = %v, %v", rb, err)
	}

	// Out-of-order watchers during rollback: every instance ends at
	// generation 1, epoch 1, and none saw its epoch go back or generation 2
	// return after the rollback.
	for _, w := range watchers {
		w.until(t, 1, 1)
		w.checkOrder(t, 2)
	}
	// The pointer's watcher saw every move, in order: 1, 2, then back to 1
	// at epoch 1.
	var moves []string
	for len(moves) < 3 && pointerWatch.Receive() {
		for _, ev := range pointerWatch.Msg().GetEvents().GetEvents() {
			moves = append(moves, string(ev.GetKv().GetValue()))
		}
	}
	if len(moves) != 3 || !strings.Contains(moves[0], `"generation":1,"epoch":0`) || !strings.Contains(moves[1], `"generation":2,"epoch":0`) ||
		!strings.Contains(moves[2], `"generation":1,"epoch":1`) {
		t.Fatalf("pointer watch saw %v", moves)
	}

	// Nothing is lost from the audit trail: both releases, every receipt,
	// every ACK with its reason.
	list, err := f.releases.ListReleases(ctx, connect.NewRequest(&pawlv1.ListReleasesRequest{ConfigId: "checkout"}))
	if err != nil || len(list.Msg.GetReleases()) != 2 {
		t.Fatalf("releases = %v, %v", list, err)
	}
	receipts, err := f.kv.List(ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: "/_pawl/configs/checkout/receipts/"}))
	if err != nil || len(receipts.Msg.GetKvs()) != 3 {
		t.Fatalf("receipts = %v, %v", receipts, err)
	}
	acks1 := f.status(1).GetAcks()
	notCounted := 0
	for _, a := range acks1 {
		if !a.GetCounted() {
			notCounted++
		}
	}
	// 20 racers and 300 fleet instances with APPLIED and HEALTHY_ACKED each
	// (the racers counted only if frozen), 2 bad digests, APPLIED and
	// HEALTHY_ACKED before the restart and 1 ACK of the old boot after it,
	// 1 late: every one is there.
	if len(acks1) != 2*20+2*300+2+2+1+1 || notCounted < 4 {
		t.Fatalf("generation 1 has %d ACKs (%d not counted)", len(acks1), notCounted)
	}
	var pe *connect.Error
	if _, err := f.promote(2, 1, 0, "stale"); !errors.As(err, &pe) || pe.Code() != connect.CodeAborted {
		t.Fatalf("promote with a stale pointer after the rollback = %v", err)
	}
}
