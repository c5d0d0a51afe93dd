package rollout

import (
	"fmt"

	"github.com/pawlcfg/pawl/server/internal/quorum"
	"github.com/pawlcfg/pawl/server/internal/records"
	"github.com/pawlcfg/pawl/server/internal/store"
)

// A Promote decides on each frozen member's counted state, not on every
// report: its write must not fail because of a report that changed none.
// So a counted ACK that changes its member's quorum state also writes an
// evidence record (outside configs/, so no assignment stream wakes), and
// Promote's transaction holds those records, with the frozen members'
// registrations, unchanged; ACKs that do not count, or count and change no
// quorum state, write none. Coverage needs no record: it only grows while
// a registration lasts (a new registration is compared), so a report that
// adds to it never makes a passed gate fail.

// MemberEvidence is the evidence record of a member of one release: its
// quorum state, in a stage and in a shadow stage, after a counted ACK of
// its current registration.
type MemberEvidence struct {
	BootID          string `json:"boot_id"`
	MembershipEpoch int64  `json:"membership_epoch"`
	ApplySequence   int64  `json:"apply_sequence"`
	// State and ShadowState are "pending", "healthy" or "rejected": names,
	// never the position of a constant.
	State       string `json:"state"`
	ShadowState string `json:"shadow_state"`
}

// quorumStateNames are the stored names of quorum states.
var quorumStateNames = map[quorum.State]string{quorum.Pending: "pending", quorum.Healthy: "healthy", quorum.Rejected: "rejected"}

// evidencePut returns the evidence record a counted ACK writes when it
// changes its member's quorum state, given its member's earlier counted
// ACKs of the registration (ok false: none).
func evidencePut(prior []Ack, ack Ack) (store.Put, bool, error) {
	if !ack.Counted || !changesQuorumState(prior, ack) {
		return store.Put{}, false, nil
	}
	b, err := records.Encode(MemberEvidence{BootID: ack.BootID, MembershipEpoch: ack.MembershipEpoch, ApplySequence: ack.ApplySequence,
		State: quorumStateNames[quorumState(ack, false)], ShadowState: quorumStateNames[quorumState(ack, true)]})
	if err != nil {
		return store.Put{}, false, fmt.Errorf("rollout: encode evidence of %s: %w", ack.WorkloadIdentity, err)
	}
	return store.Put{Key: records.Evidence(ack.ConfigID, ack.Generation, ack.WorkloadIdentity), Value: b}, true, nil
}

// changesQuorumState reports whether a counted ACK moves its member's
// quorum state, in a stage or a shadow stage, from the state its earlier
// counted ACKs of the registration left (a counted ACK is never out of
// order, so it becomes the member's latest).
func changesQuorumState(prior []Ack, ack Ack) bool {
	before := latestOf(prior)
	if before == nil {
		return true
	}
	for _, shadow := range []bool{false, true} {
		if quorumState(*before, shadow) != quorumState(ack, shadow) {
			return true
		}
	}
	return false
}

// latestOf is the member's state among its counted ACKs, in arrival order:
// the highest apply sequence, and of equal ones the last to arrive.
func latestOf(acks []Ack) *Ack {
	var latest *Ack
	for i := range acks {
		if latest == nil || acks[i].ApplySequence >= latest.ApplySequence {
			latest = &acks[i]
		}
	}
	return latest
}
