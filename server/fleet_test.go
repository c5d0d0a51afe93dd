package server_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/faultproxy"
	"github.com/pawlcfg/pawl/internal/testkit/testclock"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/server"
	"github.com/pawlcfg/pawl/server/internal/store"
)

// healthWindow is the fleet releases' health window; the fleet's clock
// moves past it instead of waiting.
const healthWindow = time.Minute

// Fleet settings. The change log keeps few revisions (of any kind: the
// fleet's ACKs are most of them, and they count only toward the log's
// bound) and the watch ring few events, so that a stream held back for a
// while really falls behind a compaction.
const (
	fleetRetainRevisions = 1000
	fleetRingEvents      = 256
)

// sim is one simulated instance: its registration, its apply sequence, and
// the assignment it follows. It takes an assignment only if it moves
// forward (a higher pointer epoch, or the same epoch at a later revision),
// as the SDK will: events that arrive late or twice cannot send it back.
type sim struct {
	id, zone string
	boot     string
	epoch    int64           // membership epoch of the current registration
	seq      int64           // the last apply sequence of this boot
	applied  map[int64]int64 // generation -> the apply sequence it applied at (this boot)
	cur      *pawlv1.Assignment
	curRev   int64
	refused  int // messages refused because they would have gone back
}

// fleet is a simulated fleet of instances talking to a real server over
// loopback with real gRPC clients; each instance follows its own
// assignment stream.
type fleet struct {
	t      *testing.T
	ctx    context.Context
	srv    *testserver.Server
	clock  *testclock.Clock
	logs   *syncBuffer
	hook   *commitHook
	client *http.Client
	// agent is the instances' client: with auth, the client of an
	// instance token for pay-*; agents and acks are its services.
	agent  *http.Client
	agents pawlv1connect.InstanceServiceClient
	acks   pawlv1connect.RolloutServiceClient
	token  string // the instance token; "" without auth
	// adminToken is the operator's token, with auth.
	adminToken string
	instances  pawlv1connect.InstanceServiceClient
	releases   pawlv1connect.ReleaseServiceClient
	rollouts   pawlv1connect.RolloutServiceClient
	kv         pawlv1connect.KVServiceClient
	validator  string

	mu      sync.Mutex
	changed chan struct{} // a followed assignment changed
	sims    map[string]*sim
	// The model the server's answers are checked against, built only from
	// what the test did (registrations, restarts, applies, the clock,
	// promotions), never from the server's verdicts: per generation, every
	// ACK sent (the audit trail must hold exactly these), how many must
	// count, which instances are healthy or unhealthy from their current
	// boot, and what each instance's counted reports were.
	sent      map[int64]int
	counted   map[int64]int
	healthy   map[int64]map[string]bool
	unhealthy map[int64]map[string]bool
	reports   map[int64]map[string]*reported
	members   map[int64]map[string]bool // each release's frozen membership
	active    int64                     // the generation the test promoted last (0: none)
	over      map[int64]string          // generations whose rollout the test ended, and how
	// disorder lists every message a stream delivered out of order: a
	// revision not above the stream's previous one, or a pointer epoch
	// below it. The server promises neither happens on one stream, whatever
	// the instance does with them.
	disorder []string
	follows  sync.WaitGroup
}

// reported is what the model says counted of one instance's reports of
// one release, from one boot and registration: the apply sequence it is
// at, the furthest state counted there, whether a failure was counted
// there, and when each apply sequence's APPLIED counted.
type reported struct {
	boot      string
	epoch     int64
	seq       int64
	rank      int
	healthOK  bool
	failed    bool
	appliedAt map[int64]time.Time
}

// stateRank orders the states of one apply, as docs/ROLLOUT.md does.
var stateRank = map[pawlv1.InstanceState]int{
	pawlv1.InstanceState_INSTANCE_STATE_DISCOVERED: 1, pawlv1.InstanceState_INSTANCE_STATE_DOWNLOADED: 2,
	pawlv1.InstanceState_INSTANCE_STATE_VALIDATED: 3, pawlv1.InstanceState_INSTANCE_STATE_STAGED: 4,
	pawlv1.InstanceState_INSTANCE_STATE_APPLIED: 5, pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED: 6,
	pawlv1.InstanceState_INSTANCE_STATE_REJECTED: 7, pawlv1.InstanceState_INSTANCE_STATE_STALE: 7,
}

// expect is the model's verdict on an ACK of rel about to be sent: whether
// it must count and, if not, which rule of docs/ROLLOUT.md's "What
// counts" says so. The caller holds mu.
func (f *fleet) expect(rel *pawlv1.Release, a *pawlv1.Ack) (bool, string) {
	gen, id := rel.GetGeneration(), a.GetWorkloadIdentity()
	s := f.sims[id]
	switch {
	case !f.members[gen][id]:
		return false, "not a member"
	case a.GetBootId() != s.boot:
		return false, "stale boot"
	case a.GetMembershipEpoch() != s.epoch:
		return false, "stale membership epoch"
	case a.GetContentDigest() != rel.GetContentDigest():
		return false, "content digest"
	case a.GetValidatorDigest() != rel.GetSpec().GetValidatorDigest():
		return false, "validator digest"
	case f.over[gen] != "":
		return false, "late: " + f.over[gen]
	case gen != f.active && (s.cur == nil || s.cur.GetGeneration() != gen):
		return false, "not assigned: the instance was never sent the candidate"
	}
	r := f.reports[gen][id]
	if r == nil || r.boot != a.GetBootId() || r.epoch != a.GetMembershipEpoch() {
		r = &reported{} // a new boot or registration starts over
	}
	rank := stateRank[a.GetState()]
	healthy := a.GetState() == pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED && a.GetHealthOk()
	switch seq := a.GetApplySequence(); {
	case seq < r.seq:
		return false, "out of order: an earlier apply sequence"
	case seq > r.seq:
	case r.failed:
		return false, "a failure stands"
	case rank < r.rank:
		return false, "out of order: an earlier state"
	case rank == r.rank && a.GetHealthOk() == r.healthOK:
		return false, "duplicate"
	}
	if healthy {
		at, ok := r.appliedAt[a.GetApplySequence()]
		if !ok || f.clock.Now().Sub(at) < healthWindow || a.GetHeld().AsDuration() < healthWindow {
			return false, "health window"
		}
	}
	return true, ""
}

