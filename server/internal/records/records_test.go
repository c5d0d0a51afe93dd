package records_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/pawlcfg/pawl/server/internal/instance"
	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/records"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/rollout"
	"github.com/pawlcfg/pawl/server/internal/store"
)

var update = flag.Bool("update", false, "rewrite the golden files from the records as encoded now")

var (
	t0      = time.Date(2026, 12, 3, 4, 5, 6, 7, time.UTC)
	digest  = "sha256:4cc05a569d0e0476ead9c79bad78dec881d0106b5002fca0a397695bb02fb577"
	vdigest = "sha256:3d2b1b584473b561017370ffb6d7cab47529314b2f64b3be14e707c008ddd42a"
	rate    = 0.01
	half    = 0.5
	eval    = quorum.Evaluation{Outcome: quorum.Passed, Reason: "every zone has its quorum (2 zones)", Members: 2, Healthy: 2,
		HealthyWeight: 2, TotalWeight: 2, Zones: map[string]quorum.ZoneTally{"zone-a": {Members: 1, Healthy: 1, Needed: 1}, "zone-b": {Members: 1, Healthy: 1, Needed: 1}}}
)

// goldens are one record of every type Pawl stores under /_pawl/, with
// every field set, as the domain packages define them.
var goldens = map[string]any{
	"release": &release.Release{
		Spec: release.Spec{
			ConfigID: "payments.routing", Content: []byte(`{"upstreams":[]}`), MediaType: "application/json",
			ValidatorDigest: vdigest, ValidatorParams: []byte(`{"strict":true}`), Selector: map[string]string{"env": "prod"},
			Dependencies: map[string]int64{"payments.limits": 3}, SecretRefs: []string{"db/password@7"}, MinAppVersion: "2.1.0", MinCoverage: &half,
			Stages: []release.Stage{
				{Name: "mirror", Selector: map[string]string{"zone": "zone-a"}, Shadow: true, Policy: quorum.Policy{Kind: quorum.All}},
				{Name: "canary", Policy: quorum.Policy{Kind: quorum.Fraction, Fraction: 0.05, MaxRejected: 1},
					Budget: &release.Budget{MaxErrorRate: &rate, MaxP99: 250 * time.Millisecond}},
				{Name: "zones", Policy: quorum.Policy{Kind: quorum.ZoneQuorum, Fraction: 0.9}},
				{Name: "primaries", Policy: quorum.Policy{Kind: quorum.CriticalRole, Role: "primary"}},
				{Name: "traffic", Policy: quorum.Policy{Kind: quorum.TrafficWeight, Fraction: 0.5}},
			},
			HealthWindow: time.Minute, Deadline: time.Hour,
		},
		Generation: 2, Predecessor: 1, ContentDigest: digest,
		Membership:      []*quorum.Member{{ID: "pay-1", Zone: "zone-a", Role: "primary", Weight: 1, Labels: map[string]string{"env": "prod"}, AppVersion: "2.1.0"}},
		Ineligible:      []quorum.Member{{ID: "pay-old", Zone: "zone-b", Role: "worker", Weight: 1, AppVersion: "1.9.0"}},
		MembershipEpoch: 41, State: release.StateCandidate, CreatedAt: t0, CreatedBy: "ci@example",
	},
	"pointer": &rollout.Pointer{Generation: 2, Epoch: 1, ReceiptKey: "/_pawl/configs/payments.routing/receipts/rb-1", HighWater: 3},
	"receipt": &rollout.Receipt{ConfigID: "payments.routing", From: 1, To: 2, Epoch: 0, Evidence: []quorum.Evaluation{eval},
		StageNames: []string{"zones"}, Actor: "alice", Time: t0, IdempotencyKey: "p-2",
		RequestID: "6f1d2c3b4a5968778695a4b3c2d1e0f0", Principal: "alice"},
	"rollback-receipt": &rollout.Receipt{ConfigID: "payments.routing", From: 3, To: 2, Epoch: 1, Rollback: true, Actor: "oncall",
		Time: t0, IdempotencyKey: "rb-1"},
	"progress": &rollout.Progress{ConfigID: "payments.routing", Generation: 2,
		Passed: []rollout.StagePass{{Stage: "canary", Time: t0, Evidence: eval}}},
	"stop": &rollout.Stop{ConfigID: "payments.routing", Generation: 3, Stage: "zones", Reason: "2 members rejected; the stage tolerates 1",
		Time: t0, Evidence: []quorum.Evaluation{{Outcome: quorum.Failed, Reason: "2 members rejected; the stage tolerates 1", Members: 2, Rejected: 2,
			Zones: map[string]quorum.ZoneTally{"zone-a": {Members: 2, Rejected: 2}}}}, StageNames: []string{"zones"}},
	"manual-stop": &rollout.Stop{ConfigID: "payments.routing", Generation: 4, Reason: "p99 up", Manual: true, Actor: "oncall", Time: t0,
		Evidence: []quorum.Evaluation{{Outcome: quorum.Waiting, Reason: "0 of 1 members healthy; all are needed", Members: 1}}, StageNames: []string{"all"}},
	"revocation": &rollout.Revocation{ConfigID: "payments.routing", Generation: 3, Reason: "leaks a token", Actor: "sec-oncall", Time: t0},
	"fence":      &rollout.Fence{ConfigID: "payments.routing", IdempotencyKey: "cli-1f2e", FencedAt: t0},
	"evidence":   &rollout.MemberEvidence{BootID: "boot-7", MembershipEpoch: 41, ApplySequence: 3, State: "healthy", ShadowState: "healthy"},
	"retirement": &rollout.Retirement{ConfigID: "payments.routing", Generation: 2, WorkloadIdentity: "pay-9", Reason: "host decommissioned",
		Actor: "oncall", Time: t0},
	"ack": &rollout.Ack{ConfigID: "payments.routing", Generation: 2, WorkloadIdentity: "pay-1", BootID: "boot-7", MembershipEpoch: 41,
		ContentDigest: digest, ValidatorDigest: vdigest, AppArtifact: "payments@2.1.0", ApplySequence: 3, State: rollout.HealthyAcked,
		HealthOK: true, Health: &rollout.Health{ErrorRate: 0.05, P99: 180 * time.Millisecond}, Reason: "",
		TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ReceivedAt: t0, Counted: true,
		Breach: `stage "canary": error rate 0.05 is over the budget of 0.01`},
	"shadow-ack": &rollout.Ack{ConfigID: "payments.routing", Generation: 2, WorkloadIdentity: "pay-1", BootID: "boot-7", MembershipEpoch: 41,
		ContentDigest: digest, ValidatorDigest: vdigest, ApplySequence: 2, State: rollout.Validated, ReceivedAt: t0, Counted: true, Shadow: true},
	"late-ack": &rollout.Ack{ConfigID: "payments.routing", Generation: 1, WorkloadIdentity: "pay-1", BootID: "boot-7", MembershipEpoch: 41,
		ContentDigest: digest, ValidatorDigest: vdigest, ApplySequence: 2, State: rollout.Rejected, Reason: "schema mismatch", ReceivedAt: t0,
		Why: "late: generation 1 is no longer active (active generation 2, epoch 0); its evidence is frozen"},
	"applied": &rollout.AppliedRecord{ConfigID: "payments.routing", WorkloadIdentity: "pay-1", Generation: 2, ContentDigest: digest,
		ValidatorDigest: vdigest, BootID: "boot-7", MembershipEpoch: 41, ApplySequence: 3, State: rollout.Applied, ReportedAt: t0,
		TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	"instance": &instance.Record{Instance: instance.Instance{WorkloadIdentity: "pay-1", BootID: "boot-7", Zone: "zone-a", Role: "primary",
		TrafficWeight: 1.5, AppVersion: "2.1.0", Labels: map[string]string{"env": "prod"}}, RegisteredAt: t0},
}

// TestStoredFormsAreStable encodes each record and compares it with its
// golden file, then decodes the golden file back into the same record:
// a change to a stored type that changes what is on disk, or what is read
// back from it, fails here first. Run with -update to accept a change on
// purpose, and say why in the commit.
func TestStoredFormsAreStable(t *testing.T) {
	for name, rec := range goldens {
		t.Run(name, func(t *testing.T) {
			got, err := records.Encode(rec)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", name+".json")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s is stored as\n%s\nbut the golden file says\n%s", name, got, want)
			}
			back := reflect.New(reflect.TypeOf(rec).Elem()).Interface()
			if err := records.Decode(store.KeyValue{Key: path, Value: want}, back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, rec) {
				t.Fatalf("%s read back as\n%+v\nwant\n%+v", name, back, rec)
			}
		})
	}
}

