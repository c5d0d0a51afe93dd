package rollout

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/records"
	"github.com/pawlcfg/pawl/server/internal/release"
	"github.com/pawlcfg/pawl/server/internal/store"
)

// AppliedRecord is what an instance last reported running for a config: the
// generation and content digest of its latest apply, as the first APPLIED
// or HEALTHY_ACKED of that apply reported it, from the boot that sent it,
// whether or not that ACK counted (a wrong digest is exactly what an
// operator needs to see). State is that first report's.
type AppliedRecord struct {
	ConfigID         string    `json:"config_id"`
	WorkloadIdentity string    `json:"workload_identity"`
	Generation       int64     `json:"generation"`
	ContentDigest    string    `json:"content_digest"`
	ValidatorDigest  string    `json:"validator_digest"`
	BootID           string    `json:"boot_id"`
	MembershipEpoch  int64     `json:"membership_epoch"`
	ApplySequence    int64     `json:"apply_sequence"`
	State            AckState  `json:"state"`
	ReportedAt       time.Time `json:"reported_at"`
	TraceParent      string    `json:"traceparent,omitempty"`
	TraceID          string    `json:"trace_id,omitempty"`
	// CurrentBoot is set on reading: the record comes from the instance's
	// current registration. After a restart it describes the previous
	// process until the new one reports.
	CurrentBoot bool `json:"-"`
}

// newApplied returns the applied record ack makes, if it makes one: an
// APPLIED or HEALTHY_ACKED from the instance's current registration that
// records a newer apply, within its boot, than the record it replaces. A
// report of the apply already recorded (HEALTHY_ACKED after its APPLIED)
// changes nothing the record says about what runs, and writes nothing.
func newApplied(ack Ack, reg registration, registered bool, prev *applyInfo) (AppliedRecord, bool) {
	if (ack.State != Applied && ack.State != HealthyAcked) || !registered || reg.boot != ack.BootID || reg.epoch != ack.MembershipEpoch {
		return AppliedRecord{}, false
	}
	if prev != nil && prev.boot == ack.BootID && prev.epoch == ack.MembershipEpoch {
		if prev.seq > ack.ApplySequence ||
			(prev.seq == ack.ApplySequence && prev.gen == ack.Generation && prev.contentDigest == ack.ContentDigest) {
			return AppliedRecord{}, false
		}
	}
	return AppliedRecord{
		ConfigID: ack.ConfigID, WorkloadIdentity: ack.WorkloadIdentity, Generation: ack.Generation,
		ContentDigest: ack.ContentDigest, ValidatorDigest: ack.ValidatorDigest, BootID: ack.BootID,
		MembershipEpoch: ack.MembershipEpoch, ApplySequence: ack.ApplySequence, State: ack.State,
		ReportedAt: ack.ReceivedAt, TraceParent: ack.TraceParent, TraceID: ack.TraceID,
	}, true
}

// appliedAll reads every applied record of a config at rev, by identity.
func (r *Rollouts) appliedAll(ctx context.Context, config string, rev int64) (map[string]AppliedRecord, error) {
	out := map[string]AppliedRecord{}
	_, err := store.EachAt(ctx, r.store, records.AppliedOf(config), rev, func(kv store.KeyValue) error {
		var rec AppliedRecord
		if err := records.Decode(kv, &rec); err != nil {
			return err
		}
		out[rec.WorkloadIdentity] = rec
		return nil
	})
	return out, err
}

// AppliedPage is one page of a config's applied records.
type AppliedPage struct {
	Records []AppliedRecord
	// Revision is the store revision every page of the listing is read at.
	Revision int64
	// More says whether records follow the last one.
	More bool
}