// take records in the model an ACK that it said must count. The caller
// holds mu.
func (f *fleet) take(rel *pawlv1.Release, a *pawlv1.Ack) {
	gen, id := rel.GetGeneration(), a.GetWorkloadIdentity()
	if f.reports[gen] == nil {
		f.reports[gen] = map[string]*reported{}
	}
	r := f.reports[gen][id]
	if r == nil || r.boot != a.GetBootId() || r.epoch != a.GetMembershipEpoch() {
		r = &reported{boot: a.GetBootId(), epoch: a.GetMembershipEpoch(), appliedAt: map[int64]time.Time{}}
		f.reports[gen][id] = r
	}
	if a.GetApplySequence() > r.seq {
		r.seq, r.rank, r.failed = a.GetApplySequence(), 0, false
	}
	r.rank, r.healthOK = max(r.rank, stateRank[a.GetState()]), a.GetHealthOk()
	switch a.GetState() {
	case pawlv1.InstanceState_INSTANCE_STATE_APPLIED:
		r.appliedAt[a.GetApplySequence()] = f.clock.Now()
	case pawlv1.InstanceState_INSTANCE_STATE_REJECTED:
		r.failed = true
	case pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED:
		r.failed = !a.GetHealthOk()
	}
}

// promoted records in the model that the test moved the pointer to gen:
// the generation it replaced, superseded or rolled back, is over.
func (f *fleet) promoted(gen int64, rollback bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.active != 0 {
		f.over[f.active] = fmt.Sprintf("generation %d is no longer active", f.active)
	}
	if rollback {
		delete(f.over, gen)
	}
	f.active = gen
}

// froze records a new release's frozen membership in the model.
func (f *fleet) froze(rel *pawlv1.Release) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := map[string]bool{}
	for _, x := range rel.GetMembership() {
		m[x.GetWorkloadIdentity()] = true
	}
	f.members[rel.GetGeneration()] = m
}

// newFleet starts a server on a clock the test moves, registers size
// instances in three zones, and has each follow its assignment stream.
// With auth, the server has an auth file: the test operates as an admin,
// and the instances speak with an instance token for pay-* and racer-*.
func newFleet(t *testing.T, ctx context.Context, size int, withAuth bool) *fleet {
	clock := testclock.New(time.Now())
	logs := &syncBuffer{}
	hook := &commitHook{}
	opts := []server.Option{server.WithClock(clock.Now), server.WithRolloutCheckInterval(10 * time.Millisecond),
		// Leases outlast the simulated minutes: these instances do not heartbeat.
		server.WithInstanceLease(24 * time.Hour),
		server.WithRetention(fleetRetainRevisions, 0), server.WithLogRetention(fleetRetainRevisions), server.WithWatchRing(fleetRingEvents),
		server.WithLogger(slog.New(slog.NewTextHandler(logs, nil))),
		server.WithStoreWrapper(func(st store.Store) store.Store { hook.Store = st; return hook })}
	client, agent := testserver.HTTPClient(t), testserver.HTTPClient(t)
	var token, admin string
	if withAuth {
		var adminHash string
		admin, adminHash = testserver.NewToken(t)
		var hash string
		token, hash = testserver.NewToken(t)
		opts = append(opts, server.WithAuthFile(testserver.WriteAuthFile(t, fmt.Sprintf(
			"tokens:\n  - principal: operator\n    hash: %s\n    grants: [{role: admin}]\n"+
				"  - principal: pay-fleet\n    hash: %s\n    grants: [{role: instance, identities: [\"pay-*\", \"racer-*\"]}]\n", adminHash, hash))))
		client, agent = testserver.WithBearer(client, admin), testserver.WithBearer(agent, token)
	}
	srv := testserver.Start(t, opts...)
	f := &fleet{
		t: t, ctx: ctx, srv: srv, clock: clock, logs: logs, hook: hook, client: client, agent: agent, token: token, adminToken: admin,
		agents:    pawlv1connect.NewInstanceServiceClient(agent, srv.URL, connect.WithGRPC()),
		acks:      pawlv1connect.NewRolloutServiceClient(agent, srv.URL, connect.WithGRPC()),
		instances: pawlv1connect.NewInstanceServiceClient(client, srv.URL, connect.WithGRPC()),
		releases:  pawlv1connect.NewReleaseServiceClient(client, srv.URL, connect.WithGRPC()),
		rollouts:  pawlv1connect.NewRolloutServiceClient(client, srv.URL, connect.WithGRPC()),
		kv:        pawlv1connect.NewKVServiceClient(client, srv.URL, connect.WithGRPC()),
		validator: upload(t, pawlv1connect.NewValidatorServiceClient(client, srv.URL, connect.WithGRPC()), "routing"),
		changed:   make(chan struct{}, 1),
		sims:      map[string]*sim{},
		sent:      map[int64]int{}, counted: map[int64]int{},
		healthy: map[int64]map[string]bool{}, unhealthy: map[int64]map[string]bool{},
		reports: map[int64]map[string]*reported{}, members: map[int64]map[string]bool{}, over: map[int64]string{},
	}
	var ids []string
	for i := range size {
		id := fmt.Sprintf("pay-%03d", i)
		ids = append(ids, id)
		f.sims[id] = &sim{id: id, zone: fmt.Sprintf("zone-%c", 'a'+i%3), boot: "boot-1", applied: map[int64]int64{}}
	}
	f.parallel(ids, f.register)
	return f
}

// asAgent is client speaking as the instances (with their token, if any).
func (f *fleet) asAgent(client *http.Client) *http.Client {
	if f.token == "" {
		return client
	}
	return testserver.WithBearer(client, f.token)
}

// asOperator is client speaking as the test's operator.
func (f *fleet) asOperator(client *http.Client) *http.Client {
	if f.token == "" {
		return client
	}
	return testserver.WithBearer(client, f.adminToken)
}