// TestEnumsAreStoredByName: policy kinds and outcomes are stored as names,
// never as the position of a constant; records written by numbers before
// are still read.
func TestEnumsAreStoredByName(t *testing.T) {
	b, err := records.Encode(quorum.Policy{Kind: quorum.ZoneQuorum, Fraction: 1})
	if err != nil || !bytes.Contains(b, []byte(`"kind":"zone-quorum"`)) {
		t.Fatalf("policy stored as %s, %v", b, err)
	}
	var p quorum.Policy
	if err := records.Decode(store.KeyValue{Value: []byte(`{"kind":3,"fraction":1}`)}, &p); err != nil || p.Kind != quorum.ZoneQuorum {
		t.Fatalf("a policy stored by number reads as %+v, %v", p, err)
	}
	var ev quorum.Evaluation
	if err := records.Decode(store.KeyValue{Value: []byte(`{"outcome":2}`)}, &ev); err != nil || ev.Outcome != quorum.Failed {
		t.Fatalf("an outcome stored by number reads as %+v, %v", ev, err)
	}
	for _, bad := range []string{`{"kind":"most"}`, `{"kind":true}`} {
		if err := records.Decode(store.KeyValue{Key: "/k", Value: []byte(bad)}, &p); err == nil {
			t.Fatalf("%s decoded", bad)
		}
	}
	if _, err := records.Encode(quorum.Policy{Kind: quorum.Kind(42)}); err == nil {
		t.Fatal("an unknown kind was stored")
	}
}

