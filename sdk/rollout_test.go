package sdk_test

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/sdk"
)

var everyStep = []string{"DISCOVERED", "DOWNLOADED", "VALIDATED", "STAGED", "APPLIED", "HEALTHY_ACKED"}

type table struct {
	Upstreams []struct {
		Host   string `json:"host"`
		Weight int    `json:"weight"`
	} `json:"upstreams"`
}

// canaryThenEveryone is a plan whose first stage takes the instances
// labelled canary=true.
func canaryThenEveryone(spec *pawlv1.ReleaseSpec) {
	spec.Stages = []*pawlv1.Stage{
		{Name: "canary", Selector: map[string]string{"canary": "true"}, Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}},
		{Name: "everyone", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ZONE_QUORUM, Fraction: 1}},
	}
}

// TestAFleetOfClientsRollsOutAndIsPromoted: six SDK clients in three
// zones take two releases through every step to HEALTHY_ACKED, the canary
// first, and each is promoted on their evidence.
func TestAFleetOfClientsRollsOutAndIsPromoted(t *testing.T) {
	h := newHarness(t)
	var ids []string
	clients := map[string]*sdk.Client{}
	for i := range 6 {
		id := fmt.Sprintf("i%d", i)
		opts := []sdk.Option{sdk.WithZone(fmt.Sprintf("zone-%c", 'a'+i%3))}
		if i == 0 {
			opts = append(opts, sdk.WithLabels(map[string]string{"canary": "true"}))
		}
		clients[id] = h.client(id, opts...)
		ids = append(ids, id)
	}
	h.waitRegistered(ids...)

	for _, step := range []struct {
		gen    int64
		weight int
	}{{1, 50}, {2, 70}} {
		rel := h.release(step.weight, canaryThenEveryone)
		if rel.GetGeneration() != step.gen {
			t.Fatalf("generation %d, want %d", rel.GetGeneration(), step.gen)
		}
		states := h.awaitAcks(step.gen, func(states map[string][]string) bool {
			for _, id := range ids {
				if !reported(states, id, "HEALTHY_ACKED") {
					return false
				}
			}
			return true
		})
		for _, id := range ids {
			if !slices.Equal(states[id], everyStep) {
				t.Errorf("generation %d: %s reported %v, want %v", step.gen, id, states[id], everyStep)
			}
			s := has(t, clients[id], step.gen)
			if !bytes.Equal(s.Content, routing(step.weight)) || s.ContentDigest != rel.GetContentDigest() || s.ValidatorDigest != h.digest || s.FromCache {
				t.Errorf("%s holds %+v", id, s)
			}
			v, err := sdk.JSON[table](s)
			if err != nil || v.Upstreams[0].Weight != step.weight {
				t.Errorf("%s decodes %+v, %v", id, v, err)
			}
			if again, _ := sdk.JSON[table](s); again != v {
				t.Errorf("JSON decoded generation %d twice", step.gen)
			}
		}
		st := h.status(step.gen)
		for _, stage := range st.GetStages() {
			if stage.GetOutcome() != "passed" {
				t.Fatalf("stage %s: %s (%s)", stage.GetName(), stage.GetOutcome(), stage.GetReason())
			}
		}
		h.promote(step.gen)
	}
}