func (f *fleet) register(id string) error {
	f.mu.Lock()
	s := f.sims[id]
	boot, zone := s.boot, s.zone
	f.mu.Unlock()
	resp, err := f.agents.Register(f.ctx, connect.NewRequest(&pawlv1.RegisterRequest{Instance: &pawlv1.Instance{
		WorkloadIdentity: id, BootId: boot, Zone: zone, Role: "worker", TrafficWeight: 1, AppVersion: "2.1.0",
	}}))
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s.epoch = resp.Msg.GetRecord().GetMembershipEpoch()
	return nil
}

// restart gives id a new boot: it registers again, its apply sequence
// starts over, and none of its earlier reports count any more.
func (f *fleet) restart(id, boot string) error {
	f.mu.Lock()
	s := f.sims[id]
	s.boot, s.seq, s.applied = boot, 0, map[int64]int64{}
	for gen := range f.healthy {
		delete(f.healthy[gen], id)
		delete(f.unhealthy[gen], id)
	}
	f.mu.Unlock()
	return f.register(id)
}

// follow opens id's assignment stream through client (the fleet's, or one
// that faults) and feeds what it receives to the instance until the stream
// ends.
func (f *fleet) follow(id string, client connect.HTTPClient, url string) *connect.ServerStreamForClient[pawlv1.WatchAssignmentsResponse] {
	f.t.Helper()
	stream, err := pawlv1connect.NewInstanceServiceClient(client, url, connect.WithGRPC()).WatchAssignments(f.ctx,
		connect.NewRequest(&pawlv1.WatchAssignmentsRequest{WorkloadIdentity: id}))
	if err != nil {
		f.t.Fatal(err)
	}
	f.follows.Add(1)
	go func() {
		defer f.follows.Done()
		var rev, epoch int64
		for stream.Receive() {
			msg := stream.Msg()
			if msg.GetRevision() <= rev {
				f.misordered("%s: a message at revision %d after one at %d", id, msg.GetRevision(), rev)
			}
			rev = msg.GetRevision()
			for _, a := range msg.GetAssignments() {
				if a.GetConfigId() == "checkout" && a.GetEpoch() < epoch {
					f.misordered("%s: pointer epoch %d after %d", id, a.GetEpoch(), epoch)
				}
				if a.GetConfigId() == "checkout" {
					epoch = max(epoch, a.GetEpoch())
				}
			}
			f.offer(id, msg)
		}
	}()
	return stream
}

// misordered records a message a stream delivered out of order.
func (f *fleet) misordered(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.disorder = append(f.disorder, fmt.Sprintf(format, args...))
}

// checkOrder fails the test if any stream delivered a message out of
// order.
func (f *fleet) checkOrder() {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.disorder) > 0 {
		f.t.Fatalf("assignment streams delivered messages out of order: %v", f.disorder)
	}
}

// offer hands the instance an assignment message; it takes it only if it
// moves forward. It reports whether it was taken.
func (f *fleet) offer(id string, msg *pawlv1.WatchAssignmentsResponse) bool {
	var a *pawlv1.Assignment
	for _, x := range msg.GetAssignments() {
		if x.GetConfigId() == "checkout" && !x.GetShadow() {
			a = x
		}
	}
	f.mu.Lock()
	s := f.sims[id]
	taken := msg.GetRevision() > s.curRev && (a == nil || s.cur == nil || a.GetEpoch() >= s.cur.GetEpoch())
	if taken {
		s.cur, s.curRev = a, msg.GetRevision()
	} else {
		s.refused++
	}
	f.mu.Unlock()
	select {
	case f.changed <- struct{}{}:
	default:
	}
	return taken
}

// await waits until cond holds of the instances' followed assignments.
func (f *fleet) await(what string, cond func() bool) {
	f.t.Helper()
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for {
		f.mu.Lock()
		ok := cond()
		f.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-f.changed:
		case <-timeout.C:
			f.t.Fatalf("waited a minute for %s", what)
		}
	}
}

// runs reports (caller holds mu) whether id follows generation gen at epoch.
func (f *fleet) runs(id string, gen, epoch int64) bool {
	s := f.sims[id]
	return s.cur != nil && s.cur.GetGeneration() == gen && s.cur.GetEpoch() == epoch
}

// awaitAssigned waits until exactly n of ids follow generation gen (at the
// epoch), and returns them; n < 0 means all of them.
func (f *fleet) awaitAssigned(ids []string, gen, epoch int64, n int) []string {
	f.t.Helper()
	if n < 0 {
		n = len(ids)
	}
	var got []string
	f.await(fmt.Sprintf("%d of %d instances to follow generation %d", n, len(ids), gen), func() bool {
		got = got[:0]
		for _, id := range ids {
			if f.runs(id, gen, epoch) {
				got = append(got, id)
			}
		}
		return len(got) == n
	})
	sort.Strings(got)
	return got
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
	resp, err := f.releases.CreateRelease(f.ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: spec}))
	if err != nil {
		f.t.Fatal(err)
	}
	f.froze(resp.Msg.GetRelease())
	return resp.Msg.GetRelease()
}

type ackOpt func(*pawlv1.Ack)