// TestKeyLayout pins every key Pawl writes under /_pawl/.
func TestKeyLayout(t *testing.T) {
	for got, want := range map[string]string{
		records.Index("c"):                    "/_pawl/index/configs/c",
		records.Head("c"):                     "/_pawl/configs/c/head",
		records.Release("c", 7):               "/_pawl/configs/c/releases/00000000000000000007",
		records.Releases("c"):                 "/_pawl/configs/c/releases/",
		records.Pointer("c"):                  "/_pawl/configs/c/active",
		records.Receipt("c", "k"):             "/_pawl/configs/c/receipts/k",
		records.Progress("c", 7):              "/_pawl/configs/c/progress/00000000000000000007",
		records.Stop("c", 7):                  "/_pawl/configs/c/stops/00000000000000000007",
		records.Retired("c", 7, "i/1"):        "/_pawl/configs/c/retired/00000000000000000007/i/1",
		records.Ack("c", 7, "i/1", 12):        "/_pawl/acks/c/00000000000000000007/i/1/00000000000000000012",
		records.Applied("c", "i/1"):           "/_pawl/applied/c/i/1",
		records.Revoked("c", 7):               "/_pawl/configs/c/revoked/00000000000000000007",
		records.Evidence("c", 7, "i/1"):       "/_pawl/evidence/c/00000000000000000007/i/1",
		records.Instance("i/1"):               "/_pawl/instances/i/1",
		records.ConfigsPrefix:                 "/_pawl/configs/",
		records.AcksOf("c", 7, "i"):           "/_pawl/acks/c/00000000000000000007/i/",
		records.RetiredOf("c", 7):             "/_pawl/configs/c/retired/00000000000000000007/",
		records.AppliedOf("c"):                "/_pawl/applied/c/",
		records.Stops("c") + "00000000000009": "/_pawl/configs/c/stops/00000000000009",
	} {
		if got != want {
			t.Errorf("key %q, want %q", got, want)
		}
	}
	if n, err := records.AckArrival(records.Ack("c", 7, "i/1", 12)); err != nil || n != 12 {
		t.Errorf("AckArrival = %d, %v", n, err)
	}
	if g, err := records.RevokedGeneration("c", records.Revoked("c", 9)); err != nil || g != 9 {
		t.Errorf("RevokedGeneration = %d, %v", g, err)
	}
	if g, err := records.StopGeneration("c", records.Stop("c", 9)); err != nil || g != 9 {
		t.Errorf("StopGeneration = %d, %v", g, err)
	}
}