// ListApplied returns, for a config, what each instance last reported
// running, in identity order after the identity after ("" for the first
// page), at most limit of them, read at revision (0: now; give the first
// page's Revision for the next pages, so that the listing is one snapshot).
func (r *Rollouts) ListApplied(ctx context.Context, config string, revision int64, after string, limit int) (AppliedPage, error) {
	if err := release.CheckConfigID(config); err != nil {
		return AppliedPage{}, err
	}
	prefix := records.AppliedOf(config)
	start := ""
	if after != "" {
		start = prefix + after
	}
	page, err := r.store.List(ctx, prefix, revision, start, limit)
	if err != nil {
		return AppliedPage{}, err
	}
	regs, err := r.registry.Registrations(ctx, page.Revision)
	if err != nil {
		return AppliedPage{}, err
	}
	out := AppliedPage{Revision: page.Revision, More: page.More}
	for _, kv := range page.KVs {
		var rec AppliedRecord
		if err := records.Decode(kv, &rec); err != nil {
			return AppliedPage{}, err
		}
		reg, ok := regs[rec.WorkloadIdentity]
		rec.CurrentBoot = ok && reg.BootID == rec.BootID && reg.MembershipEpoch == rec.MembershipEpoch
		out.Records = append(out.Records, rec)
	}
	return out, nil
}

// Coverage says how much of a release's membership reported what it runs.
type Coverage struct {
	// Generation is the release's.
	Generation int64
	// Members are the unretired frozen members.
	Members int
	// Reported are the members whose current registration reported an
	// applied generation and content digest of the config (any generation).
	Reported int
	// OnRelease are the reported members running this release: its
	// generation with its content digest.
	OnRelease int
	// Mismatched are the reported members that run this release's
	// generation with another content digest.
	Mismatched int
	// Required is how many members must have reported before Promote:
	// the release's minimum coverage of Members, rounded up.
	Required int
	// Missing are the members that did not report, in identity order.
	Missing []string
}

// Met reports whether enough members reported for Promote.
func (c Coverage) Met() bool { return c.Reported >= c.Required }

// String reads like "9998 of 10000 members reported a digest; 9990 run
// generation 2".
func (c Coverage) String() string {
	s := fmt.Sprintf("%d of %d members reported a digest; %d run generation %d", c.Reported, c.Members, c.OnRelease, c.Generation)
	if c.Mismatched > 0 {
		s += fmt.Sprintf("; %d run generation %d with another digest", c.Mismatched, c.Generation)
	}
	if !c.Met() {
		s += fmt.Sprintf("; promote needs %d to have reported (missing: %s)", c.Required, c.missingList(10))
	}
	return s
}

func coverage(p plan, gen int64, digest string, applied map[string]applyInfo, regs map[string]registration) Coverage {
	c := Coverage{Generation: gen, Members: len(p.members), Required: quorum.AtLeast(p.rel.RequiredCoverage(), len(p.members))}
	for id := range p.members {
		rec, ok := applied[id]
		reg, registered := regs[id]
		if !ok || !registered || reg.boot != rec.boot || reg.epoch != rec.epoch {
			c.Missing = append(c.Missing, id)
			continue
		}
		c.Reported++
		switch {
		case rec.gen == gen && rec.contentDigest == digest:
			c.OnRelease++
		case rec.gen == gen:
			c.Mismatched++
		}
	}
	sort.Strings(c.Missing)
	return c
}

// staleMembers are the members that applied gen (their latest counted ACK
// from their current registration is APPLIED or HEALTHY_ACKED) although
// their assignment has moved past it.
func staleMembers(gen int64, members map[string]quorum.Member, latest map[string]Ack, cs configState, regs map[string]registration) map[string]bool {
	out := map[string]bool{}
	for id := range members {
		a, ok := latest[id]
		if !ok || (a.State != Applied && a.State != HealthyAcked) {
			continue
		}
		if run, _ := cs.assign(id, regs[id].appVersion); run == nil || run.Generation != gen {
			out[id] = true
		}
	}
	return out
}

// missingList names up to n missing members, and how many more there are.
func (c Coverage) missingList(n int) string {
	if len(c.Missing) <= n {
		return strings.Join(c.Missing, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(c.Missing[:n], ", "), len(c.Missing)-n)
}