// ack sends one report of id about rel, from its current boot and
// registration, and records it in the model.
func (f *fleet) ack(rel *pawlv1.Release, id string, state pawlv1.InstanceState, seq int64, opts ...ackOpt) (*pawlv1.Ack, error) {
	f.mu.Lock()
	s := f.sims[id]
	a := &pawlv1.Ack{
		ConfigId: "checkout", Generation: rel.GetGeneration(), WorkloadIdentity: id, BootId: s.boot, MembershipEpoch: s.epoch,
		ApplySequence: seq, ContentDigest: rel.GetContentDigest(), ValidatorDigest: rel.GetSpec().GetValidatorDigest(),
		AppArtifact: "checkout@2.1.0", State: state, HealthOk: true, Held: durationpb.New(healthWindow),
		Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}
	f.mu.Unlock()
	for _, o := range opts {
		o(a)
	}
	// The model's verdict is taken before the report is sent and kept
	// whatever the server answers: the server's answer is what is checked.
	f.mu.Lock()
	must, why := f.expect(rel, a)
	f.mu.Unlock()
	resp, err := f.acks.Ack(f.ctx, connect.NewRequest(&pawlv1.AckRequest{Ack: a}))
	if err != nil {
		return nil, err
	}
	got := resp.Msg.GetAck()
	gen := rel.GetGeneration()
	f.mu.Lock()
	defer f.mu.Unlock()
	if got.GetCounted() != must {
		f.t.Errorf("%s's %s of generation %d at apply sequence %d: the server counted it %v (%q); the model says %v (%s)",
			id, state, gen, a.GetApplySequence(), got.GetCounted(), got.GetNotCountedReason(), must, why)
	}
	f.sent[gen]++
	if must {
		f.take(rel, a)
		f.counted[gen]++
		if f.healthy[gen] == nil {
			f.healthy[gen], f.unhealthy[gen] = map[string]bool{}, map[string]bool{}
		}
		switch {
		case state == pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED && a.GetHealthOk():
			f.healthy[gen][id] = true
		case state == pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, state == pawlv1.InstanceState_INSTANCE_STATE_REJECTED:
			delete(f.healthy[gen], id)
			f.unhealthy[gen][id] = true
		}
	}
	return got, nil
}

// apply has every instance of ids apply rel (APPLIED at a new apply
// sequence), lets the health window pass, and has each report
// HEALTHY_ACKED; every report must count. Halfway through the window the
// first of them reports healthy too early, which the model says must not
// count.
func (f *fleet) apply(rel *pawlv1.Release, ids []string) {
	f.t.Helper()
	gen := rel.GetGeneration()
	f.parallel(ids, func(id string) error {
		f.mu.Lock()
		s := f.sims[id]
		s.seq++
		s.applied[gen] = s.seq
		seq := s.seq
		f.mu.Unlock()
		return f.mustCount(rel, id, pawlv1.InstanceState_INSTANCE_STATE_APPLIED, seq)
	})
	f.clock.Advance(healthWindow / 2)
	f.mu.Lock()
	early := f.sims[ids[0]].applied[gen]
	f.mu.Unlock()
	if _, err := f.ack(rel, ids[0], pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, early); err != nil {
		f.t.Fatal(err)
	}
	f.clock.Advance(healthWindow - healthWindow/2)
	f.parallel(ids, func(id string) error {
		f.mu.Lock()
		seq := f.sims[id].applied[gen]
		f.mu.Unlock()
		return f.mustCount(rel, id, pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, seq)
	})
}

func (f *fleet) mustCount(rel *pawlv1.Release, id string, state pawlv1.InstanceState, seq int64) error {
	a, err := f.ack(rel, id, state, seq)
	if err == nil && !a.GetCounted() {
		err = fmt.Errorf("%s not counted: %s", state, a.GetNotCountedReason())
	}
	return err
}

// rollOut takes rel through its canary cohort, then the rest of ids: each
// wave is the instances that follow rel, as their streams told them.
func (f *fleet) rollOut(rel *pawlv1.Release, canaries int, ids []string) (cohort []string) {
	f.t.Helper()
	gen := rel.GetGeneration()
	first := f.awaitAssigned(ids, gen, f.pointerEpoch(), canaries)
	f.apply(rel, first)
	rest := without(ids, first...)
	f.awaitAssigned(rest, gen, f.pointerEpoch(), -1)
	f.apply(rel, rest)
	return first
}

func (f *fleet) pointerEpoch() int64 {
	f.t.Helper()
	resp, err := f.rollouts.GetPointer(f.ctx, connect.NewRequest(&pawlv1.GetPointerRequest{ConfigId: "checkout"}))
	if err != nil {
		f.t.Fatal(err)
	}
	return resp.Msg.GetPointer().GetEpoch()
}

// status is a release's status with every page of its ACKs.
func (f *fleet) status(gen int64) *pawlv1.GetRolloutStatusResponse {
	f.t.Helper()
	var st *pawlv1.GetRolloutStatusResponse
	for token := ""; ; {
		resp, err := f.rollouts.GetRolloutStatus(f.ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: "checkout", Generation: gen,
			AckPageSize: 97, AckPageToken: token})) // an odd size, so that pages end anywhere
		if err != nil {
			f.t.Fatal(err)
		}
		if st == nil {
			st = resp.Msg
		} else {
			st.Acks = append(st.Acks, resp.Msg.GetAcks()...)
		}
		if token = resp.Msg.GetNextAckPageToken(); token == "" {
			return st
		}
	}
}

// checkTally compares a release's status with the model: the stages
// together (each member counted by the one stage that assigns it) count
// exactly the instances healthy and unhealthy from their current boot,
// every member once; no counted ACK has a wrong digest; and the
// audit trail holds exactly the ACKs sent, counted as they were answered.
func (f *fleet) checkTally(rel *pawlv1.Release) *pawlv1.GetRolloutStatusResponse {
	f.t.Helper()
	gen := rel.GetGeneration()
	f.checkOrder()
	st := f.status(gen)
	// Each member belongs to one stage, the one that assigns it the
	// release: the canary cohort or the zones stage.
	var stageHealthy, stageRejected, stageMembers, total int32
	for _, stage := range st.GetStages() {
		stageHealthy, stageRejected, stageMembers = stageHealthy+stage.GetHealthy(), stageRejected+stage.GetRejected(), stageMembers+stage.GetMembers()
		for _, n := range stage.GetStates() {
			total += n
		}
	}
	f.mu.Lock()
	healthy, unhealthy, sent, counted := len(f.healthy[gen]), len(f.unhealthy[gen]), f.sent[gen], f.counted[gen]
	f.mu.Unlock()
	if int(stageHealthy) != healthy || int(stageRejected) != unhealthy {
		f.t.Fatalf("generation %d: the stages count %d healthy and %d rejected; %d and %d reported from current boots",
			gen, stageHealthy, stageRejected, healthy, unhealthy)
	}
	if total != stageMembers || int(stageMembers) != len(rel.GetMembership()) {
		f.t.Fatalf("generation %d: states add up to %d for %d members in the stages (%d frozen)", gen, total, stageMembers, len(rel.GetMembership()))
	}
	stored, storedCounted := 0, 0
	for _, a := range st.GetAcks() {
		stored++
		if a.GetCounted() {
			storedCounted++
			if a.GetContentDigest() != rel.GetContentDigest() || a.GetValidatorDigest() != rel.GetSpec().GetValidatorDigest() {
				f.t.Fatalf("generation %d: a counted ACK of %s has digests %s, %s", gen, a.GetWorkloadIdentity(), a.GetContentDigest(), a.GetValidatorDigest())
			}
		}
	}
	if stored != sent || storedCounted != counted {
		f.t.Fatalf("generation %d: the audit trail holds %d ACKs (%d counted); %d were sent (%d answered counted)", gen, stored, storedCounted, sent, counted)
	}
	return st
}

