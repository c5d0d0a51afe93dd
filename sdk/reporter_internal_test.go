package sdk

import (
	"context"
	"strings"
	"testing"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
)

// TestTheReporterHoldsDiscoveredForItsDownload: what an apply reports is
// taken by its sender all at once, up to an APPLIED; a DISCOVERED is held
// until the apply lets it go (the download needs the network, or is done),
// so that a release in hand is reported discovered and downloaded in one
// message; a reporter closed while it holds reports sends them.
func TestTheReporterHoldsDiscoveredForItsDownload(t *testing.T) {
	ctx := context.Background()
	r := &reporter{held: true, wake: make(chan struct{}, 1), done: make(chan struct{})}
	states := func(batch []queuedAck) string {
		var s []string
		for _, q := range batch {
			s = append(s, strings.TrimPrefix(q.state.String(), "INSTANCE_STATE_"))
		}
		return strings.Join(s, ",")
	}
	r.post(ctx, pawlv1.InstanceState_INSTANCE_STATE_DISCOVERED, ackExtra{})
	if batch, closed := r.tryTake(); batch != nil || closed {
		t.Fatalf("took %s while the DISCOVERED was held", states(batch))
	}
	r.post(ctx, pawlv1.InstanceState_INSTANCE_STATE_DOWNLOADED, ackExtra{})
	r.let()
	if batch, _ := r.tryTake(); states(batch) != "DISCOVERED,DOWNLOADED" {
		t.Fatalf("took %q once let go, want DISCOVERED,DOWNLOADED", states(batch))
	}
	for _, s := range []pawlv1.InstanceState{pawlv1.InstanceState_INSTANCE_STATE_VALIDATED, pawlv1.InstanceState_INSTANCE_STATE_STAGED,
		pawlv1.InstanceState_INSTANCE_STATE_APPLIED, pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED} {
		r.post(ctx, s, ackExtra{})
	}
	if batch, _ := r.tryTake(); states(batch) != "VALIDATED,STAGED,APPLIED" {
		t.Fatalf("took %q, want up to the APPLIED", states(batch))
	}
	if batch, _ := r.tryTake(); states(batch) != "HEALTHY_ACKED" {
		t.Fatalf("took %q, want the HEALTHY_ACKED after the APPLIED", states(batch))
	}

	held := &reporter{held: true, wake: make(chan struct{}, 1), done: make(chan struct{})}
	held.post(ctx, pawlv1.InstanceState_INSTANCE_STATE_DISCOVERED, ackExtra{})
	held.closed = true
	if batch, _ := held.tryTake(); states(batch) != "DISCOVERED" {
		t.Fatalf("a closed reporter took %q, want its held DISCOVERED", states(batch))
	}
	if batch, closed := held.tryTake(); batch != nil || !closed {
		t.Fatalf("a closed, empty reporter took %q (closed %v)", states(batch), closed)
	}
}
