package main

import (
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/faultproxy"
)

// TestTheAgentFollowsOnOneSessionOrAnOlderServersCalls: the agent
// registers, writes a release, reports it healthy and mirrors a prefix on
// one session, with no Ack or Watch call; against an older server (no
// session service) it does the same by those calls.
func TestTheAgentFollowsOnOneSessionOrAnOlderServersCalls(t *testing.T) {
	for _, older := range []bool{false, true} {
		t.Run(fmt.Sprintf("older=%v", older), func(t *testing.T) {
			srv, ctx, client, digest, records := startWatchingRecords(t)
			var hide []string
			if older {
				hide = append(hide, "/"+pawlv1connect.SessionServiceName+"/")
			}
			proxy := faultproxy.NewHider(t, srv.URL, hide...)
			dir := t.TempDir()
			lines := runAgent(t, "--server", proxy.URL, "--identity", "agent-1", "--prefix", "/flags/", "--dir", dir)
			await(t, lines, "mirrored 0 keys under /flags/")
			awaitRegistered(t, records, "agent-1")
			rs := pawlv1connect.NewReleaseServiceClient(client, srv.URL)
			if _, err := rs.CreateRelease(ctx, connect.NewRequest(&pawlv1.CreateReleaseRequest{Spec: &pawlv1.ReleaseSpec{
				ConfigId: "routing", MediaType: "application/json", ValidatorDigest: digest, Content: bigRouting(1),
				Stages:       []*pawlv1.Stage{{Name: "all", Policy: &pawlv1.AckPolicy{Kind: pawlv1.AckPolicyKind_ACK_POLICY_KIND_ALL}}},
				HealthWindow: durationpb.New(100 * time.Millisecond), Deadline: durationpb.New(time.Hour),
			}})); err != nil {
				t.Fatal(err)
			}
			await(t, lines, "wrote routing generation 1 to ")
			ro := pawlv1connect.NewRolloutServiceClient(client, srv.URL)
			for healthy := false; !healthy; {
				st, err := ro.GetRolloutStatus(ctx, connect.NewRequest(&pawlv1.GetRolloutStatusRequest{ConfigId: "routing", Generation: 1}))
				if err != nil {
					t.Fatal(err)
				}
				for _, a := range st.Msg.GetAcks() {
					healthy = healthy || a.GetState() == pawlv1.InstanceState_INSTANCE_STATE_HEALTHY_ACKED && a.GetCounted()
				}
				if !healthy && !records.Receive() { // the next record the server writes
					t.Fatal(records.Err())
				}
			}
			kv := pawlv1connect.NewKVServiceClient(client, srv.URL)
			if _, err := kv.Put(ctx, connect.NewRequest(&pawlv1.PutRequest{Key: "/flags/x", Value: []byte("on")})); err != nil {
				t.Fatal(err)
			}
			await(t, lines, "wrote /flags/x")
			sessions, acks, watches := proxy.Calls(pawlv1connect.SessionServiceSessionProcedure),
				proxy.Calls(pawlv1connect.RolloutServiceAckProcedure), proxy.Calls(pawlv1connect.KVServiceWatchProcedure)
			if sessions != 1 || (acks == 0 || watches == 0) != !older {
				t.Fatalf("%d sessions, %d Ack calls, %d Watch calls", sessions, acks, watches)
			}
		})
	}
}