// TestAShadowStageValidatesWithoutApplying: the shadow instance downloads
// and validates the new generation and reports VALIDATED, keeps running
// the active one while the rest of the fleet applies the new one (no
// stage that applies takes it), and applies it only once it is promoted.
func TestAShadowStageValidatesWithoutApplying(t *testing.T) {
	h := newHarness(t)
	shadow := h.client("shadow-1", sdk.WithLabels(map[string]string{"shadow": "true"}))
	main := h.client("main-1", sdk.WithLabels(map[string]string{"lane": "main"}))
	h.waitRegistered("shadow-1", "main-1")
	h.release(50, nil)
	h.awaitAcks(1, func(s map[string][]string) bool {
		return reported(s, "shadow-1", "HEALTHY_ACKED") && reported(s, "main-1", "HEALTHY_ACKED")
	})
	h.promote(1)

	h.release(80, func(spec *pawlv1.ReleaseSpec) {
		spec.Stages = []*pawlv1.Stage{
			{Name: "shadow", Shadow: true, Selector: map[string]string{"shadow": "true"}, Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}},
			{Name: "main", Selector: map[string]string{"lane": "main"}, Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}},
		}
	})
	states := h.awaitAcks(2, func(s map[string][]string) bool { return reported(s, "main-1", "HEALTHY_ACKED") })
	if want := []string{"DISCOVERED", "DOWNLOADED", "VALIDATED"}; !slices.Equal(states["shadow-1"], want) {
		t.Fatalf("the shadow instance reported %v, want %v", states["shadow-1"], want)
	}
	if s := shadow.Config("routing"); s.Generation != 1 {
		t.Fatalf("the shadow instance applied %s before promotion", s)
	}
	has(t, main, 2)
	h.promote(2)
	has(t, shadow, 2)
	states = h.awaitAcks(2, func(s map[string][]string) bool { return reported(s, "shadow-1", "HEALTHY_ACKED") })
	if got := states["shadow-1"]; !slices.Equal(got[3:], everyStep) {
		t.Fatalf("after promotion the shadow instance reported %v", got)
	}
}

// TestARestartReappliesUnderTheNewBoot: an instance that restarts after
// its HEALTHY_ACKED starts from its cache, then applies and reports the
// generation again under its new boot, and that report is what counts.
func TestARestartReappliesUnderTheNewBoot(t *testing.T) {
	h := newHarness(t)
	cache := t.TempDir()
	first := h.client("i0", sdk.WithCacheDir(cache))
	h.waitRegistered("i0")
	h.release(50, func(spec *pawlv1.ReleaseSpec) { spec.HealthWindow = durationpb.New(0) })
	h.awaitAcks(1, func(s map[string][]string) bool { return reported(s, "i0", "HEALTHY_ACKED") })
	oldBoot := first.BootID()
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	second := h.client("i0", sdk.WithCacheDir(cache))
	if s := second.Config("routing"); s == nil || s.Generation != 1 || !s.FromCache {
		t.Fatalf("after the restart, before the server answered: %+v", s)
	}
	if second.BootID() == oldBoot {
		t.Fatal("the restarted client kept its boot ID")
	}
	if newBoot := h.awaitBootHealthy(1, second.BootID()); !slices.Equal(newBoot, everyStep) {
		t.Fatalf("the new boot reported %v", newBoot)
	}
	if s := has(t, second, 1); s.FromCache {
		t.Fatal("the snapshot is still the cached one after the new boot applied it")
	}
}

// TestAnIdleValidatorIsUnloadedAndLoadedAgain: once no apply holds it, a
// validator gives its memory back, and the next release loads it again
// (from the compilation cache) and applies.
func TestAnIdleValidatorIsUnloadedAndLoadedAgain(t *testing.T) {
	h := newHarness(t)
	// A runtime of its own (clients share one per cache directory and
	// limit): a limit no other client has, rather than a cache directory
	// of its own, where the module would compile cold (half a minute
	// under -race).
	c := h.client("i0", sdk.WithValidatorTimeout(testserver.TestValidatorTimeout+time.Second))
	h.waitRegistered("i0")
	h.release(50, nil)
	h.awaitAcks(1, func(s map[string][]string) bool { return reported(s, "i0", "HEALTHY_ACKED") })
	if loaded := sdk.CloseIdleValidators(c); loaded != 0 {
		t.Fatalf("%d validators stay loaded after the apply", loaded)
	}
	h.release(60, nil)
	states := h.awaitAcks(2, func(s map[string][]string) bool { return reported(s, "i0", "HEALTHY_ACKED") })
	if !slices.Equal(states["i0"], everyStep) {
		t.Fatalf("after the unload: %v", states["i0"])
	}
	has(t, c, 2)
}