// commitHook runs a function once, just before the store commits the first
// transaction that writes a key it was armed for: a fault that lands
// between what a request read and what it writes.
type commitHook struct {
	store.Store
	mu   sync.Mutex
	key  string
	fn   func()
	runs int
}

func (h *commitHook) arm(key string, fn func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.key, h.fn = key, fn
}

func (h *commitHook) ran() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs
}

func (h *commitHook) Txn(ctx context.Context, t store.Txn) (store.Result, error) {
	h.mu.Lock()
	var fn func()
	for _, p := range t.Puts {
		if h.fn != nil && p.Key == h.key {
			fn, h.fn = h.fn, nil
			h.runs++
		}
	}
	h.mu.Unlock()
	if fn != nil {
		fn()
	}
	return h.Store.Txn(ctx, t)
}

// syncBuffer is a log destination safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// zoneIDs returns the fleet's instances (not the racers) in the zones.
func zoneIDs(f *fleet, zones ...string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for id, s := range f.sims {
		if !strings.HasPrefix(id, "pay-") {
			continue
		}
		for _, want := range zones {
			if s.zone == want {
				ids = append(ids, id)
			}
		}
	}
	sort.Strings(ids)
	return ids
}

// plus returns a new slice of ids and more.
func plus(ids []string, more ...string) []string {
	return append(append([]string(nil), ids...), more...)
}

func without(ids []string, drop ...string) []string {
	gone := map[string]bool{}
	for _, id := range drop {
		gone[id] = true
	}
	var out []string
	for _, id := range ids {
		if !gone[id] {
			out = append(out, id)
		}
	}
	return out
}

func cohortSize(fraction float64, members int) int {
	return int(math.Ceil(fraction*float64(members) - 1e-9))
}

// TestSimulatedFleetFaults runs 300 instances in 3 zones, each following
// its own assignment stream, through two releases, two promotions and a
// rollback, injecting each fault for real on the way: a membership race
// during the freeze, ACKs of instances the release was never assigned to,
// a zone partition, a partial download and a wrong validator, a restart
// after ACK, a restart landing inside a promotion's commit, a stream that
// misses a promotion, a promotion whose answer is lost on the way back, an
// error spike at the same apply sequence, a stream held back behind a
// proxy during the rollback (its messages then arrive after newer ones),
// and a stream held back so long that the change log it needs is
// compacted. Each ends as the rollout promises: no promotion counts a
// wrong digest, a stale boot or an identity twice, no pointer move has a
// zone below its quorum, and the audit trail holds exactly what was sent.
func TestSimulatedFleetFaults(t *testing.T) { simulatedFleetFaults(t, false) }

// TestSimulatedFleetFaultsWithAuth is TestSimulatedFleetFaults on a server
// with an auth file, the instances speaking with an instance token.
func TestSimulatedFleetFaultsWithAuth(t *testing.T) { simulatedFleetFaults(t, true) }

