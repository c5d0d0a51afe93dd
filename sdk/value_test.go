package sdk_test

import (
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pawlv1 "github.com/pawlcfg/pawl/gen/pawl/v1"
	"github.com/pawlcfg/pawl/sdk"
)

// TestTypedReadsFollowReleases: sdk.Value reads one value of the applied
// release by JSON pointer or dotted path, as an int, a float, a string or
// a struct; a missing member, a value of another type and a config the
// client never had give the default (and Lookup says which); the next
// release's value is read once it is applied; a snapshot reads its own
// generation.
func TestTypedReadsFollowReleases(t *testing.T) {
	h := newHarness(t)
	c := h.client("svc")
	h.waitRegistered("svc")
	h.release(30, nil)
	first := has(t, c, 1)

	if got := sdk.Value(c, "routing", "/upstreams/0/weight", 100); got != 30 {
		t.Errorf("/upstreams/0/weight = %d, want 30", got)
	}
	if got := sdk.Value(c, "routing", "upstreams.1.weight", 0.5); got != 70 {
		t.Errorf("upstreams.1.weight as float64 = %v, want 70", got)
	}
	if got := sdk.Value(c, "routing", "/upstreams/1/host", "none"); got != "b" {
		t.Errorf("/upstreams/1/host = %q, want b", got)
	}
	type upstream struct {
		Host   string `json:"host"`
		Weight int    `json:"weight"`
	}
	if got := sdk.Value(c, "routing", "/upstreams/0", upstream{}); got != (upstream{"a", 30}) {
		t.Errorf("/upstreams/0 = %+v", got)
	}
	for _, tc := range []struct {
		pointer string
		want    error
	}{
		{"/max_amount", sdk.ErrNotFound},
		{"/upstreams/2/weight", sdk.ErrNotFound},
		{"/upstreams/x", sdk.ErrNotFound},
		{"/upstreams/0/weight/deeper", sdk.ErrNotFound},
	} {
		if got := sdk.Value(c, "routing", tc.pointer, 100); got != 100 {
			t.Errorf("%s = %d, want the default", tc.pointer, got)
		}
		if _, err := sdk.Lookup[int](c, "routing", tc.pointer); !errors.Is(err, tc.want) {
			t.Errorf("Lookup %s: %v, want %v", tc.pointer, err, tc.want)
		}
	}
	if got := sdk.Value(c, "routing", "/upstreams/0/host", 7); got != 7 {
		t.Errorf("a string read as an int gave %d, want the default", got)
	}
	if _, err := sdk.Lookup[int](c, "routing", "/upstreams/0/host"); err == nil || !strings.Contains(err.Error(), `"/upstreams/0/host" as int`) {
		t.Errorf("a string read as an int: %v", err)
	}
	if _, err := sdk.Lookup[int](c, "limits", "/max_amount"); !errors.Is(err, sdk.ErrNoSnapshot) {
		t.Errorf("a config never applied: %v", err)
	}
	if got := sdk.Value(c, "limits", "/max_amount", 100); got != 100 {
		t.Errorf("a config never applied gave %d", got)
	}
	if got := sdk.Value((*sdk.Snapshot)(nil), "routing", "", 1); got != 1 {
		t.Errorf("a nil snapshot gave %d", got)
	}

	h.release(80, nil)
	has(t, c, 2)
	if got := sdk.Value(c, "routing", "/upstreams/0/weight", 100); got != 80 {
		t.Errorf("after generation 2: %d, want 80", got)
	}
	if got := sdk.Value(first, "", "/upstreams/0/weight", 100); got != 30 {
		t.Errorf("generation 1's snapshot reads %d, want 30", got)
	}
	if _, err := sdk.Lookup[int](first, "limits", "/x"); !errors.Is(err, sdk.ErrNoSnapshot) {
		t.Errorf("a snapshot asked for another config: %v", err)
	}
}

// TestTypedReadsOnASpaceAreRelativeToItsPrefix: on a space, the id is a
// key relative to the prefix and the pointer reads into its JSON value; a
// change to the key is read after the space reaches its revision.
func TestTypedReadsOnASpaceAreRelativeToItsPrefix(t *testing.T) {
	h := newHarness(t)
	c := h.client("", sdk.WithoutAssignments())
	put := func(key, value string) int64 {
		resp, err := h.kv.Put(h.ctx, connect.NewRequest(&pawlv1.PutRequest{Key: key, Value: []byte(value)}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg.GetRevision()
	}
	put("/flags/limits", `{"max_amount": 250, "tiers": ["gold", "silver"]}`)
	put("/flags/plain", `not json`)
	space, err := c.Space(h.ctx, "/flags/")
	if err != nil {
		t.Fatal(err)
	}
	defer space.Close()
	if got := sdk.Value(space, "limits", "/max_amount", 100); got != 250 {
		t.Errorf("limits /max_amount = %d, want 250", got)
	}
	if got := sdk.Value(space, "limits", "tiers.1", ""); got != "silver" {
		t.Errorf("limits tiers.1 = %q", got)
	}
	if got := sdk.Value(space, "limits", "", map[string]any(nil)); len(got) != 2 {
		t.Errorf("the whole value: %v", got)
	}
	if got := sdk.Value(space, "/flags/limits", "/max_amount", 100); got != 100 {
		t.Errorf("a full key is not relative to the prefix, and read %d", got)
	}
	if _, err := sdk.Lookup[string](space, "plain", ""); err == nil || !strings.Contains(err.Error(), "not JSON") {
		t.Errorf("a value that is not JSON: %v", err)
	}
	if err := space.WaitRevision(h.ctx, put("/flags/limits", `{"max_amount": 500}`)); err != nil {
		t.Fatal(err)
	}
	if got := sdk.Value(space, "limits", "/max_amount", 100); got != 500 {
		t.Errorf("after the change: %d, want 500", got)
	}
}
