package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
	"github.com/pawlcfg/pawl/server"
	"github.com/pawlcfg/pawl/server/internal/store"
)

// TestALookupOverConnectFencesAPromoteInFlight holds a Promote inside its
// commit while a client looks its key up, as the CLI does after a lost
// answer: the lookup answers NOT_FOUND, so the Promote in flight fails
// (ABORTED) and no receipt appears; the same key sent again is refused
// too (a request delayed in the server looks the same), and a new key
// promotes.
// (Before the fence, the receipt appeared after the lookup said the
// promotion did not happen.)
func TestALookupOverConnectFencesAPromoteInFlight(t *testing.T) {
	hook := &commitHook{}
	srv := testserver.Start(t, server.WithStoreWrapper(func(st store.Store) store.Store { hook.Store = st; return hook }))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newCanaryRollout(t, ctx, srv)
	register(t, c.is, "canary-1", "b", "zone-a", map[string]string{"canary": "true"})
	register(t, c.is, "main-1", "b", "zone-b", nil)
	rel := c.create(50)
	c.ack(rel, "canary-1")
	c.ack(rel, "main-1")
	key := "p1"
	lookup := func() error {
		_, err := c.ro.GetPromotion(ctx, connect.NewRequest(&pawlv1.GetPromotionRequest{ConfigId: "routing", IdempotencyKey: key}))
		return err
	}
	var inFlight error
	hook.arm("/_pawl/configs/routing/receipts/p1", func() { inFlight = lookup() })
	promote := func() (*connect.Response[pawlv1.PromoteResponse], error) {
		return c.ro.Promote(ctx, connect.NewRequest(&pawlv1.PromoteRequest{ConfigId: "routing", Generation: 1, IdempotencyKey: key}))
	}
	resp, err := promote()
	if hook.ran() != 1 {
		t.Fatal("the lookup did not land inside the promotion's commit")
	}
	if connect.CodeOf(inFlight) != connect.CodeNotFound {
		t.Fatalf("lookup while the promotion was in flight = %v", inFlight)
	}
	if connect.CodeOf(err) != connect.CodeAborted || !strings.Contains(err.Error(), "was looked up and found no receipt, which fences it for good") {
		t.Fatalf("the promotion in flight after the lookup said not found = %v, %v", resp, err)
	}
	if err := lookup(); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("lookup after the fenced promotion = %v", err)
	}
	ptr, err := c.ro.GetPointer(ctx, connect.NewRequest(&pawlv1.GetPointerRequest{ConfigId: "routing"}))
	if err != nil || ptr.Msg.GetPointer().GetGeneration() != 0 {
		t.Fatalf("pointer after the fenced promotion = %v, %v", ptr, err)
	}
	if resp, err = promote(); connect.CodeOf(err) != connect.CodeAborted {
		t.Fatalf("the same key sent again = %v, %v; want ABORTED", resp, err)
	}
	key = "p2"
	if resp, err = promote(); err != nil || resp.Msg.GetReceipt().GetToGeneration() != 1 {
		t.Fatalf("the promotion with a new key = %v, %v", resp, err)
	}
	if err := lookup(); err != nil {
		t.Fatalf("lookup after the promotion = %v", err)
	}
}