func simulatedFleetFaults(t *testing.T, withAuth bool) {
	ctx, cancel := context.WithCancel(context.Background())
	f := newFleet(t, ctx, 300, withAuth)
	defer func() {
		cancel()
		f.follows.Wait()
	}()
	all := zoneIDs(f, "zone-a", "zone-b", "zone-c")

	// Every instance follows its assignment stream. pay-004's goes through
	// a proxy that will hold it back during the rollback.
	delayed := "pay-004"
	holder := faultproxy.NewHolder(t, f.srv.Addr)
	var delayedStream *connect.ServerStreamForClient[pawlv1.WatchAssignmentsResponse]
	missed := "pay-000" // its stream breaks before generation 2
	var missedStream *connect.ServerStreamForClient[pawlv1.WatchAssignmentsResponse]
	for _, id := range all {
		switch id {
		case delayed:
			delayedStream = f.follow(id, f.asAgent(testserver.HTTPClient(t)), "http://"+holder.Addr)
		case missed:
			missedStream = f.follow(id, f.agent, f.srv.URL)
		default:
			f.follow(id, f.agent, f.srv.URL)
		}
	}
	f.await("every instance's first (empty) assignment set", func() bool {
		for _, id := range all {
			if f.sims[id].curRev == 0 {
				return false
			}
		}
		return true
	})

	// pay-299 also opens a stream on a connection whose flow-control window
	// is 64 bytes, and stops reading: the server's send blocks, its place in
	// the change feed falls out of the watch ring, and the change log is
	// compacted past it. It reads again at the end.
	var held *connect.ServerStreamForClient[pawlv1.WatchAssignmentsResponse]
	{
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr := &http.Transport{Protocols: &p, HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: 64}}
		t.Cleanup(tr.CloseIdleConnections)
		var err error
		held, err = pawlv1connect.NewInstanceServiceClient(f.asAgent(&http.Client{Transport: tr}), f.srv.URL, connect.WithGRPC()).WatchAssignments(ctx,
			connect.NewRequest(&pawlv1.WatchAssignmentsRequest{WorkloadIdentity: "pay-299"}))
		if err != nil || !held.Receive() {
			t.Fatalf("held stream: %v, %v", err, held.Err())
		}
		t.Cleanup(func() { _ = held.Close() })
	}

	// The pointer key is watched as a plain KV watch: it must see every
	// move, in order.
	pointerWatch, err := f.kv.Watch(ctx, connect.NewRequest(&pawlv1.WatchRequest{Prefix: "/_pawl/configs/checkout/active"}))
	if err != nil {
		t.Fatal(err)
	}
	defer pointerWatch.Close()
	if !pointerWatch.Receive() {
		t.Fatal(pointerWatch.Err())
	}

	// Membership race during the freeze: 20 instances register while the
	// release is created; each is in the snapshot or not, and those that
	// are not never count. One more registers inside the creation's
	// commit, after the snapshot was read and before the release exists:
	// it must not be a member.
	var racers []string
	for i := range 21 {
		id := fmt.Sprintf("racer-%02d", i)
		racers = append(racers, id)
		f.sims[id] = &sim{id: id, zone: "zone-a", boot: "boot-1", applied: map[int64]int64{}}
	}
	inCommit := racers[20]
	f.hook.arm("/_pawl/configs/checkout/head", func() {
		if err := f.register(inCommit); err != nil {
			t.Error(err)
		}
	})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, id := range racers[:20] {
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
	var frozenRacers, lateRacers []string
	for _, id := range racers {
		// The release's membership epoch is the revision of its snapshot:
		// exactly the racers registered at or before it are members.
		if frozen := f.sims[id].epoch <= rel1.GetMembershipEpoch(); frozen != members[id] {
			t.Fatalf("racer %s: epoch %d, release epoch %d, member %v", id, f.sims[id].epoch, rel1.GetMembershipEpoch(), members[id])
		}
		if members[id] {
			frozenRacers = append(frozenRacers, id)
		} else {
			lateRacers = append(lateRacers, id)
		}
		f.follow(id, f.agent, f.srv.URL)
	}
	for _, id := range all {
		if !members[id] {
			t.Fatalf("%s, registered before the release, is not a member", id)
		}
	}
	if f.hook.ran() != 1 || members[inCommit] {
		t.Fatalf("%s registered inside the release's commit (hook ran %d): member %v", inCommit, f.hook.ran(), members[inCommit])
	}
	if len(rel1.GetMembership()) != 300+len(frozenRacers) {
		t.Fatalf("generation 1 froze %d members", len(rel1.GetMembership()))
	}
	t.Logf("%d racers frozen, %d registered after the freeze", len(frozenRacers), len(lateRacers))

	// ACKs of instances the release was not assigned to are kept and do
	// not count: late racers are not members; a member outside the canary
	// cohort is not reached before the canary passes.
	canaries := cohortSize(0.01, len(rel1.GetMembership()))
	cohort1 := f.awaitAssigned(plus(all, frozenRacers...), 1, 0, canaries)
	for _, id := range lateRacers {
		if a, _ := f.ack(rel1, id, pawlv1.InstanceState_INSTANCE_STATE_APPLIED, 1); a.GetCounted() || !strings.Contains(a.GetNotCountedReason(), "not in the release's frozen membership") {
			t.Fatalf("ACK of %s, registered after the freeze = %v", id, a)
		}
	}
	outsider := without(all, cohort1...)[0]
	if a, _ := f.ack(rel1, outsider, pawlv1.InstanceState_INSTANCE_STATE_APPLIED, 1); a.GetCounted() || !strings.Contains(a.GetNotCountedReason(), "not assigned") {
		t.Fatalf("ACK of %s before its stage was reached = %v", outsider, a)
	}
	f.mu.Lock()
	f.sims[outsider].seq = 1 // its next apply takes the next sequence
	f.mu.Unlock()

	// Zone partition after the canary: zone-c's instances outside the
	// cohort never ACK; the zones stage blocks on zone-c.
	zoneC := zoneIDs(f, "zone-c")
	f.apply(rel1, cohort1)
	f.awaitAssigned(without(plus(all, frozenRacers...), cohort1...), 1, 0, -1)
	f.apply(rel1, without(plus(all, frozenRacers...), plus(zoneC, cohort1...)...))
	st := f.checkTally(rel1)
	cInCohort := len(cohort1) - len(without(cohort1, zoneC...))
	// The zones stage counts zone-c's members the canary stage left.
	zoneCLeft := 100 - cInCohort
	if want := fmt.Sprintf(`zone "zone-c" has 0 of %d healthy, needs %d`, zoneCLeft, cohortSize(0.9, zoneCLeft)); st.GetStages()[1].GetOutcome() != "waiting" ||
		!strings.Contains(st.GetStages()[1].GetReason(), want) {
		t.Fatalf("zones stage during the partition: %v; want %q", st.GetStages()[1], want)
	}
	if _, err := f.promote(f.rollouts, 1, 0, 0, "p1"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("promote during the partition = %v", err)
	}

	// A partial download: the instance computed another content digest.
	// A digest with the wrong validator. Both are kept, neither counts.
	silentC := without(zoneC, cohort1...)
	if a, _ := f.ack(rel1, silentC[0], pawlv1.InstanceState_INSTANCE_STATE_APPLIED, 1, func(a *pawlv1.Ack) {
		a.ContentDigest = "sha256:" + strings.Repeat("0", 64)
	}); a.GetCounted() || !strings.Contains(a.GetNotCountedReason(), "content digest") {
		t.Fatalf("partial download ACK = %v", a)
	}
	if a, _ := f.ack(rel1, silentC[1], pawlv1.InstanceState_INSTANCE_STATE_APPLIED, 1, func(a *pawlv1.Ack) {
		a.ValidatorDigest = "sha256:" + strings.Repeat("1", 64)
	}); a.GetCounted() || !strings.Contains(a.GetNotCountedReason(), "validator digest") {
		t.Fatalf("wrong validator ACK = %v", a)
	}
	f.mu.Lock()
	f.sims[silentC[0]].seq, f.sims[silentC[1]].seq = 1, 1
	f.mu.Unlock()

	// A restart after ACK: a healthy zone-a instance registers again with
	// a new boot. The tally drops by exactly one; its old boot's ACKs stay
	// in the audit trail and stop counting; its new boot applies again.
	restarted := without(zoneIDs(f, "zone-a"), cohort1...)[0]
	if err := f.restart(restarted, "boot-2"); err != nil {
		t.Fatal(err)
	}
	st = f.checkTally(rel1)
	if a, _ := f.ack(rel1, restarted, pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, 5, func(a *pawlv1.Ack) { a.BootId = "boot-1" }); a.GetCounted() ||
		!strings.Contains(a.GetNotCountedReason(), "stale boot boot-1") {
		t.Fatalf("ACK of the old boot = %v", a)
	}
	f.apply(rel1, []string{restarted})
	f.checkTally(rel1)

	// The partition heals: zone-c applies (the partial download retried).
	f.apply(rel1, silentC)
	f.checkTally(rel1)

	// Reports that go back: a zone-c instance, now at apply sequence 2
	// (its partial download took 1), reports APPLIED at 1, then its
	// HEALTHY_ACKED at 2 again. The model says neither counts (out of
	// order, duplicate); the server must agree.
	outsider = silentC[0]
	f.mu.Lock()
	if at := f.sims[outsider].applied[1]; at != 2 {
		t.Fatalf("%s applied generation 1 at apply sequence %d, want 2", outsider, at)
	}
	f.mu.Unlock()
	for _, back := range []struct {
		state pawlv1.InstanceState
		seq   int64
	}{{pawlv1.InstanceState_INSTANCE_STATE_APPLIED, 1}, {pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, 2}} {
		if _, err := f.ack(rel1, outsider, back.state, back.seq); err != nil {
			t.Fatal(err)
		}
	}
	f.checkTally(rel1)

	// A membership change inside the promotion: a healthy zone-b instance
	// restarts after Promote read the rollout and before it commits. The
	// commit is refused, and Promote decides again without the stale boot:
	// the new boot has not reported what it runs, so the coverage gate
	// refuses. Once it reports APPLIED (not yet healthy), the receipt's
	// evidence shows one healthy fewer in zone-b.
	mover := without(zoneIDs(f, "zone-b"), cohort1...)[0]
	f.hook.arm("/_pawl/configs/checkout/active", func() {
		if err := f.restart(mover, "boot-2"); err != nil {
			t.Error(err) // on the server's goroutine: no Fatal
		}
	})
	if _, err := f.promote(f.rollouts, 1, 0, 0, "p1"); connect.CodeOf(err) != connect.CodeFailedPrecondition ||
		!strings.Contains(err.Error(), "missing: "+mover) {
		t.Fatalf("promote with the restarted %s not reporting = %v", mover, err)
	}
	f.promoted(1, false)
	if f.hook.ran() != 2 {
		t.Fatal("the restart did not land inside the promotion")
	}
	f.mu.Lock()
	f.sims[mover].seq++
	moverSeq := f.sims[mover].seq
	f.mu.Unlock()
	if err := f.mustCount(rel1, mover, pawlv1.InstanceState_INSTANCE_STATE_APPLIED, moverSeq); err != nil {
		t.Fatal(err)
	}
	rc1, err := f.promote(f.rollouts, 1, 0, 0, "p1")
	if err != nil {
		t.Fatal(err)
	}
	zb := rc1.GetEvidence()[1].GetZones()["zone-b"]
	if zb.GetHealthy() != zb.GetMembers()-1 || int(rc1.GetEvidence()[1].GetHealthy()) != len(rel1.GetMembership())-len(cohort1)-1 {
		t.Fatalf("receipt evidence counts the restarted boot: zone-b %v, %d healthy of %d", zb, rc1.GetEvidence()[1].GetHealthy(), len(rel1.GetMembership()))
	}
	f.awaitAssigned(plus(all, frozenRacers...), 1, 0, -1)
	f.apply(rel1, []string{mover}) // its new boot applies the active generation
	f.checkTally(rel1)

	// A missed watch event: pay-000's stream breaks and stays away while
	// generation 2 goes out and is promoted.
	_ = missedStream.Close()

	// Generation 2 freezes the racers too: they registered before it.
	rel2 := f.create(70)
	members2 := plus(all, racers...)
	if n := len(rel2.GetMembership()); n != len(members2) {
		t.Fatalf("generation 2 froze %d members, want %d", n, len(members2))
	}
	cohort2 := f.rollOut(rel2, cohortSize(0.01, len(members2)), without(members2, missed))
	f.checkTally(rel2)

	// Hold pay-004's stream: the promotion's message to it is held in the
	// proxy, while the others get it.
	holder.Hold()

	// A lost promote response: the server promotes, the answer is dropped
	// on the way back. The client learns the outcome by its key, and a
	// retry with the key is the same promotion.
	loser := faultproxy.NewLoser(t, f.srv.URL)
	lossy := pawlv1connect.NewRolloutServiceClient(f.asOperator(testserver.HTTP1Client(t)), loser.URL)
	loser.LoseNext("/Promote", 1)
	if _, err := f.promote(lossy, 2, 1, 0, "p2"); err == nil || loser.Lost("/Promote") != 1 {
		t.Fatalf("promote with its answer lost = %v (%d lost)", err, loser.Lost("/Promote"))
	}
	got, err := f.rollouts.GetPromotion(ctx, connect.NewRequest(&pawlv1.GetPromotionRequest{ConfigId: "checkout", IdempotencyKey: "p2"}))
	if err != nil || got.Msg.GetReceipt().GetToGeneration() != 2 {
		t.Fatalf("GetPromotion after a lost response = %v, %v", got, err)
	}
	f.promoted(2, false)
	again, err := f.promote(lossy, 2, 1, 0, "p2")
	if err != nil || again.GetRevision() != got.Msg.GetReceipt().GetRevision() {
		t.Fatalf("retried promote = %v, %v; want the same receipt", again, err)
	}

	// pay-000 comes back: the first set it gets is the current one.
	f.follow(missed, f.agent, f.srv.URL)
	f.awaitAssigned([]string{missed}, 2, 0, 1)
	f.apply(rel2, []string{missed})

	// Late ACKs of generation 1 after generation 2 was promoted: kept, not
	// counted.
	if a, _ := f.ack(rel1, all[1], pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, 9); a.GetCounted() || !strings.Contains(a.GetNotCountedReason(), "late") {
		t.Fatalf("late ACK = %v", a)
	}

	// An error spike after the health window: ten zone-b instances report
	// unhealthy at the same apply sequence as their healthy report. Each
	// counts at once; the stage fails; the operator rolls back.
	spiked := without(zoneIDs(f, "zone-b"), append([]string{mover}, cohort2...)...)[:10] // the zones stage's: a canary's counts in its own stage
	f.parallel(spiked, func(id string) error {
		f.mu.Lock()
		seq := f.sims[id].applied[2]
		f.mu.Unlock()
		a, err := f.ack(rel2, id, pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, seq, func(a *pawlv1.Ack) { a.HealthOk = false })
		if err == nil && !a.GetCounted() {
			err = fmt.Errorf("unhealthy report not counted: %s", a.GetNotCountedReason())
		}
		return err
	})
	st = f.checkTally(rel2)
	if z := st.GetStages()[1]; z.GetOutcome() != "failed" || !strings.Contains(z.GetReason(), "10 members rejected; the stage tolerates 5") ||
		z.GetStates()["UNHEALTHY"] != 10 {
		t.Fatalf("status after the error spike: %v", z)
	}
	// Per role: every instance of this fleet registered as "worker".
	if z := st.GetStages()[1]; len(z.GetRoles()) != 1 || z.GetRoles()["worker"].GetMembers() != z.GetMembers() ||
		z.GetRoles()["worker"].GetStates()["UNHEALTHY"] != 10 {
		t.Fatalf("per-role status after the error spike: %v (stage of %d members)", z.GetRoles(), z.GetMembers())
	}
	rb, err := f.rollouts.Rollback(ctx, connect.NewRequest(&pawlv1.RollbackRequest{ConfigId: "checkout", ExpectedGeneration: 2, IdempotencyKey: "rb"}))
	if err != nil || rb.Msg.GetReceipt().GetToGeneration() != 1 || rb.Msg.GetReceipt().GetEpoch() != 1 {
		t.Fatalf("rollback = %v, %v", rb, err)
	}
	f.promoted(1, true)

	// Out-of-order delivery during the rollback: pay-004 gives up on its
	// held stream and reconnects directly, getting generation 1 at epoch 1.
	// Then the proxy delivers what it held: older messages, which the
	// instance refuses. It never goes back to generation 2.
	f.follow(delayed, f.agent, f.srv.URL)
	f.awaitAssigned([]string{delayed}, 1, 1, 1)
	f.mu.Lock()
	refusedBefore := f.sims[delayed].refused
	f.mu.Unlock()
	if n := holder.Release(); n == 0 {
		t.Fatal("the proxy held nothing back")
	}
	f.await("pay-004's held messages to arrive and be refused", func() bool { return f.sims[delayed].refused > refusedBefore })
	_ = delayedStream.Close()

	// Everyone ends at generation 1, epoch 1.
	f.awaitAssigned(plus(all, racers...), 1, 1, -1)
	// Generation 2's evidence is frozen: an ACK after the rollback is late.
	if a, _ := f.ack(rel2, spiked[0], pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED, 99); a.GetCounted() || !strings.Contains(a.GetNotCountedReason(), "late: generation 2 is no longer active") {
		t.Fatalf("ACK of the rolled-back generation = %v", a)
	}

	// The stream held back since the start catches up: the change log it
	// needed was compacted, so the server sent it the current set.
	for {
		if !held.Receive() {
			t.Fatalf("held stream ended: %v", held.Err())
		}
		if a := held.Msg().GetAssignments(); len(a) == 1 && a[0].GetGeneration() == 1 && a[0].GetEpoch() == 1 {
			break
		}
	}
	if !strings.Contains(f.logs.String(), "assignment stream fell behind the change log's compaction") ||
		!strings.Contains(f.logs.String(), "identity=pay-299") {
		t.Fatal("the held stream did not fall behind a compaction")
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

	// Nothing is missing from the audit trail, and no move broke a promise:
	// exactly three receipts; each promotion's evidence meets every zone's
	// quorum; both releases and every ACK are kept (checkTally).
	f.checkTally(rel1)
	f.checkTally(rel2)
	list, err := f.releases.ListReleases(ctx, connect.NewRequest(&pawlv1.ListReleasesRequest{ConfigId: "checkout"}))
	if err != nil || len(list.Msg.GetReleases()) != 2 {
		t.Fatalf("releases = %v, %v", list, err)
	}
	receipts, err := f.kv.List(ctx, connect.NewRequest(&pawlv1.ListRequest{Prefix: "/_pawl/configs/checkout/receipts/"}))
	if err != nil || len(receipts.Msg.GetKvs()) != 3 {
		t.Fatalf("receipts = %v, %v", receipts, err)
	}
	for _, rc := range []*pawlv1.Receipt{rc1, got.Msg.GetReceipt()} {
		for _, ev := range rc.GetEvidence() {
			if ev.GetOutcome() != "passed" {
				t.Fatalf("receipt %s has stage %s %s", rc.GetIdempotencyKey(), ev.GetName(), ev.GetOutcome())
			}
			if ev.GetName() != "zones" {
				continue
			}
			for zone, z := range ev.GetZones() {
				if need := cohortSize(0.9, int(z.GetMembers())); int(z.GetHealthy()) < need {
					t.Fatalf("receipt %s moved the pointer with zone %s at %d of %d healthy (needs %d)", rc.GetIdempotencyKey(), zone, z.GetHealthy(), z.GetMembers(), need)
				}
			}
		}
	}
	if _, err := f.promote(f.rollouts, 2, 1, 0, "stale"); connect.CodeOf(err) != connect.CodeAborted {
		t.Fatalf("promote with a stale pointer after the rollback = %v", err)
	}
	f.checkOrder()
}

func (f *fleet) promote(client pawlv1connect.RolloutServiceClient, gen, expected, epoch int64, key string) (*pawlv1.Receipt, error) {
	resp, err := client.Promote(f.ctx, connect.NewRequest(&pawlv1.PromoteRequest{
		ConfigId: "checkout", Generation: gen, ExpectedGeneration: expected, ExpectedEpoch: epoch, IdempotencyKey: key,
	}))
	if err != nil {
		return nil, err
	}
	return resp.Msg.GetReceipt(), nil
}
