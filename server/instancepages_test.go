package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/gen/pawl/v1/pawlv1connect"
	"github.com/pawlcfg/pawl/internal/testkit/testserver"
)

// TestListInstancesPages: with a page size, ListInstances answers one page
// at a time in identity order, every page read at the revision of the
// first (an instance registered meanwhile is not in the listing); without
// one it answers every instance; a bad size or token is refused.
func TestListInstancesPages(t *testing.T) {
	srv := testserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	is := pawlv1connect.NewInstanceServiceClient(testserver.HTTPClient(t), srv.URL)
	for i := range 7 {
		register(t, is, fmt.Sprintf("pay-%d", i), "boot-1", "zone-a", nil)
	}
	var got []string
	token := ""
	pages := 0
	for {
		resp, err := is.ListInstances(ctx, connect.NewRequest(&pawlv1.ListInstancesRequest{PageSize: 3, PageToken: token}))
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if n := len(resp.Msg.GetInstances()); n > 3 {
			t.Fatalf("page %d has %d instances, more than the page size 3", pages, n)
		}
		for _, rec := range resp.Msg.GetInstances() {
			got = append(got, rec.GetInstance().GetWorkloadIdentity())
		}
		if pages == 1 {
			register(t, is, "pay-9", "boot-1", "zone-a", nil) // after the first page's revision
		}
		if token = resp.Msg.GetNextPageToken(); token == "" {
			break
		}
	}
	if want := "[pay-0 pay-1 pay-2 pay-3 pay-4 pay-5 pay-6]"; fmt.Sprint(got) != want || pages != 3 {
		t.Fatalf("pages = %d, instances = %v; want 3 pages of %s", pages, got, want)
	}
	all, err := is.ListInstances(ctx, connect.NewRequest(&pawlv1.ListInstancesRequest{}))
	if err != nil || len(all.Msg.GetInstances()) != 8 || all.Msg.GetNextPageToken() != "" {
		t.Fatalf("ListInstances without a page size = %v, %v; want all 8 instances", all, err)
	}
	for _, bad := range []*pawlv1.ListInstancesRequest{{PageSize: -1}, {PageToken: "not-a-token"}} {
		if _, err := is.ListInstances(ctx, connect.NewRequest(bad)); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("ListInstances(%v) = %v; want InvalidArgument", bad, err)
		}
	}
}
